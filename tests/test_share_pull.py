"""`pit share pull` against a dvc.lock whose folder entries were swapped, and again after a refused pull once the
remote is repaired (issue 65, item 11; pit/tracking/share.py). A tiny DVC project (two folder outputs and a file
output, a one-rule workflow) is pushed once per module the way `pit share push` records it (`record_and_push`:
each folder output holds its own path in `.pit-out-path`, which DVC hashes into the folder's listing) to a folder
remote; each test clones it and pulls in-process."""

from __future__ import annotations

import hashlib
import logging
import subprocess

import pytest
import yaml

from pit.commands import main
from pit.tracking import share

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


def write(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def md5(path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


DVC_LOGGERS = ("dvc", "dvc_objects", "dvc_data")


@pytest.fixture(autouse=True)
def dvc_loggers(monkeypatch):
    """An earlier in-process DVC call (dvc.logger.setup) left handlers on a closed captured stderr."""
    for name in DVC_LOGGERS:
        monkeypatch.setattr(logging.getLogger(name), "handlers", [])


@pytest.fixture(scope="module")
def origin(tmp_path_factory):
    from dvc.repo import Repo

    for name in DVC_LOGGERS:  # set up before the function-scoped `dvc_loggers`: the same stale handlers
        logging.getLogger(name).handlers = []

    root = tmp_path_factory.mktemp("share")
    origin, remote = root / "origin", root / "remote"
    subprocess.run(["git", "init", "-q", str(origin)], check=True)
    write(origin / "results/a/x.json", '{"a": 1}\n')
    write(origin / "results/b/y.json", '{"b": 2}\n')
    write(origin / "results/table.csv", "a,b\n1,2\n")
    write(origin / "config.yaml", "profile: tiny\nmlflow: {enabled: false}\n")
    write(origin / "workflow/Snakefile", 'rule all:\n    input: "results/table.csv"\n')  # a, b: as logs are
    write(origin / "workflow/profiles/local/config.yaml", "cores: 1\n")
    write(origin / "dvc.yaml", "vars:\n  - configfile: config.yaml\nstages:\n  s:\n    cmd: 'true'\n    outs:\n"
                               "      - results/a\n      - results/b\n      - results/table.csv\n")  # fmt: skip
    Repo.init(str(origin)).close()
    (origin / ".dvc/config").write_text(f"[core]\n    remote = shared\n['remote \"shared\"']\n    url = {remote}\n")
    with Repo(str(origin)) as repo:
        share.record_and_push(origin, repo, None)
    subprocess.run(["git", "-C", str(origin), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(origin), "commit", "-qm", "pushed"], check=True)
    return origin


def clone(origin, tmp_path, lock=None):
    """A git clone of `origin` (its dvc.lock replaced by `lock` and committed there first, when given)."""
    if lock is not None:
        (origin / "dvc.lock").write_text(lock)
        subprocess.run([*GIT, "-C", str(origin), "commit", "-qam", "lock"], check=True)
    subprocess.run(["git", "clone", "-q", str(origin), str(tmp_path / "clone")], check=True)
    return tmp_path / "clone"


def pull(where, monkeypatch, capsys) -> tuple[int, list[str]]:
    monkeypatch.chdir(where)
    capsys.readouterr()
    code = main(["share", "pull"])
    return code, capsys.readouterr().out.strip().splitlines()


def test_push_marks_each_folder_output_with_its_path(origin):
    assert (origin / "results/a/.pit-out-path").read_text() == "results/a\n"
    assert (origin / "results/b/.pit-out-path").read_text() == "results/b\n"
    assert not (origin / "results/table.csv").is_dir()


def test_swapped_folder_entries_of_dvc_lock_are_refused(origin, tmp_path, monkeypatch, capsys):
    """Item 11: two folder entries of dvc.lock swapped were pulled, checked and marked up to date (exit 0): each
    folder's files matched the listing the entry named, of the other path (and no rule reads them, as no rule
    reads a log folder, so Snakemake's --touch did not notice either)."""
    good = (origin / "dvc.lock").read_text()
    lock = yaml.safe_load(good)
    a, b = lock["stages"]["s"]["outs"][:2]
    assert (a["path"], b["path"]) == ("results/a", "results/b")
    for key in ("md5", "size", "nfiles"):
        a[key], b[key] = b[key], a[key]
    try:
        where = clone(origin, tmp_path, yaml.safe_dump(lock, sort_keys=False))
    finally:
        (origin / "dvc.lock").write_text(good)
        subprocess.run([*GIT, "-C", str(origin), "commit", "-qam", "lock back"], check=True)
    code, printed = pull(where, monkeypatch, capsys)
    assert code == 1 and len(printed) == 3, printed
    assert printed[0] == f"results/a: dvc.lock records for it the folder pushed as 'results/b' ({a['md5']}): its " \
                         "folders' entries are swapped or edited (check out dvc.lock as pushed)"  # fmt: skip
    assert printed[1].startswith("results/b: dvc.lock records for it the folder pushed as 'results/a' (")
    assert "2 differ from dvc.lock or are missing" in printed[2] and not (where / ".snakemake").exists()


def test_a_pull_after_a_refused_one_fetches_the_repaired_remote(origin, tmp_path, monkeypatch, capsys):
    """Item 11: after a refused pull of a damaged remote copy, pulling from the repaired remote failed again until
    .dvc/cache was cleared by hand (DVC kept the damaged object and the copy it had checked out of it)."""
    from dvc.repo import Repo

    remote = origin.parent / "remote"
    good = origin / "results/a/x.json"
    obj = remote / "files/md5" / md5(good)[:2] / md5(good)[2:]
    kept = obj.read_bytes()
    obj.chmod(0o644)
    damaged = b'{"a": 9}\n'
    obj.write_bytes(damaged)
    where = clone(origin, tmp_path)
    try:
        code, printed = pull(where, monkeypatch, capsys)
    finally:
        obj.write_bytes(kept)  # the remote repaired
    assert code == 1 and printed[0].startswith(f"results/a/x.json: md5 {hashlib.md5(damaged).hexdigest()}"), printed
    assert "; the damaged copy was removed from DVC's cache and from here: pull again once the remote" in printed[0]
    assert not (where / "results/a/x.json").exists() and (where / "results/b/y.json").is_file()
    with Repo(str(where)) as repo:  # the pull again, up to `pit share pull`'s check (then Snakemake's --touch)
        assert repo.pull()["stats"]["fetched"] == 1
        assert share.lock_problems(where, repo.cache.local.oid_to_path) == []
    assert (where / "results/a/x.json").read_bytes() == good.read_bytes()
