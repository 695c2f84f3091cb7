"""The trusted side of a scored sample: its tests run here, the sample's functions in the sandbox, over two pipes.

A sample used to be judged inside its own interpreter, where it could read the tests, patch what they compare with
or forge the report. Now the tests, the prompt's helpers and the verdict never enter the sandbox:

- pit.evaluation.sandbox starts the sample (pit.evaluation.harness, in bubblewrap) and this module's `helper_main`
  in a fresh trusted interpreter (`python -I -S`, no sandbox, not reachable from it: another PID namespace, or
  another uid in the weaker mode), and connects them with a CALL pipe (helper -> sandbox) and a REPLY pipe;
- the sandbox runs the solution, says `ready`, then serves calls one at a time: a function name and arguments in,
  the value (or the exception the call raised) out;
- the helper runs the tests with the trusted builtins and modules: HumanEval's prompt (valid Python on its own: its
  helpers such as `poly` or `encode_cyclic` are the trusted copies) and tests are executed here and `check` is
  called on a `Proxy` of the entry point; MBPP's setup code and asserts are executed here with every name the
  asserts use but neither they, the setup nor the builtins define bound to a `Proxy` (a standard module used only
  as `math.isclose` is imported instead). The sample passes iff the tests run to their end with no exception.

Values cross as plain data only (`encode`, `decode`): a tagged JSON encoding of None, bool, int, float (nan and inf
included), complex, str, bytes, bytearray, list, tuple, set, frozenset, dict (any plain keys), range and the standard
library's Counter, OrderedDict, defaultdict (of a built-in factory), deque, Decimal and Fraction, matched by exact
type (`type(x) is ...`: a subclass or the sample's own class is an error, and the call fails); an iterator returned
by the solution is read to its end (at most MAX_ITEMS items) in the sandbox and arrives as an iterator. The helper
decodes into its own classes, so a sample that patches `Fraction.__eq__` or `Counter.__eq__` in the sandbox patches
nothing the tests use. A reply is bounded (MAX_MESSAGE bytes, MAX_DEPTH levels) and must answer the call it
follows; anything else, and a call that is not answered before the sample's deadline, fails the sample. Those
failures are BaseExceptions (`Violation`, `Timeout`, `Ended`), which tests that catch `Exception` do not swallow,
and they are remembered by the channel: the verdict is failed even if a test swallowed one.

This file is also sent, as source, into the sandbox in front of pit.evaluation.harness (the codec and the framing
are shared; nothing here is secret). It uses the standard library only and no `from __future__` import.
"""

import collections
import decimal
import fractions
import itertools
import json
import os
import select
import struct
import sys
import time
import types

MAX_MESSAGE = 8 << 20  # bytes in one message (the JSON text)
MAX_DEPTH = 100  # nesting of lists, tuples, dicts, ... in one value
MAX_ITEMS = 100_000  # items read from an iterator the solution returns
_HEADER = struct.Struct(">I")  # a message is its length, then its JSON text
_BIG = 1 << 63  # ints at least this large cross as hexadecimal text (JSON readers cap decimal digits)


class CodecError(ValueError):
    """A value that is not plain data, or a message that does not decode."""


class Violation(BaseException):
    """The sample's side broke the protocol (a reply that is not plain data, that answers no call, ...)."""


class Timeout(BaseException):
    """A call was not answered before the sample's deadline."""


class Ended(BaseException):
    """The sandbox closed its reply pipe (it exited, crashed or closed the pipe)."""


class SolutionError(Exception):
    """The solution raised an exception that is not one of the built-in exception classes."""


# --- the codec: plain data <-> JSON values ------------------------------------------------------------------------

_TAGS = {
    tuple: "tuple",
    set: "set",
    frozenset: "frozenset",
    dict: "dict",
    complex: "complex",
    bytes: "bytes",
    bytearray: "bytearray",
    range: "range",
    collections.Counter: "Counter",
    collections.OrderedDict: "OrderedDict",
    collections.defaultdict: "defaultdict",
    collections.deque: "deque",
    decimal.Decimal: "Decimal",
    fractions.Fraction: "Fraction",
}
_FACTORIES = {"int": int, "float": float, "str": str, "bytes": bytes, "bool": bool, "list": list, "tuple": tuple}
_FACTORIES.update({"set": set, "frozenset": frozenset, "dict": dict})
_ITERATORS = {types.GeneratorType, map, filter, zip, enumerate, reversed, type(reversed([]))}
_ITERATORS |= {type(iter(x)) for x in ([], (), "", b"", range(0), set(), {}, {}.values(), {}.items(), bytearray())}
_ITERATORS |= {t for t in vars(itertools).values() if isinstance(t, type)}
_ITERATORS = frozenset(_ITERATORS)


def encode(value, depth: int = 0):
    """`value` as a JSON value: None, bool, str, float and ints below 2**63 as themselves, lists as arrays, every
    other plain type as a one-key object {tag: payload}. Types are matched exactly; anything else is a CodecError."""
    if depth > MAX_DEPTH:
        raise CodecError("the value is nested too deeply")
    kind = type(value)
    if value is None or kind is bool or kind is str or kind is float:
        return value
    if kind is int:
        return value if -_BIG < value < _BIG else {"int": hex(value)}
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    tag = _TAGS.get(kind)
    if tag is None:
        raise CodecError(f"an object of type {kind.__name__!r} (not plain data)")
    return {tag: _payload(tag, value, depth + 1)}


def _payload(tag: str, value, depth: int):
    if tag in ("tuple", "set", "frozenset"):
        return [encode(v, depth) for v in value]
    if tag in ("dict", "Counter", "OrderedDict"):
        return [[encode(k, depth), encode(v, depth)] for k, v in value.items()]
    if tag == "defaultdict":
        names = [name for name, factory in _FACTORIES.items() if factory is value.default_factory]
        if value.default_factory is not None and not names:
            raise CodecError("a defaultdict whose factory is not a built-in type is not plain data")
        return [names[0] if names else None, [[encode(k, depth), encode(v, depth)] for k, v in value.items()]]
    if tag == "deque":
        return [value.maxlen, [encode(v, depth) for v in value]]
    if tag == "complex":
        return [value.real, value.imag]
    if tag in ("bytes", "bytearray"):
        return value.hex()
    if tag == "range":
        return [encode(value.start), encode(value.stop), encode(value.step)]
    if tag == "Fraction":
        return [encode(value.numerator), encode(value.denominator)]
    return str(value)  # Decimal


def encode_result(value):
    """What a call returned: plain data, or an iterator read to its end here (at most MAX_ITEMS items)."""
    if type(value) in _ITERATORS:
        items = list(itertools.islice(value, MAX_ITEMS + 1))
        if len(items) > MAX_ITEMS:
            raise CodecError(f"the returned iterator yields more than {MAX_ITEMS} items")
        return {"iter": [encode(v, 1) for v in items]}
    return encode(value)


def decode(data, depth: int = 0):
    """The plain value of a JSON value made by `encode`, built from this interpreter's classes; bounded in depth.
    Anything that `encode` does not make is a CodecError."""
    try:
        return _decode(data, depth)
    except CodecError:
        raise
    except (TypeError, ValueError, ArithmeticError, RecursionError, MemoryError) as err:
        raise CodecError(f"{type(err).__name__}: {err}") from None


def _decode(data, depth: int):
    if depth > MAX_DEPTH:
        raise CodecError("the value is nested too deeply")
    kind = type(data)
    if data is None or kind is bool or kind is int or kind is float or kind is str:
        return data
    if kind is list:
        return [_decode(v, depth + 1) for v in data]
    if kind is not dict or len(data) != 1:
        raise CodecError("not an encoded value")
    ((tag, payload),) = data.items()
    maker = _DECODERS.get(tag)
    if maker is None:
        raise CodecError(f"unknown type tag {str(tag)[:40]!r}")
    return maker(payload, depth + 1)


def _list(payload, depth: int, size: int | None = None) -> list:
    if type(payload) is not list or (size is not None and len(payload) != size):
        raise CodecError("a malformed encoded value")
    return [_decode(v, depth) for v in payload]


def _pairs(payload, depth: int) -> list:
    if type(payload) is not list or any(type(p) is not list or len(p) != 2 for p in payload):
        raise CodecError("a malformed mapping")
    return [(_decode(k, depth), _decode(v, depth)) for k, v in payload]


def _text(payload) -> str:
    if type(payload) is not str:
        raise CodecError("a malformed encoded value")
    return payload


def _ints(payload, depth: int, size: int) -> list:
    values = _list(payload, depth, size)
    if any(type(v) is not int for v in values):
        raise CodecError("a malformed encoded value")
    return values


def _defaultdict(payload, depth: int):
    if type(payload) is not list or len(payload) != 2 or (payload[0] is not None and payload[0] not in _FACTORIES):
        raise CodecError("a malformed defaultdict")
    return collections.defaultdict(_FACTORIES.get(payload[0]), _pairs(payload[1], depth))


def _deque(payload, depth: int):
    if type(payload) is not list or len(payload) != 2 or not (payload[0] is None or type(payload[0]) is int):
        raise CodecError("a malformed deque")
    return collections.deque(_list(payload[1], depth), payload[0])


def _complex(payload, depth: int) -> complex:
    parts = _list(payload, depth, 2)
    if any(type(p) is not float and type(p) is not int for p in parts):
        raise CodecError("a malformed complex")
    return complex(*parts)


def _int(payload, depth: int) -> int:
    text = _text(payload)
    if len(text) > 2 * MAX_MESSAGE:
        raise CodecError("an int too large")
    return int(text, 16)


_DECODERS = {
    "int": _int,
    "tuple": lambda p, d: tuple(_list(p, d)),
    "set": lambda p, d: set(_list(p, d)),
    "frozenset": lambda p, d: frozenset(_list(p, d)),
    "dict": lambda p, d: dict(_pairs(p, d)),
    "Counter": lambda p, d: collections.Counter(dict(_pairs(p, d))),
    "OrderedDict": lambda p, d: collections.OrderedDict(_pairs(p, d)),
    "defaultdict": _defaultdict,
    "deque": _deque,
    "complex": _complex,
    "bytes": lambda p, d: bytes.fromhex(_text(p)),
    "bytearray": lambda p, d: bytearray.fromhex(_text(p)),
    "range": lambda p, d: range(*_ints(p, d, 3)),
    "Decimal": lambda p, d: decimal.Decimal(_text(p)),
    "Fraction": lambda p, d: fractions.Fraction(*_ints(p, d, 2)),
    "iter": lambda p, d: iter(_list(p, d)),
}


# --- framing: one JSON message per length-prefixed frame -------------------------------------------------------


def send(fd: int, message: dict) -> None:
    """Write one message (ASCII JSON: a lone surrogate in a str is escaped, not fatal)."""
    body = json.dumps(message, separators=(",", ":")).encode()
    view = memoryview(_HEADER.pack(len(body)) + body)
    while view:
        view = view[os.write(fd, view) :]


def receive(fd: int, deadline: float | None = None, limit: int = MAX_MESSAGE):
    """The next message on `fd`, None at end of file. With a deadline (time.monotonic()), Timeout once it passes;
    a frame over `limit` bytes, a truncated frame or text that is not JSON is a CodecError."""
    header = _read_exact(fd, _HEADER.size, deadline)
    if header is None:
        return None
    if len(header) != _HEADER.size:
        raise CodecError("a truncated message")
    (size,) = _HEADER.unpack(header)
    if size > limit:
        raise CodecError(f"a message of {size} bytes (the limit is {limit})")
    body = _read_exact(fd, size, deadline)
    if body is None:
        raise CodecError("a truncated message")
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as err:
        raise CodecError(f"a message that is not JSON: {str(err)[:80]}") from None


def _read_exact(fd: int, size: int, deadline: float | None) -> bytes | None:
    chunks, left = [], size
    while left:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise Timeout
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None if left == size else b""
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# --- the trusted side: a channel to the sandbox, proxies, the test runner ----------------------------------------


class Channel:
    """The helper's end of the pipes: one call at a time, each answered before the deadline by the reply it asks
    for. The first Violation, Timeout or Ended is kept in `failure` and raised again on every later call."""

    def __init__(self, call_fd: int, reply_fd: int, deadline: float):
        self.call_fd, self.reply_fd, self.deadline = call_fd, reply_fd, deadline
        self.calls, self.failure = 0, None

    def receive(self, expected: str):
        """The next message, which must be {"m": expected, ...}; None at end of file."""
        try:
            message = receive(self.reply_fd, self.deadline)
        except CodecError as err:
            raise self.fail(Violation(f"the sandbox sent {err}")) from None
        except Timeout:
            raise self.fail(Timeout()) from None
        if message is not None and (type(message) is not dict or message.get("m") != expected):
            raise self.fail(Violation(f"the sandbox sent a message that is not a {expected!r}"))
        return message

    def fail(self, failure: BaseException) -> BaseException:
        self.failure = self.failure or failure
        return self.failure

    def call(self, name: str, args: tuple, kwargs: dict):
        """Call the solution's `name` in the sandbox; its value, or the exception it raised, raised here."""
        if self.failure is not None:
            raise self.failure
        try:
            request = {"name": name, "args": [encode(a) for a in args]}
            request["kwargs"] = [[k, encode(v)] for k, v in kwargs.items()]
        except CodecError as err:  # the tests' own argument: a problem of the task, not of the sample
            raise TypeError(f"{name}(): {err}; only plain data crosses into the sandbox") from None
        self.calls += 1
        try:
            send(self.call_fd, {"m": "call", "n": self.calls, **request})
        except OSError:
            raise self.fail(Ended()) from None
        reply = self.receive("reply")
        if reply is None:
            raise self.fail(Ended())
        if reply.get("n") != self.calls:
            raise self.fail(Violation("the sandbox sent a reply to another call"))
        if "raised" in reply:
            raise _raised(self, reply["raised"])
        if "error" in reply:
            raise self.fail(Violation(str(reply["error"])[:300]))
        if "value" not in reply:
            raise self.fail(Violation("the sandbox sent a reply without a value"))
        try:
            return decode(reply["value"])
        except CodecError as err:
            raise self.fail(Violation(f"{name}() returned {err}")) from None


class Proxy:
    """Stands for one of the solution's functions in the tests: calling it is a call in the sandbox."""

    __slots__ = ("_channel", "_name")

    def __init__(self, channel: Channel, name: str):
        self._channel, self._name = channel, name

    def __call__(self, *args, **kwargs):
        return self._channel.call(self._name, args, kwargs)

    def __repr__(self) -> str:
        return f"<the solution's {self._name}>"


def _raised(channel: Channel, raised) -> BaseException:
    """The exception a call raised in the sandbox, rebuilt from its built-in class's name and its text. Exceptions
    that steer control flow (SystemExit, StopIteration, ...) are violations, so `all(map(candidate, xs))` cannot be
    cut short; other classes become SolutionError."""
    import builtins

    if type(raised) is not list or len(raised) != 2 or not all(type(x) is str for x in raised):
        return channel.fail(Violation("the sandbox sent a malformed exception"))
    name, text = raised[0][:100], raised[1][:2000]
    kind = getattr(builtins, name, None) if name.isidentifier() else None
    if not (isinstance(kind, type) and issubclass(kind, BaseException)):
        return SolutionError(text)
    if not issubclass(kind, Exception) or issubclass(kind, StopIteration | StopAsyncIteration):
        return channel.fail(Violation(f"the solution raised {name}: {text}"))
    try:
        return kind(text)
    except Exception:  # noqa: BLE001 (a class whose constructor needs other arguments, e.g. UnicodeDecodeError)
        return SolutionError(f"{name}: {text}")


def free_names(source: str, defined) -> list[str]:
    """The global names the test code reads but neither it, `defined` (the setup's namespace) nor the builtins
    define: the solution's functions. (A sample's `def abs` or `def sorted` therefore never reaches the tests.)"""
    import builtins
    import symtable

    top = symtable.symtable(source, "<tests>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    used, tables = set(), [top]
    while tables:
        table = tables.pop()
        used |= {s.get_name() for s in table.get_symbols() if s.is_referenced() and (table is top or s.is_global())}
        tables += table.get_children()
    return sorted(used - bound - set(defined) - set(vars(builtins)))


def _module_names(source: str, names: list[str]) -> set[str]:
    """Those of `names` that are standard modules the tests only use as `name.attribute` (MBPP's `math.isclose`
    where the solution imported math): the tests get the trusted module."""
    if not names:  # HumanEval: nothing to look up (and no `ast` to import)
        return set()
    import ast

    tree = ast.parse(source)
    bases = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
    bare = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in bases}
    return {n for n in names if n in sys.stdlib_module_names and n not in bare}


def prepare(spec: dict, channel: Channel) -> tuple[dict, types.CodeType]:
    """The tests' globals (the setup run, the solution's names bound to proxies) and the tests' code."""
    import builtins
    import importlib

    namespace = {"__name__": "__pit_tests__", "__builtins__": builtins}
    exec(compile(spec["setup"], "<setup>", "exec", dont_inherit=True), namespace)
    code = compile(spec["tests"], "<tests>", "exec", dont_inherit=True)
    names = free_names(spec["tests"], namespace)
    modules = _module_names(spec["tests"], names)
    for name in names:
        namespace[name] = importlib.import_module(name) if name in modules else Proxy(channel, name)
    if spec["entry_point"] is not None:
        namespace[spec["entry_point"]] = Proxy(channel, spec["entry_point"])
    return namespace, code


def run_tests(spec: dict, channel: Channel) -> dict:
    """The verdict: {"status": passed | failed | timeout | error | ended | unstarted, "detail": ...}."""
    try:
        namespace, code = prepare(spec, channel)
    except BaseException as err:  # noqa: BLE001 (the task's own setup or tests do not compile or run)
        return {"status": "error", "detail": f"the tests cannot run: {_last_line(err)}"}
    try:
        if channel.receive("started") is None:
            return {"status": "unstarted"}
        if channel.receive("ready") is None:  # the solution failed (or exited) before its functions were defined
            return {"status": "ended"}
        exec(code, namespace)
        if spec["entry_point"] is not None:
            check = namespace.get("check")
            if not isinstance(check, types.FunctionType):
                return {"status": "error", "detail": "the tests define no check(candidate) function"}
            check(namespace[spec["entry_point"]])
        failure = None
    except BaseException as err:  # noqa: BLE001 (a failed assert, the solution's exception, a violation, ...)
        failure = err
    failure = channel.failure or failure
    if failure is None:
        return {"status": "passed"}
    if isinstance(failure, Timeout | Ended):
        return {"status": "timeout" if isinstance(failure, Timeout) else "ended"}
    return {"status": "failed", "detail": _last_line(failure)}


def _last_line(err: BaseException) -> str:
    import traceback

    try:
        return traceback.format_exception_only(type(err), err)[-1].strip()[:300]
    except Exception:  # noqa: BLE001
        return type(err).__name__


HELPER_MEMORY = 2 << 30  # the helper's address space: decoding a reply of MAX_MESSAGE bytes fits well within it


def helper_main(call_fd: int, reply_fd: int) -> None:
    """The trusted helper (`python -I -S -c`): the spec on stdin, the verdict as one JSON line on stdout; whatever
    the tests print goes to stderr. Its memory is capped (a reply too large to decode is a violation, not a crash);
    its time is the evaluator's to bound (it kills the helper shortly after the deadline)."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (HELPER_MEMORY, HELPER_MEMORY))
    spec = json.loads(sys.stdin.buffer.read())
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the tests' memory file: closed once read
    verdict_fd = os.dup(1)
    os.dup2(2, 1)
    channel = Channel(call_fd, reply_fd, spec["deadline"])
    verdict = run_tests(spec, channel)
    verdict["calls"] = channel.calls
    os.write(verdict_fd, json.dumps(verdict).encode() + b"\n")
