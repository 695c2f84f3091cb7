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


def yaml_error_text(err) -> tuple[tuple[int, int] | None, str]:
    """((line, column) counted from 1, or None; the problem in words) of a PyYAML error: its marks count from 0,
    and the context ('while parsing a flow sequence') says where the broken construct began."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or " ".join(str(err).split())
    context, start = getattr(err, "context", None), getattr(err, "context_mark", None)
    if context and start is not None:
        problem += f" ({context} at line {start.line + 1})"
    return (None if mark is None else (mark.line + 1, mark.column + 1)), problem
