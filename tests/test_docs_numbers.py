"""Numbers in the docs that a committed run or the code determines agree with it (issue 66, item 5).

- A published run's wall time and job count are stated once, in docs/results/<profile>/README.md (written by
  scripts/publish_results.py from the run); every other page that gives them (README.md, docs/install.md,
  docs/real.md, docs/study.md) must give the same numbers.
- The default DAG's measured wall time: the README gives the newest measurement of docs/install.md's table.
- The defaults that docs/data.md's key table shows are the embedded default profile's values.
(The paper DAG's job counts in docs/reproducibility.md are checked against its dry run in
tests/test_cluster_profiles.py; intervals and every claim's sentence in tests/test_claims.py.)
"""

from __future__ import annotations

import re

import pytest
import yaml
from helpers import ROOT


def published(profile: str) -> dict:
    """Wall time (minutes) and jobs of the committed run of `profile`, from its provenance README."""
    text = (ROOT / f"docs/results/{profile}/README.md").read_text()
    wall = float(re.search(r"Wall time: ([0-9.]+) minutes", text)[1])
    jobs = int(re.search(r"(?:of|of the) ([0-9,]+) jobs", text)[1].replace(",", ""))
    return {"wall": wall, "jobs": jobs}


def test_a_published_runs_wall_time_and_jobs_are_stated_alike_everywhere():
    study, real = published("study"), published("real")
    install = (ROOT / "docs/install.md").read_text()
    row = next(line for line in install.splitlines() if line.startswith("| study profile"))
    assert f"{study['jobs']} jobs" in row and f"{study['wall']:.1f} min" in row, row
    assert f"{study['jobs']} jobs:" in (ROOT / "docs/study.md").read_text()
    real_md = (ROOT / "docs/real.md").read_text()
    assert f"{real['jobs']} jobs, {real['wall']:.1f} minutes" in real_md
    assert f"{real['wall']:.1f} minutes of wall time" in real_md
    readme = (ROOT / "README.md").read_text()
    assert f"({real['wall']:.1f} minutes measured, from" in readme
    # every "N minutes" / "N min" said of these runs elsewhere is one of the published values
    for page in (install, real_md, readme):
        for said in re.findall(r"(?:study|real)[^|\n]*?\(([0-9.]+) min", page):
            assert float(said) in (study["wall"], real["wall"]), said


def test_the_readme_gives_the_newest_measured_default_dag():
    install = (ROOT / "docs/install.md").read_text()
    row = next(line for line in install.splitlines() if line.startswith("| `.venv/bin/snakemake --cores all`"))
    jobs = re.search(r"default, ([0-9]+) jobs", row)[1]
    newest = re.search(r"\| ([0-9]+ min [0-9]+ s) \(commit", row)[1]  # the first entry of the wall-time cell
    readme = (ROOT / "README.md").read_text()
    assert f"{newest} measured" in readme and f"{jobs} jobs" in readme, newest


def config_value(config: dict, key: str):
    node = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(key)
        node = node[part]
    return node


def test_the_data_pages_defaults_are_the_default_profiles():
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    checked = 0
    for line in (ROOT / "docs/data.md").read_text().splitlines():
        m = re.match(r"\| `([a-z_.]+)` \| `([^`]*)`( \(paper [^)]*\))?(?: \([^)]*\))? \|", line)
        if m is None:
            continue
        try:
            value = config_value(config, m[1])
        except KeyError:
            continue  # a key the default profile leaves out (its schema default, or the paper's only)
        shown = m[2] if isinstance(value, str) else yaml.safe_load(m[2])  # a string as written (`@stdlib/**/*.py`)
        assert shown == value, (m[1], m[2], value)
        checked += 1
    assert checked >= 10, checked  # the table is still there and still read


@pytest.mark.parametrize("page", ["README.md", "docs/install.md", "docs/study.md", "docs/real.md"])
def test_no_page_keeps_a_superseded_run(page):
    """Numbers of runs that were republished since (the study's 298 jobs and 110 minutes) are gone."""
    text = (ROOT / page).read_text()
    assert "298 jobs" not in text and "110 min" not in text


def test_the_readme_is_one_screen_of_entry_points():
    """README.md <= 150 lines (issue 66): the details live in docs/, every command in docs/commands.md."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    commands = (ROOT / "docs/commands.md").read_text()
    from pit.commands import COMMANDS

    assert all(f"`pit {name}" in commands for name in COMMANDS), sorted(
        n for n in COMMANDS if f"`pit {n}" not in commands
    )
