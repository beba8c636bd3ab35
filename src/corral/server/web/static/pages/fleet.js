// Fleet overview: GPUs by model and pool, the queue and why jobs wait, utilisation over time, firing alerts, and the
// nodes grouped by pool (last: the graphs above keep their place on the screen).
import { get, getWithTotal, has } from "../api.js";
import { RangePicker, TimeChart } from "../chart.js";
import { fmtDateTime } from "../format.js";
import { $, bar, esc, table } from "../ui.js";
import { live } from "../ui.js";
import { reasonText } from "./jobs.js";
import { NODE_COLUMNS, nodeRow } from "./nodes.js";

const REASON_SAMPLE = 200; // pending reasons are counted over the oldest this many pending jobs

// GPUs total / in use / free / unhealthy per model and per pool, from the node list's own counts (in use = total -
// free - unhealthy, as the API counts them). A node with more than one GPU model is counted GPU by GPU from
// `gpusOfMixed` (its /gpus list): the page need not fetch all of the fleet's GPUs to draw these tables.
export function summarise(nodes, gpusOfMixed = []) {
  const byKey = new Map();
  const add = (key, total, used, free, unhealthy) => {
    const s = byKey.get(key) || { total: 0, used: 0, free: 0, unhealthy: 0 };
    s.total += total; s.used += used; s.free += free; s.unhealthy += unhealthy;
    byKey.set(key, s);
  };
  for (const n of nodes) {
    const unhealthy = n.gpus_unhealthy || 0, used = n.gpus_total - n.gpus_free - unhealthy;
    add(`pool:${n.pool || n.labels.pool || "—"}`, n.gpus_total, used, n.gpus_free, unhealthy);
    if (n.gpu_models.length === 1) add(`model:${n.gpu_models[0]}`, n.gpus_total, used, n.gpus_free, unhealthy);
  }
  const mixed = new Set(nodes.filter((n) => n.gpu_models.length > 1).map((n) => n.name));
  for (const g of gpusOfMixed) {
    if (!mixed.has(g.node)) continue;
    const bad = !g.healthy, busy = !bad && (g.job_id !== null || g.used_milli > 0);
    add(`model:${g.model}`, 1, busy ? 1 : 0, !bad && !busy ? 1 : 0, bad ? 1 : 0);
  }
  return byKey;
}

// What each kind of pool is, in words: a slurm or kubernetes pool's nodes are an existing cluster's, which runs its jobs.
const KIND_TEXT = {
  static: "static · Corral agents",
  cloud: "cloud · autoscaled",
  slurm: "slurm · an existing Slurm cluster's nodes",
  kubernetes: "kubernetes · an existing Kubernetes cluster's nodes",
};
export const kindText = (kind) => KIND_TEXT[kind] || (kind ? String(kind) : "not a declared pool");

// A node's pool: the API's `pool` (an older server: the `pool` label; no label: the static pool).
export const poolOf = (n) => n.pool || (n.labels && n.labels.pool) || "static";

// The nodes grouped by pool, static first, then the others by name. `pools` (GET /api/v1/pools) gives each pool's
// kind and adds the declared pools that have no node yet (an empty static pool is left out: nothing to say). A pool
// only the nodes name (no such pool declared) takes its kind from its nodes' source (slurm, kubernetes) when not agent.
export function groupByPool(nodes, pools = []) {
  const groups = new Map();
  const group = (name) => {
    if (!groups.has(name)) groups.set(name, { name, kind: null, declared: false, nodes: [], gpusFree: 0, gpusTotal: 0 });
    return groups.get(name);
  };
  for (const n of nodes) {
    const g = group(poolOf(n));
    g.nodes.push(n); g.gpusFree += n.gpus_free; g.gpusTotal += n.gpus_total;
  }
  for (const p of pools) {
    if (p.name === "static" && !groups.has("static")) continue;
    const g = group(p.name);
    g.kind = p.kind; g.declared = true;
  }
  for (const g of groups.values()) {
    if (g.kind) continue;
    const source = g.nodes.map((n) => n.source).find((s) => s && s !== "agent");
    g.kind = g.name === "static" ? "static" : source || null;
  }
  const byName = (a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
  return [...groups.values()].sort((a, b) => (b.name === "static") - (a.name === "static") || byName(a, b));
}

// One section per pool: a header (name, kind, node count, GPUs free / total), then its nodes as the node list shows them.
export function poolSections(groups) {
  if (!groups.length) return `<p class="muted">no nodes</p>`;
  return groups.map((g) => {
    const name = g.declared || g.name === "static"
      ? `<a href="/pools/${esc(encodeURIComponent(g.name))}" data-pool-name>${esc(g.name)}</a>` : `<span data-pool-name>${esc(g.name)}</span>`;
    const count = `${g.nodes.length} node${g.nodes.length === 1 ? "" : "s"}`;
    return `<section class="pool-section" data-pool-section="${esc(g.name)}">
      <h3>${name} <span class="pool-kind" data-pool-kind="${esc(g.kind || "")}">${esc(kindText(g.kind))}</span>
        <span class="muted" data-pool-counts><span data-pool-nodes>${esc(count)}</span> · <span data-pool-gpus>${g.gpusFree} / ${g.gpusTotal}</span> GPUs free</span></h3>
      ${g.nodes.length ? table(NODE_COLUMNS, g.nodes.map(nodeRow)) : `<p class="muted" data-no-nodes>no nodes yet</p>`}
    </section>`;
  }).join("");
}

// The GPUs of the nodes that have more than one model: per node while they are few, else the whole list once.
async function gpusOfMixedNodes(nodes) {
  const mixed = nodes.filter((n) => n.gpu_models.length > 1);
  if (!mixed.length) return [];
  if (mixed.length > 4) return get("/api/v1/gpus");
  return (await Promise.all(mixed.map((n) => get("/api/v1/gpus", { node: n.name })))).flat();
}

export async function render(page) {
  document.title = "Fleet · Corral";
  page.root.innerHTML = `<h1>Fleet</h1>
    <div class="cards" id="totals"></div>
    <h2>GPUs by model</h2><div id="by-model"></div>
    <div id="by-pool-wrap" hidden><h2>GPUs by pool</h2><div id="by-pool"></div></div>
    <h2>Queue</h2><div id="queue"></div>
    <h2>Utilisation</h2><div id="range"></div><div class="charts" id="charts"></div>
    <h2>Firing alerts</h2><div id="alerts"></div>
    <h2>Nodes by pool</h2><div id="pools"></div>`;
  const range = new RangePicker($("#range"), () => refreshCharts());
  const charts = $("#charts");
  const zoom = { onZoom: (a, b) => range.zoom(a, b), onReset: () => range.reset() };
  const util = new TimeChart(charts, { title: "GPU utilisation (mean of all GPUs)", unit: "%", id: "fleet-util", ...zoom });
  const alloc = new TimeChart(charts, { title: "GPUs allocated to jobs", unit: "GPUs", id: "fleet-alloc", ...zoom });

  async function refreshCharts() {
    const r = range.current(), span = range.span();
    // Both from the server's history, so a reload or a second visit draws the same past.
    const [u, a] = await Promise.all([
      has("/api/v1/metrics/series") ? get("/api/v1/metrics/series", { metric: "gpu_util_pct", agg: "avg", ...r }) : null,
      has("/api/v1/metrics/allocated") ? get("/api/v1/metrics/allocated", r) : null,
    ]);
    if (page.closed) return;
    // One series averaged in the database (agg=avg), not every GPU's series averaged here.
    // Both over the whole range, so that the two graphs side by side share their time axis.
    if (u) util.setData(u.series.map((s) => ({ name: "mean of all GPUs", points: s.points })), undefined, span);
    else util.setData([], "metrics are not available on this server");
    if (a) alloc.setData(a.series.map((s) => ({ name: "GPUs held by running jobs", points: s.points })), undefined, span);
    else alloc.setData([], "allocation history is not available on this server");
  }

  async function refresh() {
    // The pool list (kinds, and the declared pools with no node yet): every role may read it. The fleet never shows a
    // pool's settings, and a pool's own page (GET /pools/NAME) is not asked here.
    const [nodes, pending, running, declared] = await Promise.all([
      get("/api/v1/nodes"),
      getWithTotal("/api/v1/jobs", { state: "PENDING", limit: REASON_SAMPLE }),
      getWithTotal("/api/v1/jobs", { state: "RUNNING", limit: 1 }),
      has("/api/v1/pools") ? get("/api/v1/pools") : [],
    ]);
    const mixedGpus = await gpusOfMixedNodes(nodes);
    if (page.closed) return;
    const stats = summarise(nodes, mixedGpus);
    const total = { total: 0, used: 0, free: 0, unhealthy: 0 };
    for (const [k, s] of stats) if (k.startsWith("model:")) for (const f in total) total[f] += s[f];
    $("#totals").innerHTML = [
      ["GPUs", total.total, `${nodes.length} nodes`], ["In use", total.used, ""], ["Free", total.free, ""],
      ["Unhealthy", total.unhealthy, ""], ["Pending jobs", pending.total, ""], ["Running jobs", running.total, ""],
    ].map(([l, v, sub]) => `<div class="card" data-stat="${esc(l)}"><h3>${esc(l)}</h3><div class="stat">${v} <small>${esc(sub)}</small></div></div>`).join("");
    const rows = (prefix) => [...stats].filter(([k]) => k.startsWith(prefix)).sort().map(([k, s]) =>
      [esc(k.slice(prefix.length)), s.total, s.used, s.free, s.unhealthy ? `<span class="bad">${s.unhealthy}</span>` : 0, bar(s.total ? s.used / s.total : 0)]);
    const cols = ["", "Total", "In use", "Free", "Unhealthy", "Allocated"];
    $("#by-model").innerHTML = table(["Model", ...cols.slice(1)], rows("model:"), "no GPUs registered");
    const pools = rows("pool:");
    $("#by-pool-wrap").hidden = pools.length < 2;
    $("#by-pool").innerHTML = table(["Pool", ...cols.slice(1)], pools);
    $("#pools").innerHTML = poolSections(groupByPool(nodes, declared.map((p) => ({ name: p.name, kind: p.kind }))));
    const reasons = new Map();
    for (const j of pending.items) {
      const r = reasonText(j.pending_code || j.pending_reason); // grouped by cause, not by each job's numbers
      reasons.set(r, (reasons.get(r) || 0) + 1);
    }
    $("#queue").innerHTML = `<p><b data-queue-length>${pending.total}</b> pending, ${running.total} running. <a href="/jobs">Open the queue</a></p>` +
      table([pending.total > REASON_SAMPLE ? `Pending reason (of the oldest ${REASON_SAMPLE})` : "Pending reason", "Jobs"], [...reasons].sort((a, b) => b[1] - a[1]).map(([r, n]) => [esc(r), n]), "nothing is waiting");
    if (has("/api/v1/alerts")) {
      const alerts = await get("/api/v1/alerts", { state: "firing" });
      $("#alerts").innerHTML = table(["Severity", "Rule", "Labels", "Value", "Since", "Message"], alerts.map((a) =>
        [esc(a.severity), esc(a.rule), esc(Object.entries(a.labels || {}).map(([k, v]) => `${k}=${v}`).join(" ")),
          esc(a.value), esc(fmtDateTime(a.started_at)), esc(a.message)]), "no alert is firing");
    } else {
      $("#alerts").innerHTML = `<p class="muted">alerts are not available on this server</p>`;
    }
  }
  await live(page, refresh, 3000);
  await live(page, refreshCharts, 10000);
}
