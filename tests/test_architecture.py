"""The package layout of docs/architecture.md, checked on the source: the import graph of `pit` (module-level and
function-level imports) has no cycle, every import points to a lower layer (or stays in its package), `pit.core`
imports nothing of `pit` but `pit.errors`, and only `pit.commands` uses argparse."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import ROOT

PIT = ROOT / "pit"
LAYERS = {
    "pit.errors": 0,
    "pit.checkout": 1,  # which checkout runs: stdlib only
    "pit.arms": 1,  # the names of a profile's arms: stdlib only
    "pit.progress": 1,  # tqdm, or plain lines in a log
    "pit.sources": 1,  # a model name: local folder or hub id (stdlib; huggingface_hub when a hub id is checked)
    "pit.packaged": 1,  # the real teachers that install as packages: stdlib only
    "pit.io": 1,  # io may raise PitError; it shares layer 1 with core, and neither imports the other
    "pit.core": 1,
    "pit.sidecars": 1.5,  # the shape of the JSON sidecars commands read (reads them with pit.io)
    "pit.models": 2,
    "pit.data": 2,
    "pit.tracking": 2,
    "pit.analysis": 3,
    "pit.evaluation": 3,
    "pit.training": 4,
    "pit.reporting": 5,
    "pit.pipeline": 5,  # the workflow's library: config, profile, layout, specs (imports pit.training.args)
    "pit.commands": 6,
    "pit": 7,
    "pit.__main__": 7,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PIT.rglob("*.py"))}


def imports_of(path: Path, known: dict[str, Path]) -> set[str]:
    """The `pit` modules a file imports anywhere in it; `from pit.x import y` names pit.x.y when that is a module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "pit"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pit":
            subs = {f"{node.module}.{a.name}" for a in node.names} & set(known)
            found |= subs or {node.module}
            if len(subs) < len(node.names):
                found.add(node.module)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(path, known) - {name} for name, path in known.items()}


def package(module: str) -> str:
    """The layer unit a module belongs to: pit.<package> (or pit.errors / pit.io / pit / pit.__main__)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_every_package_has_a_layer():
    assert {package(m) for m in modules()} <= set(LAYERS), sorted({package(m) for m in modules()} - set(LAYERS))


def test_import_graph_is_acyclic():
    assert find_cycle(graph()) is None, f"import cycle: {' -> '.join(find_cycle(graph()))}"


def test_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_imports_point_downward_only():
    upward = [
        f"{a} -> {b}"
        for a, targets in graph().items()
        for b in targets
        if package(a) != package(b) and LAYERS[package(b)] >= LAYERS[package(a)]
    ]
    assert not upward, "imports that do not point to a lower layer:\n" + "\n".join(sorted(upward))


def test_core_imports_nothing_of_pit_but_errors():
    outside = [
        f"{a} -> {b}"
        for a, targets in graph().items()
        if package(a) == "pit.core"
        for b in targets
        if package(b) not in ("pit.core", "pit.errors")
    ]
    assert not outside, outside


@pytest.mark.parametrize("name", sorted(m for m in modules() if package(m) != "pit.commands"))
def test_library_modules_hold_no_argparse(name):
    tree = ast.parse(modules()[name].read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    froms = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "argparse" not in names | froms, f"{name} imports argparse; command-line code belongs in pit/commands/"


def test_upward_import_is_detected(tmp_path):
    """The check reads real files: a module of pit.core importing pit.models is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from pit.models.access import head_table\n")
    assert imports_of(bad, modules()) == {"pit.models.access"}
