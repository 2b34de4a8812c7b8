"""The package structure a newcomer relies on: no import cycle between Lakeview's own modules,
the layer contracts in pyproject.toml kept, and the top of `lakeview/` small."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("lakeview", "catalog_api", "writers", "spark_jobs")


def import_cycles() -> list[list[str]]:
    """Every strongly connected set of two or more modules (imports inside functions count;
    imports only for type checking do not), as sorted module lists."""
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True)
    modules = sorted(m for m in graph.modules if m.split(".")[0] in PACKAGES)
    edges = {
        m: sorted(
            i for i in graph.find_modules_directly_imported_by(m) if i in graph.modules and i.split(".")[0] in PACKAGES
        )
        for m in modules
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:  # iterative Tarjan: the graph is deep enough to hit recursion limits
        nonlocal counter
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
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

    for module in modules:
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_between_lakeviews_modules() -> None:
    assert import_cycles() == []


def test_layer_contracts_hold() -> None:
    linter = Path(sys.executable).with_name("lint-imports")
    run = subprocess.run([str(linter)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "BROKEN" not in run.stdout


def test_lakeview_top_level_stays_small() -> None:
    entries = [p.name for p in (ROOT / "lakeview").iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 11, sorted(entries)
