"""Progress of long commands: tqdm's bar on a terminal; where stderr is not a terminal (a workflow job's log file,
a redirect) plain lines instead, with no carriage returns and no bar glyphs.

- `progress_bar`: the long loops (training steps, documents, samples): in a log one line at the start, then at most
  one every LINE_INTERVAL_S seconds, and one at the end.
- `Steps`: named steps of a command (each job of a Snakemake run that `pit verify` starts, each phase of `pit share
  pull`): one line per step, `desc: [k/n] what (elapsed)`, on a terminal too (there, optionally, above a bar).
- `library_bars_off`: the libraries' own bars (the hub's downloads, transformers' "Loading weights" and "Writing
  model shards") off where stderr is not a terminal; `pit` calls it as it starts (pit/commands/__init__.py).
- `library_bar_as_lines`: a library module that calls tqdm itself, past huggingface_hub's switch (transformers'
  GGUF loader, "Converting and de-quantizing GGUF tensors"), gets `progress_bar` while a block runs: plain lines in
  a log, its bar on a terminal.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import time

from tqdm import tqdm

LINE_INTERVAL_S = 30.0  # seconds between two progress lines in a log
LINE_FORMAT = "{desc}: {n_fmt}/{total_fmt} ({percentage:.0f}%) [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
OPEN_FORMAT = "{desc}: {n_fmt} [{elapsed}, {rate_fmt}{postfix}]"  # no total known: no percentage, no estimate


class LineProgress(tqdm):
    """tqdm's counts and rates as whole lines; a postfix or description change waits for the next line."""

    def display(self, msg=None, pos=None):
        text = self.__str__() if msg is None else msg
        if not text:  # tqdm clears a bar with an empty message: a log keeps its lines
            return False
        self.fp.write(text + "\n")
        self.fp.flush()
        return True

    def set_postfix(self, ordered_dict=None, refresh=True, **kwargs):
        super().set_postfix(ordered_dict, refresh=False, **kwargs)

    def set_description(self, desc=None, refresh=True):
        super().set_description(desc, refresh=False)

    def close(self):
        if not self.disable:
            self.display()  # the last line, with the final counts
            self.leave = False  # tqdm's own closing line would repeat it
        super().close()


def progress_bar(iterable=None, *, file=None, **kwargs) -> tqdm:
    """`tqdm(iterable, **kwargs)` on a terminal, else a LineProgress writing to the same stream (stderr)."""
    stream = sys.stderr if file is None else file
    if is_terminal(stream):
        return tqdm(iterable, file=stream, **kwargs)
    kwargs.pop("dynamic_ncols", None)
    kwargs.setdefault("mininterval", LINE_INTERVAL_S)
    total = kwargs.get("total", len(iterable) if hasattr(iterable, "__len__") else None)
    kwargs.setdefault("bar_format", OPEN_FORMAT if total is None else LINE_FORMAT)
    return LineProgress(iterable, file=stream, **kwargs)


def is_terminal(stream) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


class Steps:
    """Named steps, one line each as it happens: `desc: [k/n] text (m:ss)` (`n` once known, elapsed since the
    start). With `bar`, on a terminal the lines scroll above a tqdm bar of the count (`close` ends it); a few
    phases need none."""

    def __init__(self, desc: str, total: int | None = None, *, unit: str = "step", bar: bool = False, file=None):
        self.desc, self.total, self.n, self.start = desc, total, 0, time.monotonic()
        self.stream = sys.stderr if file is None else file
        shown = bar and is_terminal(self.stream)
        self.bar = tqdm(total=total, desc=desc, unit=unit, file=self.stream) if shown else None

    def line(self, text: str, done: int = 0) -> None:
        """Write `text` as the next line, after counting `done` more steps finished."""
        self.n += done
        if self.bar is not None and done:
            self.bar.update(done)
        minutes, seconds = divmod(int(time.monotonic() - self.start), 60)
        count = f"[{self.n}/{self.total}] " if self.total else ""
        shown = f"{self.desc}: {count}{text} ({minutes}:{seconds:02d})"
        if self.bar is not None:
            self.bar.write(shown, file=self.stream)
        else:
            self.stream.write(shown + "\n")
            self.stream.flush()

    def set_total(self, total: int) -> None:
        self.total = total
        if self.bar is not None:
            self.bar.total = total
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


TRUE_WORDS = ("1", "ON", "YES", "TRUE")


def library_bars_off() -> None:
    """The libraries' own tqdm bars off: huggingface_hub's (HF_HUB_DISABLE_PROGRESS_BARS; transformers' bars
    follow it), datasets' (HF_DATASETS_DISABLE_PROGRESS_BARS). Each library reads its variable when it is imported,
    so this runs before a command imports them; one imported already (an in-process caller) is switched off by its
    own call. A variable set to another value by the user is kept, and so are their bars."""
    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
        os.environ.setdefault(name, "1")
    hub_off = os.environ["HF_HUB_DISABLE_PROGRESS_BARS"].upper() in TRUE_WORDS
    if hub_off and "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].utils.disable_progress_bars()
    if hub_off and "transformers.utils.logging" in sys.modules:
        sys.modules["transformers.utils.logging"].disable_progress_bar()
    if os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"].upper() in TRUE_WORDS and "datasets.utils" in sys.modules:
        sys.modules["datasets.utils"].disable_progress_bars()


@contextlib.contextmanager
def library_bar_as_lines(module: str, name: str = "tqdm"):
    """While the block runs, the tqdm that the library module `module` calls by the global `name` (`from tqdm.auto
    import tqdm`, which neither HF_HUB_DISABLE_PROGRESS_BARS nor transformers' `disable_progress_bar` reaches) is
    `progress_bar`: plain lines where stderr is not a terminal. A module without that global is left as it is."""
    mod = importlib.import_module(module)
    kept = getattr(mod, name, None)
    if kept is None:
        yield
        return
    setattr(mod, name, progress_bar)
    try:
        yield
    finally:
        setattr(mod, name, kept)
