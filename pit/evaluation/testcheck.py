"""The static rule a code task's tests must meet when its task file loads: every test calls the solution.

A test that never calls the solution (`assert True`, `pass`, a `check(candidate)` that ignores `candidate`, an MBPP
`test_setup_code` that defines the function the asserts call) passes any sample, even an empty one. The rule, read
from the code with `ast` (nothing is run):

- MBPP (`test_list`, optional `test_setup_code`): every test parses and calls, by name, a function of the solution:
  a name the tests read that neither they, the setup code, nor the builtins define (the names the trusted side binds
  to the sandbox's functions, pit.evaluation.rpc.free_names). A name the setup code defines is not the solution's;
  a setup code with `from M import *` (names that cannot be read from the code) is refused.
- HumanEval (`test`, `entry_point`): the tests bind `check` exactly once, by a top-level `def check(candidate, ...)`
  without decorators; `check` calls its first parameter (or the entry point by name) and never rebinds that name
  (no assignment, parameter, import, `del`, `global` of it anywhere inside `check`; the entry point is not bound
  anywhere in the tests).

It is a static rule: it refuses tests that contain no call of the solution; it cannot prove that a call runs or
that the tests look at its result. The real HumanEval (164 problems) and every stand-in meet it.
"""

from __future__ import annotations

import ast
import builtins
import json
import symtable


class StarImport(Exception):
    """A `from M import *`: the names it binds cannot be read from the code."""


def problem(record: dict, humaneval: bool) -> str | None:
    """Why the record's tests break the rule (one line), or None when they meet it."""
    setup = record.get("test_setup_code") or ""
    if not humaneval and not isinstance(setup, str):
        return f"its test_setup_code is {type(setup).__name__}, not a string"
    try:
        if humaneval:
            return _humaneval(str(record["test"]), str(record["entry_point"]))
        return _mbpp(record["test_list"], setup)
    except StarImport:
        return "its tests or test_setup_code have `from ... import *`, whose names cannot be checked"
    except (SyntaxError, ValueError, RecursionError) as err:  # ValueError: NUL bytes; RecursionError: deep nesting
        return f"its tests or test_setup_code do not parse ({type(err).__name__}: {getattr(err, 'msg', err)})"


def _show(code: str) -> str:
    return json.dumps(code)[:70]


def _bound(source: str) -> set[str]:
    """The top-level names `source` binds (assigns, imports, defines); a star import is a StarImport."""
    if any(isinstance(n, ast.alias) and n.name == "*" for n in ast.walk(ast.parse(source))):
        raise StarImport
    top = symtable.symtable(source, "<tests>", "exec")
    return {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}


def _read(source: str) -> set[str]:
    """The global names `source` reads (at top level, or as globals in nested scopes)."""
    used, tables = set(), [symtable.symtable(source, "<tests>", "exec")]
    top = tables[0]
    while tables:
        table = tables.pop()
        used |= {s.get_name() for s in table.get_symbols() if s.is_referenced() and (table is top or s.is_global())}
        tables += table.get_children()
    return used


def _called(node: ast.AST) -> set[str]:
    """The names called as `name(...)` anywhere in `node`."""
    return {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def _mbpp(tests: list[str], setup: str) -> str | None:
    """The MBPP rule (module docstring): each test calls one of the solution's functions by name."""
    setup_names = _bound(setup)
    joined = "\n".join(tests)
    solution = _read(joined) - _bound(joined) - setup_names - set(vars(builtins))
    for test in tests:
        called = _called(ast.parse(test))
        if not called & solution:
            by_setup = sorted(called & setup_names)
            why = f" ({', '.join(by_setup)} is defined by test_setup_code, not by the solution)" if by_setup else ""
            return f"test {_show(test)} calls no function of the solution{why}"
    return None


def _binds(node: ast.AST, name: str) -> bool:
    """Whether `name` is bound or deleted anywhere in `node` (nested scopes included)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load):
            return True
        if isinstance(n, ast.arg) and n.arg == name:
            return True
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name == name:
            return True
        if isinstance(n, ast.alias) and (n.asname or n.name.split(".")[0]) == name:
            return True
        if isinstance(n, ast.Global | ast.Nonlocal) and name in n.names:
            return True
        if isinstance(n, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and n.name == name:
            return True
        if isinstance(n, ast.MatchMapping) and n.rest == name:
            return True
    return False


def _humaneval(test: str, entry_point: str) -> str | None:
    """The HumanEval rule (module docstring): `def check(candidate)` calls `candidate` (or the entry point)."""
    tree = ast.parse(test)
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    others = sum(_binds(n, "check") for n in tree.body) - len(checks)
    if len(checks) != 1 or others or checks[0].decorator_list:
        return "its tests do not define check(candidate) exactly once, by a plain top-level def"
    check = checks[0]
    params = [*check.args.posonlyargs, *check.args.args]
    if not params:
        return "its check() takes no parameter; expected check(candidate)"
    inner = ast.Module(body=check.body, type_ignores=[])
    callees = {params[0].arg} - ({params[0].arg} if _binds(inner, params[0].arg) else set())
    if not _binds(tree, entry_point):
        callees.add(entry_point)
    if not _called(inner) & callees:
        return f"its check({params[0].arg}) never calls {params[0].arg} (nor {entry_point})"
    return None
