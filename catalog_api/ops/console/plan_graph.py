"""A view's ``explain`` text as the operator graph the console draws.

The text (lakeview.explain) lists numbered operator steps, each followed by indented detail
lines, then ``key:``/``state:``/``changes:`` notes. Each step becomes a node, chained in
order; the view's inputs (sources or upstream views) feed the first step and the last step
writes the view's table. Nothing is re-planned here: the graph is exactly what explain says.
"""

from __future__ import annotations

import re
from typing import Any

_STEP = re.compile(r"^\s{2}(\d+)\.\s+(.*)$")
_DETAIL = re.compile(r"^\s{5,}(\S.*)$")


def _kind(label: str) -> str:
    """A short operator name for the node's title (the text's first words)."""
    for word in (
        "read",
        "quarantine",
        "changes",
        "images",
        "watermark",
        "filter",
        "window",
        "project",
        "aggregate",
        "global aggregate",
        "finalize",
        "HAVING",
        "join",
        "UNION ALL",
        "write",
    ):
        if label.lower().startswith(word.lower()) or (word in ("changes", "images") and f" {word} -> " in label):
            return word
    return label.split(" ", 1)[0].rstrip(":")


def plan_graph(text: str, inputs: list[str], table: str) -> dict[str, Any]:
    """``{"title", "nodes": [{"id", "kind", "label", "details"}], "edges": [[from, to]], "notes"}``."""
    lines = text.splitlines()
    title = lines[0] if lines else ""
    nodes: list[dict[str, Any]] = []
    notes: list[str] = []
    for line in lines[1:]:
        step = _STEP.match(line)
        detail = _DETAIL.match(line)
        if step:
            label = step.group(2)
            nodes.append({"id": f"step{step.group(1)}", "kind": _kind(label), "label": label, "details": []})
        elif detail and nodes:
            nodes[-1]["details"].append(detail.group(1))
        elif line.strip():
            notes.append(line.strip())
    edges = [[a["id"], b["id"]] for a, b in zip(nodes, nodes[1:], strict=False)]
    graph_inputs = [{"id": f"in:{name}", "kind": "input", "label": name, "details": []} for name in inputs]
    if nodes:
        edges = [[i["id"], nodes[0]["id"]] for i in graph_inputs] + edges
        edges.append([nodes[-1]["id"], "out"])
    out = {"id": "out", "kind": "table", "label": table, "details": []}
    return {"title": title, "nodes": graph_inputs + nodes + [out], "edges": edges, "notes": notes}
