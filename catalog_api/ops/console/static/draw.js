// Lakeview console: DOM and SVG helpers and the drawings (lineage graph, charts, operator graph).
// Plain SVG built from data; nothing the server sends is parsed as HTML.
"use strict";

const STATES = ["fresh", "late", "degraded", "failed", "stopped", "pending"];
const COLORS = {
  fresh: "#2e9e5b",
  late: "#e0a100",
  degraded: "#e0662b",
  failed: "#d03434",
  stopped: "#7d8590",
  pending: "#b8c0cc",
};
const SVGNS = "http://www.w3.org/2000/svg";

// ---- DOM helpers (text only: nothing the server sends is parsed as HTML) ----
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : String(c));
  return el;
}
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const c of children.flat())
    if (c !== null && c !== undefined) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}
const $ = (id) => document.getElementById(id);
function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  const sec = ms / 1000;
  if (sec < 60) return `${sec.toFixed(1)}s`;
  if (sec < 3600) return `${(sec / 60).toFixed(1)}m`;
  return `${(sec / 3600).toFixed(1)}h`;
}
function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}
const pct = (x) => (x === null || x === undefined ? "–" : `${(x * 100).toFixed(1)}%`);
const utc = (ms) => new Date(ms).toISOString().replace("T", " ").slice(0, 19);
const clock = (ms) => new Date(ms).toISOString().slice(11, 19);

function layout(graph) {
  const inputs = {};
  for (const e of graph.edges) (inputs[e.to] = inputs[e.to] || []).push(e.from);
  const byId = Object.fromEntries(graph.nodes.map((n) => [n.id, n]));
  const depth = {};
  const depthOf = (id, seen = new Set()) => {
    if (depth[id] !== undefined) return depth[id];
    const node = byId[id];
    if (!node || node.kind === "source" || seen.has(id)) return (depth[id] = 0);
    seen.add(id);
    const ups = (inputs[id] || []).filter((u) => byId[u] && byId[u].kind !== "target");
    return (depth[id] = ups.length ? 1 + Math.max(...ups.map((u) => depthOf(u, seen))) : 1);
  };
  graph.nodes.filter((n) => n.kind !== "target").forEach((n) => depthOf(n.id));
  const last = Math.max(1, ...Object.values(depth)) + 1;
  graph.nodes.filter((n) => n.kind === "target").forEach((n) => (depth[n.id] = last));
  const columns = {};
  for (const n of graph.nodes) (columns[depth[n.id]] = columns[depth[n.id]] || []).push(n);
  const W = 190,
    H = 52,
    GX = 80,
    GY = 22,
    pos = {};
  let height = 0;
  for (const [col, nodes] of Object.entries(columns)) {
    nodes.sort((a, b) => a.label.localeCompare(b.label));
    nodes.forEach((n, i) => (pos[n.id] = { x: 20 + col * (W + GX), y: 20 + i * (H + GY) }));
    height = Math.max(height, 20 + nodes.length * (H + GY));
  }
  return { pos, W, H, width: 40 + (last + 1) * (W + GX) - GX, height: Math.max(height, 100) };
}

function drawLineage(graph, selected, onSelect) {
  const svg = clear($("lineage"));
  const { pos, W, H, width, height } = layout(graph);
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.append(
    s(
      "defs",
      {},
      s(
        "marker",
        { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" },
        s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#a9b3c2" }),
      ),
    ),
  );
  for (const e of graph.edges) {
    const a = pos[e.from],
      b = pos[e.to];
    if (!a || !b) continue;
    const x1 = a.x + W,
      y1 = a.y + H / 2,
      x2 = b.x,
      y2 = b.y + H / 2,
      mx = (x1 + x2) / 2;
    const path = s("path", {
      class: `edge ${e.state || ""}`,
      d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 2},${y2}`,
      "marker-end": "url(#arrow)",
    });
    if (e.error || e.location) path.append(s("title", {}, e.error ? `failing: ${e.error}` : e.location));
    svg.append(path);
  }
  for (const n of graph.nodes) {
    const p = pos[n.id];
    const color = n.kind === "view" ? COLORS[n.state] || COLORS.pending : n.kind === "source" ? "#5b6fae" : "#6d4fb3";
    const fill = n.kind === "view" ? `${color}22` : "#f6f7fb";
    const sub =
      n.kind === "view"
        ? `${n.state}${n.inline ? " · inline" : ""} · lag ${duration(n.freshness_lag_ms)}` +
          ` / ${duration(n.target_lag_ms)}`
        : n.kind === "source"
          ? n.detail || "source"
          : "published";
    const g = s(
      "g",
      {
        class: `node ${n.kind}${selected === n.label && n.kind === "view" ? " selected" : ""}`,
        "data-node": n.id,
        "data-state": n.state || n.kind,
        transform: `translate(${p.x},${p.y})`,
      },
      s("rect", { width: W, height: H, fill: "#fff", stroke: "none", rx: 7 }), // opaque: edges pass behind
      s("rect", { width: W, height: H, fill, stroke: color, rx: 7 }),
      s("text", { x: 10, y: 20, class: "title" }, n.label.length > 24 ? `${n.label.slice(0, 23)}…` : n.label),
      s("text", { x: 10, y: 38, class: "sub" }, sub.length > 32 ? `${sub.slice(0, 31)}…` : sub),
      s(
        "title",
        {},
        n.error ? `${n.label}: ${n.error}` : n.kind === "source" ? `source ${n.label}: ${n.detail}` : n.label,
      ),
    );
    if (n.kind === "view") g.addEventListener("click", () => onSelect(n.label));
    svg.append(g);
  }
}

function drawLagChart(data) {
  const svg = clear($("lag-chart"));
  const width = svg.clientWidth || 900,
    height = 200,
    L = 56,
    R = 12,
    T = 12,
    B = 24;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const points = data.lag.filter((p) => p[1] !== null);
  const target = data.status.target_lag_ms;
  if (!points.length) {
    svg.append(s("text", { x: width / 2, y: height / 2, class: "empty", "text-anchor": "middle" }, "no samples yet"));
    return;
  }
  const maxY = Math.max(target || 0, ...points.map((p) => p[1])) * 1.15 || 1;
  const x = (t) => L + ((t - data.from_ms) / (data.to_ms - data.from_ms)) * (width - L - R);
  const y = (v) => T + (1 - v / maxY) * (height - T - B);
  for (let i = 0; i <= 4; i++) {
    const v = (maxY * i) / 4;
    svg.append(s("line", { class: "grid-line", x1: L, x2: width - R, y1: y(v), y2: y(v) }));
    svg.append(s("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", class: "sub" }, duration(v)));
  }
  for (let i = 0; i <= 4; i++) {
    const t = data.from_ms + ((data.to_ms - data.from_ms) * i) / 4;
    const anchor = i === 0 ? "start" : i === 4 ? "end" : "middle";
    svg.append(s("text", { x: x(t), y: height - 6, "text-anchor": anchor, class: "sub" }, clock(t)));
  }
  svg.append(s("line", { class: "axis", x1: L, x2: L, y1: T, y2: height - B }));
  if (target) {
    svg.append(s("line", { class: "target", x1: L, x2: width - R, y1: y(target), y2: y(target) }));
    svg.append(
      s(
        "text",
        { x: width - R - 4, y: y(target) - 5, "text-anchor": "end", class: "sub" },
        `target ${duration(target)}`,
      ),
    );
  }
  svg.append(s("polyline", { class: "lag", points: points.map((p) => `${x(p[0])},${y(p[1])}`).join(" ") }));
  for (const p of points) {
    svg.append(
      s(
        "circle",
        { class: `point ${p[2]}`, cx: x(p[0]), cy: y(p[1]), r: 2.6 },
        s("title", {}, `${clock(p[0])}: lag ${duration(p[1])}`),
      ),
    );
  }
}

function drawRateChart(data) {
  const svg = clear($("rate-chart"));
  const width = svg.clientWidth || 900,
    height = 200,
    L = 56,
    R = 56,
    T = 12,
    B = 24;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const rows = data.per_minute;
  if (!rows.length) {
    svg.append(
      s("text", { x: width / 2, y: height / 2, class: "empty", "text-anchor": "middle" }, "no commits in this window"),
    );
    return;
  }
  const x = (t) => L + ((t - data.from_ms) / (data.to_ms - data.from_ms)) * (width - L - R);
  const maxE = Math.max(...rows.map((r) => r.epochs)),
    maxR = Math.max(1, ...rows.map((r) => r.rows_in));
  const barW = Math.max(2, ((width - L - R) * 60000) / (data.to_ms - data.from_ms) - 1);
  for (const r of rows) {
    const h0 = ((height - T - B) * r.epochs) / maxE;
    svg.append(
      s(
        "rect",
        { class: "bar", x: x(r.at_ms), y: height - B - h0, width: barW, height: h0 },
        s("title", {}, `${clock(r.at_ms)}: ${r.epochs} epochs, ${r.rows_in} rows in, ${r.rows_out} rows out`),
      ),
    );
  }
  const yr = (v) => T + (1 - v / maxR) * (height - T - B);
  svg.append(
    s("polyline", { class: "rows", points: rows.map((r) => `${x(r.at_ms) + barW / 2},${yr(r.rows_in)}`).join(" ") }),
  );
  svg.append(s("text", { x: L - 6, y: T + 10, "text-anchor": "end", class: "sub" }, `${maxE} ep`));
  svg.append(s("text", { x: width - R + 6, y: T + 10, class: "sub" }, `${maxR} rows`));
  svg.append(s("text", { x: L, y: height - 6, class: "sub" }, `bars: epochs per minute · line: rows in per minute`));
}

function drawPlan(data) {
  const svg = clear($("plan-graph"));
  $("plan-title").textContent = data.graph.title || data.text.split("\n")[0];
  $("plan-text").textContent = data.text;
  const notes = clear($("plan-notes"));
  for (const n of data.graph.notes) notes.append(h("li", {}, n));
  const inputs = data.graph.nodes.filter((n) => n.kind === "input");
  const chain = data.graph.nodes.filter((n) => n.kind !== "input");
  const W = 760,
    lineH = 15,
    gap = 26,
    wrap = 110;
  const lines = (n) => {
    const out = [];
    for (const text of [n.label, ...n.details])
      for (let i = 0; i < text.length; i += wrap) out.push(text.slice(i, i + wrap));
    return out;
  };
  let y = 14;
  const boxes = [];
  const inW = Math.min(240, (W - (inputs.length - 1) * 16) / Math.max(1, inputs.length));
  inputs.forEach((n, i) => boxes.push({ n, x: 20 + i * (inW + 16), y, w: inW, h: 34, text: [] }));
  if (inputs.length) y += 34 + gap;
  for (const n of chain) {
    const text = n.kind === "table" ? [] : lines(n).slice(1);
    const hh = 24 + (n.kind === "table" ? 10 : 0) + (text.length + 1) * lineH;
    boxes.push({ n, x: 20, y, w: W, h: hh, text });
    y += hh + gap;
  }
  const width = W + 40;
  svg.setAttribute("width", width);
  svg.setAttribute("height", y);
  svg.setAttribute("viewBox", `0 0 ${width} ${y}`);
  svg.append(
    s(
      "defs",
      {},
      s(
        "marker",
        { id: "arrow2", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" },
        s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#9db4e0" }),
      ),
    ),
  );
  const at = Object.fromEntries(boxes.map((b) => [b.n.id, b]));
  for (const [from, to] of data.graph.edges) {
    const a = at[from],
      b = at[to];
    if (!a || !b) continue;
    svg.append(
      s("path", {
        class: "edge",
        d: `M${a.x + a.w / 2},${a.y + a.h} L${b.x + b.w / 2},${b.y - 2}`,
        "marker-end": "url(#arrow2)",
      }),
    );
  }
  for (const b of boxes) {
    const g = s(
      "g",
      {
        class: `op ${b.n.kind === "input" ? "input" : b.n.kind === "table" ? "table" : ""}`,
        "data-op": b.n.kind,
        transform: `translate(${b.x},${b.y})`,
      },
      s("rect", { width: b.w, height: b.h, rx: 6 }),
    );
    if (b.n.kind === "input" || b.n.kind === "table") {
      g.append(s("text", { x: 10, y: 21, class: "title" }, `${b.n.kind === "input" ? "input" : "table"} ${b.n.label}`));
    } else {
      const first = lines(b.n)[0];
      g.append(s("text", { x: 10, y: 18, class: "kind" }, b.n.kind));
      g.append(s("text", { x: 10, y: 18 + lineH, class: "title" }, first));
      b.text.forEach((t, i) => g.append(s("text", { x: 10, y: 18 + (i + 2) * lineH, class: "detail" }, t)));
    }
    svg.append(g);
  }
}

function sparkline(points) {
  const svg = s("svg", { viewBox: "0 0 220 36" });
  if (points.length < 2) return svg;
  const t0 = points[0][0],
    t1 = points[points.length - 1][0],
    maxV = Math.max(1, ...points.map((p) => p[1]));
  svg.append(
    s("polyline", {
      class: "spark",
      points: points.map((p) => `${((p[0] - t0) / (t1 - t0 || 1)) * 216 + 2},${34 - (p[1] / maxV) * 30}`).join(" "),
    }),
  );
  return svg;
}
