"""The layers of docs/architecture.md hold: `lint-imports` (the contract in pyproject.toml) passes on the package,
fails on a copy with one import that points up, and no module of the package imports itself in a cycle."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint_imports(cwd: Path, src: Path) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH first: the copy under test shadows the editable install (a .pth entry, later on sys.path).
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_package_keeps_its_layers() -> None:
    result = _lint_imports(ROOT, ROOT / "src")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "src" / "kfchaos", tmp_path / "src" / "kfchaos", ignore=shutil.ignore_patterns("data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    unchanged = _lint_imports(tmp_path, tmp_path / "src")
    assert unchanged.returncode == 0, unchanged.stdout + unchanged.stderr  # the copy itself is read, and passes
    units = tmp_path / "src" / "kfchaos" / "units.py"
    units.write_text(units.read_text() + "\nimport kfchaos.verdict  # noqa: E402,F401\n")  # model -> results
    broken = _lint_imports(tmp_path, tmp_path / "src")
    assert broken.returncode != 0
    assert "kfchaos.units is not allowed to import kfchaos.verdict" in broken.stdout, broken.stdout


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_itself_through_others() -> None:
    """A package's __init__ importing its own modules is no cycle; so those edges (parent -> child) are left
    out. Imports under TYPE_CHECKING are left out too: they never run."""
    graph = grimp.build_graph("kfchaos", exclude_type_checking_imports=True)
    for module in list(graph.modules):
        for child in graph.find_children(module):
            if graph.direct_import_exists(importer=module, imported=child):
                graph.remove_import(importer=module, imported=child)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(module)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.x")
    graph.add_import(importer="a.z", imported="a.x")
    assert _cycles(graph) == [["a.x", "a.y"]]
