"""One exception type for bad input, so the command line can print it as one clear line."""


class PitError(ValueError):
    """Bad input (a value, a file, a checkpoint): the message names the value and what was expected."""


def config_from_dict(cls, d: dict, label: str):
    """A config dataclass from a dict: unknown or missing keys are a PitError naming them."""
    import dataclasses

    fields = dataclasses.fields(cls)
    unknown = sorted(set(d) - {f.name for f in fields})
    if unknown:
        raise PitError(f"{label}: unknown keys {unknown}; expected a subset of {sorted(f.name for f in fields)}")
    missing = sorted(
        f.name
        for f in fields
        if f.name not in d and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    if missing:
        raise PitError(f"{label}: missing required keys {missing}")
    return cls(**d)
