"""Where a model name points: a local folder, or a hub id, decided before anything heavy is imported or fetched.

`pit convert`, `load_teacher` and the commands that take "a folder or a hub id" read a name by one rule
(`looks_local`), so a mistyped folder is not sent to the hub (five retries and a message about the internet
connection), and a hub id the hub cannot serve is one line at once (`check_source`):

- a name that exists on disk is that file or folder;
- a name that does not exist is a missing local folder when it cannot be a hub id or reads as a path: it starts with
  `.`, `/` or `~`, holds a backslash, ends with `/`, has more than one `/` (a hub id is `name` or `owner/name`),
  has characters a hub id cannot have (huggingface_hub's rule: letters, digits, `-`, `_`, `.`; no `--` or `..`), or
  its first part is a folder here (`teachers/smollm2-135` where `teachers/` exists). The line names the closest
  existing sibling folder (difflib), if one is close;
- any other name is a hub id: with HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set it must be in the hub cache; else
  one request without retries asks the hub for its config.json. An unreachable hub is one line naming the endpoint
  and the cause, unless the id is in the hub cache, which is then read with `local_files_only` (no retries either).

Stdlib only at import; huggingface_hub is imported when a hub id is checked.
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass
from pathlib import Path

from pit.errors import PitError

HUB_PART = re.compile(r"[A-Za-z0-9_.-]{1,96}")  # one part of a hub id (huggingface_hub's validate_repo_id)
PROBE_TIMEOUT_S = 10.0  # the one request that asks the hub for a hub id's config.json


@dataclass(frozen=True)
class Source:
    """A checked model name: `local` (an existing path) or a hub id; `cached_only`: the hub is unreachable and the
    id is in the hub cache, so transformers must read it from there (`load_kwargs`)."""

    name: str
    local: bool
    cached_only: bool = False

    def load_kwargs(self) -> dict:
        """`from_pretrained`'s: from the cache only, the adapter look-up too (transformers does not pass
        local_files_only on to it, and retries it five times)."""
        offline = {"local_files_only": True}
        return {**offline, "adapter_kwargs": offline} if self.cached_only else {}


def _hub_shaped(name: str) -> bool:
    """`name` or `owner/name` of hub-id characters, no part starting or ending with `-` or `.`, no `--` or `..`."""
    parts = name.split("/")
    return (
        len(parts) <= 2
        and all(HUB_PART.fullmatch(p) and p[0] not in "-." and p[-1] not in "-." for p in parts)
        and "--" not in name
        and ".." not in name
    )


def looks_local(name: str) -> bool:
    """Whether a name that does not exist on disk must be a local path (the module's rule), not a hub id."""
    if name.startswith((".", "/", "~")) or "\\" in name or name.endswith("/") or not _hub_shaped(name):
        return True
    return "/" in name and Path(name.split("/")[0]).is_dir()


def close_sibling(path: Path) -> str | None:
    """The existing folder beside `path` whose name is closest to its name (difflib), or None."""
    parent = path.parent
    try:
        names = [p.name for p in parent.iterdir() if p.is_dir()] if parent.is_dir() else []
    except OSError:
        return None
    close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.6)
    return str(parent / close[0]) if close else None


def missing_folder(name: str, what: str) -> PitError:
    """The one line for a local folder that is not there, with the closest existing sibling."""
    sibling = close_sibling(Path(name).expanduser())
    hint = f" (did you mean {sibling!r}?)" if sibling else ""
    return PitError(f"cannot load {what} {name!r}: no such folder{hint}; expected a model folder or a hub id")


def check_source(name: str, what: str = "model", revision: str | None = None) -> Source:
    """The Source of `name` by the module's rule; a missing local folder, or a hub id the hub cannot serve (offline
    and not cached, unreachable and not cached, no such repository) is a PitError, one line."""
    if Path(name).expanduser().exists():
        return Source(name, local=True)
    if looks_local(name):
        raise missing_folder(name, what)
    return _hub_source(name, what, revision)


@functools.lru_cache(maxsize=32)  # one request per id and process (`pit convert` checks first, load_teacher again)
def _hub_source(name: str, what: str, revision: str | None) -> Source:
    from huggingface_hub import constants, try_to_load_from_cache

    cached = isinstance(try_to_load_from_cache(name, "config.json", revision=revision), str)
    where = f"cannot load {what} {name!r}: not a local folder, and"
    if constants.is_offline_mode():
        if cached:
            return Source(name, local=False)
        why = f"HF_HUB_OFFLINE is set and the hub cache ({constants.HF_HUB_CACHE}) does not hold it"
        raise PitError(f"{where} {why}; expected a model folder, or a hub id downloaded before (unset HF_HUB_OFFLINE)")
    reachable, problem = _ask_hub(name, revision)
    if problem is None or (not reachable and cached):
        return Source(name, local=False, cached_only=not reachable)
    raise PitError(f"{where} {problem}; expected a model folder or a hub id")


def _ask_hub(name: str, revision: str | None) -> tuple[bool, str | None]:
    """One HEAD request for the id's config.json, no retries: (whether the hub answered, why the id cannot be read
    from it; None when it can, or when transformers words the hub's error better)."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    try:
        get_hf_file_metadata(hf_hub_url(name, "config.json", revision=revision), timeout=PROBE_TIMEOUT_S)
    except RepositoryNotFoundError:
        return True, f"the hub ({constants.ENDPOINT}) has no model {name!r} (or it is private: `hf auth login`)"
    except HfHubHTTPError:
        return True, None
    except Exception as err:  # noqa: BLE001 -- the HTTP client's transport errors: no connection, DNS, timeout
        cause = " ".join(str(err).split()) or type(err).__name__
        return False, f"the hub ({constants.ENDPOINT}) cannot be reached ({cause}) and its cache does not hold it"
    return True, None
