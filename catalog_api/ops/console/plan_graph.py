"""A view's ``explain`` text as the operator graph the console draws.

The text (:func:`lakeview.project.explain_view`) prints the view's operator tree, its output operator first,
each operator's inputs indented below it (``aggregate5: Aggregate GROUP BY ...``), each followed by deeper
indented detail lines (its cost, its state); the other lines (the header, the batches, the state tables) are
notes. Each operator becomes a node, drawn inputs first: each source feeds its ``Source`` operator, each
operator its parent, and the output operator writes the view's table. Nothing is re-planned here: the graph
is exactly what explain says.
"""

from __future__ import annotations

import re
from typing import Any

_OPERATOR = re.compile(r"^(\s*)([a-z_]+\d+): (\S+)(.*)$")


def plan_graph(text: str, inputs: list[str], table: str) -> dict[str, Any]:
    """``{"title", "nodes": [{"id", "kind", "label", "details"}], "edges": [[from, to]], "notes"}``."""
    lines = text.splitlines()
    title = lines[0] if lines else ""
    nodes: list[dict[str, Any]] = []  # in the text's order: each operator before its inputs
    parents: dict[str, str] = {}
    notes: list[str] = []
    open_: list[tuple[int, dict[str, Any]]] = []  # the operators whose inputs may follow, by indent
    for line in lines[1:]:
        operator = _OPERATOR.match(line)
        indent = len(line) - len(line.lstrip())
        if operator:
            depth, name, kind, rest = len(operator.group(1)), operator.group(2), operator.group(3), operator.group(4)
            while open_ and open_[-1][0] >= depth:
                open_.pop()
            node = {"id": f"op:{name}", "kind": kind.lower(), "label": f"{name}: {kind}{rest}", "details": []}
            if open_:
                parents[node["id"]] = open_[-1][1]["id"]
            nodes.append(node)
            open_.append((depth, node))
        elif line.strip() and open_ and indent > open_[-1][0]:
            open_[-1][1]["details"].append(line.strip())
        elif line.strip():
            open_ = []  # past the tree: the state tables and the other notes
            notes.append(line.strip())
    nodes.reverse()  # inputs first, the output operator last
    edges = [[child, parent] for child, parent in reversed(parents.items())]
    graph_inputs = [{"id": f"in:{name}", "kind": "input", "label": name, "details": []} for name in inputs]
    if nodes:
        sources = {n["label"].split(" ")[2]: n["id"] for n in nodes if n["kind"] == "source"}
        edges = [[i["id"], sources.get(i["label"], nodes[0]["id"])] for i in graph_inputs] + edges
        edges.append([nodes[-1]["id"], "out"])
    out = {"id": "out", "kind": "table", "label": table, "details": []}
    return {"title": title, "nodes": graph_inputs + nodes + [out], "edges": edges, "notes": notes}
