"""Progress of the long loops (training steps, documents, samples): tqdm's bar on a terminal; where stderr is not
a terminal (a workflow job's log file) plain lines instead, one at the start, then at most one every
LINE_INTERVAL_S seconds, and one at the end, with no carriage returns and no bar glyphs."""

from __future__ import annotations

import sys

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
    if getattr(stream, "isatty", lambda: False)():
        return tqdm(iterable, file=stream, **kwargs)
    kwargs.pop("dynamic_ncols", None)
    kwargs.setdefault("mininterval", LINE_INTERVAL_S)
    total = kwargs.get("total", len(iterable) if hasattr(iterable, "__len__") else None)
    kwargs.setdefault("bar_format", OPEN_FORMAT if total is None else LINE_FORMAT)
    return LineProgress(iterable, file=stream, **kwargs)
