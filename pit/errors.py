"""One exception type for bad input, so the command line can print it as one clear line."""


class PitError(ValueError):
    """Bad input (a value, a file, a checkpoint): the message names the value and what was expected."""
