// Lakeview console: polls /lakeview/v1 and shows lineage, freshness, snapshots, plans and sources
// (drawn by draw.js). No framework, nothing fetched but this server's JSON.
"use strict";

const API = "/lakeview/v1";
const TOKEN_URL = "/iceberg/v1/oauth/tokens";
const POLL_MS = 2000;

const ui = {
  selected: null,
  tab: "freshness",
  window: "1h",
  snapshot: null,
  lineage: null,
  lastPlan: null,
};

// ---- auth: a token from the OAuth2 endpoint (client id/secret) or pasted ----
function token() {
  return sessionStorage.getItem("lakeview.token");
}
async function api(path) {
  const headers = {};
  if (token()) headers.Authorization = `Bearer ${token()}`;
  const response = await fetch(API + path, { headers });
  if (response.status === 401) throw Object.assign(new Error("sign in needed"), { auth: true });
  const body = await response.json();
  if (!response.ok) throw new Error((body.error && body.error.message) || response.statusText);
  return body;
}
function showAuth(message) {
  $("auth").hidden = false;
  $("main").hidden = true;
  $("sign-out").hidden = true;
  const error = $("auth-error");
  error.hidden = !message;
  error.textContent = message || "";
}
async function signInWithClient(event) {
  event.preventDefault();
  const form = new URLSearchParams({
    grant_type: "client_credentials",
    client_id: $("client-id").value,
    client_secret: $("client-secret").value,
  });
  const response = await fetch(TOKEN_URL, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: form,
  });
  const body = await response.json().catch(() => ({}));
  if (!response.ok || !body.access_token) {
    showAuth(`sign-in refused: ${body.error_description || body.error || response.status}`);
    return;
  }
  useToken(body.access_token);
}
function useToken(value) {
  sessionStorage.setItem("lakeview.token", value.trim());
  $("auth").hidden = true;
  $("client-secret").value = "";
  refresh();
}

// ---- lineage ----
function legend() {
  const box = clear($("legend"));
  for (const state of STATES) box.append(h("span", { style: `--c:${COLORS[state]}` }, state));
}

function drawViewsTable(views) {
  const body = clear($("views-table").tBodies[0]);
  for (const v of views) {
    const tr = h(
      "tr",
      { "data-view": v.view, class: ui.selected === v.view ? "selected" : "", onclick: () => select(v.view) },
      h("td", {}, v.view),
      h("td", {}, h("span", { class: `badge ${v.console_state}` }, v.console_state)),
      h("td", {}, duration(v.freshness_lag_ms)),
      h("td", {}, duration(v.target_lag_ms)),
      h("td", {}, pct(v.slo_compliance)),
      h("td", {}, v.epoch ?? "–"),
      h("td", {}, v.degraded_reason || (v.error ? "error" : "–")),
    );
    body.append(tr);
  }
}

// ---- one view: freshness, snapshots, plan ----
function select(view) {
  if (ui.selected !== view) {
    ui.selected = view;
    ui.snapshot = null;
    ui.lastPlan = null;
  }
  $("detail").hidden = false;
  if (ui.lineage) {
    drawLineage(ui.lineage, ui.selected, select);
    drawViewsTable(ui.lineage.views);
  }
  refreshDetail();
}

function showProblem(card) {
  $("detail-title").textContent =
    `${card.view}  (${card.namespace}.${card.view}, ${card.format}, cadence ${card.cadence})`;
  const badge = $("detail-state");
  badge.className = `badge ${card.console_state}`;
  badge.textContent = card.console_state;
  const problem = $("view-problem");
  const reason = card.degraded_reason || (card.state && card.state.toUpperCase() === "FAILED" ? "FAILED" : null);
  problem.hidden = !(reason || card.error);
  problem.className = `problem ${card.console_state}`;
  const atEpoch = card.failed_epoch !== undefined && card.failed_epoch !== null ? ` at epoch ${card.failed_epoch}` : "";
  $("view-reason").textContent = `${card.console_state}: ${reason || "error"}${atEpoch}`;
  $("view-error").textContent = card.error || card.registrar_errors || "";
}

function stat(label, value) {
  return h("div", { class: "stat" }, h("div", { class: "value" }, value), h("div", { class: "label" }, label));
}

async function refreshFreshness() {
  const data = await api(`/views/${encodeURIComponent(ui.selected)}/history?window=${ui.window}`);
  if (data.view !== ui.selected) return;
  showProblem(data.status);
  const epochs = data.per_minute.reduce((a, r) => a + r.epochs, 0),
    rows = data.per_minute.reduce((a, r) => a + r.rows_in, 0);
  const minutes = Math.max(1, (data.to_ms - data.from_ms) / 60000);
  clear($("freshness-stats")).append(
    stat("lag now", duration(data.status.freshness_lag_ms)),
    stat("target lag", duration(data.status.target_lag_ms)),
    stat("SLO compliance (1h, snapshots)", pct(data.status.slo_compliance)),
    stat(`SLO compliance (${data.window}, samples)`, pct(data.sampled_compliance)),
    stat("epochs / min", (epochs / minutes).toFixed(2)),
    stat("rows in / min", (rows / minutes).toFixed(1)),
    stat("rows out total", data.status.rows_out_total ?? "–"),
    stat("pending files", data.status.pending_files ?? "–"),
  );
  drawLagChart(data);
  drawRateChart(data);
}

async function refreshSnapshots() {
  const data = await api(`/views/${encodeURIComponent(ui.selected)}/snapshots`);
  if (data.view !== ui.selected) return;
  const body = clear($("snapshots-table").tBodies[0]);
  if (!data.snapshots.length) body.append(h("tr", {}, h("td", { colspan: 6, class: "muted" }, "no snapshot yet")));
  for (const snap of data.snapshots) {
    const tr = h(
      "tr",
      {
        "data-snapshot": snap.snapshot_id,
        class: ui.snapshot === snap.snapshot_id ? "selected" : "",
        onclick: () => {
          ui.snapshot = snap.snapshot_id;
          showSql(snap);
          refreshSnapshots();
        },
      },
      h("td", {}, snap.epoch),
      h("td", {}, snap.snapshot_id),
      h("td", {}, utc(snap.committed_at_ms)),
      h("td", {}, snap.rows_in),
      h("td", {}, `+${snap.rows_inserted} / −${snap.rows_deleted}`),
      h("td", { class: "muted" }, JSON.stringify(snap.frontier).slice(0, 80)),
    );
    body.append(tr);
  }
  const chosen = data.snapshots.find((x) => x.snapshot_id === ui.snapshot) || data.snapshots[0];
  if (chosen && (ui.snapshot === null || !$("snapshot-sql").dataset.snapshot)) {
    ui.snapshot = chosen.snapshot_id;
    showSql(chosen);
  }
}

async function copy(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (e) {
    const area = h("textarea", {}, text);
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  button.textContent = "copied";
  setTimeout(() => (button.textContent = "copy"), 1500);
}

function showSql(snap) {
  const panel = clear($("snapshot-sql"));
  panel.hidden = false;
  panel.dataset.snapshot = snap.snapshot_id;
  panel.append(h("h3", {}, `Read snapshot ${snap.snapshot_id} (epoch ${snap.epoch})`));
  for (const [engine, label] of [
    ["duckdb", "DuckDB"],
    ["spark", "Spark SQL"],
    ["trino", "Trino"],
  ]) {
    const text = snap.sql ? snap.sql[engine] : "";
    const button = h("button", { class: "copy", "data-engine": engine }, "copy");
    button.addEventListener("click", () => copy(text, button));
    panel.append(
      h(
        "div",
        { class: "sql-block" },
        h("div", { class: "head" }, label, button),
        h("pre", { class: `sql sql-${engine}` }, text),
      ),
    );
  }
}

async function refreshPlan() {
  if (ui.lastPlan === ui.selected) return; // a plan changes only with the config
  const data = await api(`/views/${encodeURIComponent(ui.selected)}/plan`);
  if (data.view !== ui.selected) return;
  ui.lastPlan = ui.selected;
  drawPlan(data);
}

async function refreshDetail() {
  if (!ui.selected) return;
  const card = ui.lineage && ui.lineage.views.find((v) => v.view === ui.selected);
  if (card) showProblem(card);
  if (ui.tab === "freshness") await refreshFreshness();
  else if (ui.tab === "snapshots") await refreshSnapshots();
  else await refreshPlan();
}

// ---- sources ----
async function refreshSources() {
  const data = await api("/sources");
  const box = clear($("sources"));
  for (const src of data.sources) {
    const reasons = Object.entries(src.reasons);
    const card = h(
      "div",
      { class: "source-card", "data-source": src.source },
      h(
        "div",
        { class: "head" },
        h("span", { class: "name" }, src.source),
        h("span", { class: "muted" }, `${src.format} · ${src.path}`),
        h("span", {}, `read by ${src.readers.join(", ") || "no view"}`),
      ),
      h(
        "div",
        { class: "head" },
        h("span", { class: "backlog" }, `backlog: ${src.pending_files ?? "–"} files, ${bytes(src.pending_bytes)}`),
        sparkline(src.backlog),
        h("span", { class: "quarantined" }, `quarantined rows: ${src.quarantined ?? "–"}`),
      ),
    );
    if (reasons.length) {
      const q = h(
        "div",
        { class: "quarantine" },
        h("div", {}, "reasons: ", reasons.map(([r, n]) => `${r} (${n})`).join("; ")),
      );
      const table = h(
        "table",
        { class: "grid quarantine-sample" },
        h(
          "thead",
          {},
          h("tr", {}, h("th", {}, "epoch"), h("th", {}, "reason"), h("th", {}, "file"), h("th", {}, "record")),
        ),
      );
      const body = h("tbody", {});
      for (const row of src.sample)
        body.append(
          h(
            "tr",
            {},
            h("td", {}, row.epoch),
            h("td", {}, row.reason),
            h("td", { class: "muted" }, (row.file || "").split("/").pop()),
            h("td", {}, h("code", {}, row.record)),
          ),
        );
      table.append(body);
      q.append(table);
      card.append(q);
    }
    box.append(card);
  }
}

// ---- the loop ----
let tick = 0;
async function refresh() {
  try {
    const graph = await api("/lineage");
    ui.lineage = graph;
    $("main").hidden = false;
    $("sign-out").hidden = !graph.auth;
    drawLineage(graph, ui.selected, select);
    drawViewsTable(graph.views);
    if (!ui.selected && graph.views.length)
      select((graph.views.find((v) => v.console_state === "failed") || graph.views[0]).view);
    else await refreshDetail();
    if (tick++ % 2 === 0) await refreshSources();
    $("live").className = "live ok";
    $("live").textContent = `live · updated ${clock(graph.at_ms)} UTC`;
  } catch (error) {
    if (error.auth) {
      const had = token();
      sessionStorage.removeItem("lakeview.token");
      showAuth(had ? "the token was refused (expired or unknown); sign in again" : null);
      return;
    }
    $("live").className = "live bad";
    $("live").textContent = `update failed: ${error.message}`;
  }
}

function start() {
  legend();
  $("auth-client").addEventListener("submit", (e) => signInWithClient(e).catch((err) => showAuth(err.message)));
  $("auth-token").addEventListener("submit", (e) => {
    e.preventDefault();
    useToken($("bearer").value);
  });
  $("sign-out").addEventListener("click", () => {
    sessionStorage.removeItem("lakeview.token");
    showAuth(null);
  });
  for (const button of document.querySelectorAll(".tabs button")) {
    button.addEventListener("click", () => {
      ui.tab = button.dataset.tab;
      document.querySelectorAll(".tabs button").forEach((b) => b.classList.toggle("active", b === button));
      for (const t of ["freshness", "snapshots", "plan"]) $(`tab-${t}`).hidden = t !== ui.tab;
      refreshDetail().catch(() => {});
    });
  }
  for (const button of document.querySelectorAll("button.window")) {
    button.addEventListener("click", () => {
      ui.window = button.dataset.window;
      document.querySelectorAll("button.window").forEach((b) => b.classList.toggle("active", b === button));
      refreshDetail().catch(() => {});
    });
  }
  refresh();
  setInterval(() => {
    if ($("auth").hidden) refresh();
  }, POLL_MS);
}

start();
