"""dvc.yaml's code dependencies cover the code each stage runs (docs/reproducibility.md).

For every stage: the `pit <command>` calls in the rules of the .smk files among its deps, the module of
each command (pit.commands.COMMANDS), and every pit module those import, transitively (module-level and
function-level imports, read from the source; importing a module runs the `__init__.py` of each package
on its path). Every module file of that closure must be under a dep path of the stage, so a change to
any code a stage runs makes `dvc repro` rerun it.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest
import yaml
from helpers import ROOT

DVC = yaml.safe_load((ROOT / "dvc.yaml").read_text())
STAGES = DVC["stages"]
OUTS = {out for stage in STAGES.values() for out in stage.get("outs", [])}

# `pit CMD` in a shell command, or `pit_launcher(RES) + " CMD` (plain `pit`, or `torchrun -m pit` for DDP)
PIT_CALL = re.compile(r"""(?:(?<![\w.-])pit|pit_launcher\([^)]*\)\s*\+\s*f?["'])\s+([a-z][a-z-]*)""")


def module_file(module: str) -> Path | None:
    """pit.a.b -> pit/a/b.py or pit/a/b/__init__.py (None when neither exists)."""
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@cache
def imported_modules(module: str) -> frozenset[str]:
    """The pit modules `module` imports anywhere in its source, with the packages on their paths."""
    path = module_file(module)
    assert path is not None, f"no module {module} (pit/{'/'.join(module.split('.')[1:])}.py)"
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x, from ..y import z
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            # `from pit.x import y` imports the submodule pit.x.y when y is one
            found.update(f"{base}.{alias.name}" for alias in node.names if module_file(f"{base}.{alias.name}"))
    pit_modules = {m for m in found if m == "pit" or m.startswith("pit.")}
    return frozenset(p for m in pit_modules for p in with_packages(m))


def with_packages(module: str) -> list[str]:
    """pit.a.b -> [pit, pit.a, pit.a.b]: importing a module runs every package __init__ on its path."""
    parts = module.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def closure(roots: set[str]) -> set[str]:
    seen, todo = set(), [p for r in roots for p in with_packages(r)]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(imported_modules(module) - seen)
    return seen


def shell_blocks(smk: Path) -> str:
    """The text of every `shell:` directive of the rules in a .smk file."""
    lines, blocks, indent = smk.read_text().splitlines(), [], None
    for line in lines:
        stripped = line.lstrip()
        depth = len(line) - len(stripped)
        if indent is not None and stripped and depth <= indent:
            indent = None
        if indent is not None:
            blocks.append(line)
        elif stripped.startswith("shell:"):
            indent = depth
            blocks.append(stripped[len("shell:") :])
    return "\n".join(blocks)


def stage_entry_points(name: str) -> tuple[set[str], set[str]]:
    """(commands, entry modules) of a stage: the `pit` subcommands its rules call and the modules they run."""
    from pit.commands import COMMANDS

    smk_files = [ROOT / d for d in STAGES[name]["deps"] if d.endswith(".smk")]
    shell = "\n".join(shell_blocks(f) for f in smk_files)
    commands = set(PIT_CALL.findall(shell))
    unknown = commands - set(COMMANDS)
    assert not unknown, f"stage {name}: rules call `pit {sorted(unknown)}`, not in pit.commands.COMMANDS"
    modules = {"pit.commands"} | {COMMANDS[c][0] for c in commands}  # the `pit` script is pit.commands:main
    if "pit_launcher(" in shell:
        modules.add("pit.__main__")  # torchrun runs `python -m pit`
    return commands, modules


def covered(path: str, deps: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


@pytest.mark.parametrize("name", sorted(STAGES))
def test_every_dep_path_exists(name):
    for dep in STAGES[name]["deps"]:
        made_by_a_stage = covered(dep, sorted(OUTS))
        assert made_by_a_stage or (ROOT / dep).exists(), f"stage {name}: dep {dep} does not exist"


@pytest.mark.parametrize("name", sorted(STAGES))
def test_stage_deps_cover_every_module_its_commands_import(name):
    deps = STAGES[name]["deps"]
    commands, entry = stage_entry_points(name)
    assert commands, f"stage {name}: no `pit` command found in the rules of its .smk deps"
    missing = sorted(
        str(module_file(m).relative_to(ROOT))
        for m in closure(entry)
        if not covered(str(module_file(m).relative_to(ROOT)), deps)
    )
    assert not missing, f"stage {name} (pit {', '.join(sorted(commands))}): deps miss the modules {missing}"


def test_closure_follows_function_level_and_submodule_imports():
    """The import walk on this repository: a command module's lazy imports and `from pkg import submodule`."""
    reached = closure({"pit.commands.data"})
    assert {"pit", "pit.commands", "pit.commands.common", "pit.errors"} <= reached
    assert "pit.data.tokenize" in reached  # imported inside a function of pit.commands.data
