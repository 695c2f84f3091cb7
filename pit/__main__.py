"""`python -m pit ...` is the `pit` command (torchrun launches it this way: `torchrun -m pit train ...`)."""

import sys

from pit.commands import entry

if __name__ == "__main__":
    sys.exit(entry())
