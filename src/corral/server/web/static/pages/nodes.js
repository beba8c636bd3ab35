// Nodes: the list with health and load, and one node with host graphs, GPU cards, topology, jobs, actions.
import { ApiError, get, has, isAdmin, send } from "../api.js";
import { RangePicker, TimeChart } from "../chart.js";
import { eventText, faultText, fmtDateTime, kindText } from "../format.js";
import { $, ago, bar, esc, live, num, stateTag, table, toast } from "../ui.js";
import { fillCharts } from "./metrics.js";

// One node as a row of the node list (the fleet page's pool sections show their nodes the same way).
export const NODE_COLUMNS = ["Node", "State", "GPUs free / total", "GPU load", "Models", "CPU", "Memory", "Last heartbeat"];
export const nodeRow = (n) => [`<a href="/nodes/${encodeURIComponent(n.name)}" data-node="${esc(n.name)}">${esc(n.name)}</a>`,
  nodeState(n) + (n.cordoned ? ' <span class="warn">cordoned</span>' : "") + (n.gpus_unhealthy ? ` <span class="bad">${n.gpus_unhealthy} GPU${n.gpus_unhealthy > 1 ? "s" : ""} unhealthy</span>` : ""),
  `${n.gpus_free} / ${n.gpus_total}`, bar(n.gpus_total ? 1 - n.gpus_free / n.gpus_total : 0), esc(n.gpu_models.join(", ")),
  `${num(n.cpu_milli / 1000, 0)} cores`, `${num(n.memory_mib / 1024, 0)} GiB`, esc(ago(n.last_heartbeat_at))];

export async function renderList(page) {
  document.title = "Nodes · Corral";
  page.root.innerHTML = `<h1>Nodes</h1><div class="row"><label>Filter <input id="filter" placeholder="name, model or state"></label></div><div id="nodes"></div>`;
  let nodes = [];
  const paint = () => {
    const f = $("#filter").value.trim().toLowerCase();
    const shown = nodes.filter((n) => !f || [n.name, n.state, ...n.gpu_models].some((s) => s.toLowerCase().includes(f)));
    $("#nodes").innerHTML = table(NODE_COLUMNS, shown.map(nodeRow), "no nodes");
  };
  $("#filter").addEventListener("input", paint);
  await live(page, async () => { nodes = await get("/api/v1/nodes"); if (!page.closed) paint(); }, 3000);
}

// Newest first; events of the same instant keep the API's order reversed (its sequence).
export const byNewest = (events) => events.map((e, i) => [e, i])
  .sort((a, b) => new Date(b[0].at) - new Date(a[0].at) || b[1] - a[1]).map(([e]) => e);

// A READY node with a GPU out of the pool is DEGRADED, not green READY.
export const nodeStateText = (n) => (n.state.toUpperCase() === "READY" && n.gpus_unhealthy ? "DEGRADED" : n.state);
const nodeState = (n) => {
  const s = nodeStateText(n);
  const cls = s.toUpperCase() === "READY" ? "ok" : s.toLowerCase().includes("lost") ? "bad" : "warn";
  return `<span class="${cls}" data-node-state="${esc(s)}">${esc(s)}</span>`;
};

// Why each unhealthy GPU is out, in words ("GPU 0: Xid 79"), from its reason and the newest event about it.
export function faultsOf(gpus, events) {
  return gpus.filter((g) => !g.healthy).map((g) => {
    const ev = (events || []).filter((e) => e.gpu === g.index && e.kind === "gpu_unhealthy").at(-1);
    return `GPU ${g.index}: ${faultText(g.health_reason || (ev && ev.message.split(":")[0]), ev ? ev.message : "")}`;
  });
}
export const eventRow = (e) => [esc(fmtDateTime(e.at)), esc(kindText(e.kind) + (e.gpu !== null && e.gpu !== undefined ? ` (GPU ${e.gpu})` : "")), esc(eventText(e.message))];

// nvidia-smi style: X itself, NV an NVLink peer, NODE same NUMA node over PCIe, SYS across NUMA nodes.
export function topology(gpus) {
  const link = (a, b) => a.index === b.index ? "X" : a.nvlink_peers.includes(b.index) || b.nvlink_peers.includes(a.index) ? "NV"
    : a.numa_node === null || b.numa_node === null ? "PCIe" : a.numa_node === b.numa_node ? "NODE" : "SYS";
  const head = "<tr><th></th>" + gpus.map((g) => `<th>GPU${g.index}</th>`).join("") + "<th>NUMA</th><th>PCI bus</th></tr>";
  const rows = gpus.map((a) => `<tr><th>GPU${a.index}</th>` + gpus.map((b) => { const l = link(a, b); return `<td class="${l}">${l}</td>`; }).join("")
    + `<td>${esc(a.numa_node ?? "—")}</td><td>${esc(a.pci_bus_id)}</td></tr>`).join("");
  return `<table class="topo" data-topology><thead>${head}</thead><tbody>${rows}</tbody></table>
    <p class="muted">NV = NVLink, NODE = PCIe within a NUMA node, SYS = PCIe across NUMA nodes, X = itself.</p>`;
}

function gpuCard(node, g, m, fault) {
  const head = `<div class="card gpu-card" data-gpu="${g.index}"><h3><a href="/gpus/${encodeURIComponent(node)}/${g.index}">GPU ${g.index}</a> · ${esc(g.model)}</h3>
    <div>${g.healthy ? (g.job_id !== null ? `job <a href="/jobs/${g.job_id}">#${g.job_id}</a>` : g.used_milli > 0 ? "used" : '<span class="ok">free</span>')
      : `<span class="bad">${esc((g.health || "unhealthy").toLowerCase())}</span> <span class="muted" data-fault>${esc(fault || faultText(g.health_reason))}</span>`}</div>`;
  // A GPU off the bus (or one the agent could not read) has no vitals: none are shown, not the last ones seen.
  if (g.health_reason === "off_bus" || (!g.healthy && !m)) {
    return head + `<div class="bad" data-no-vitals>${g.health_reason === "off_bus" ? "Off the bus" : "Not readable"}: no readings</div></div>`;
  }
  const util = m ? m.util_pct : null, mem = m ? m.mem_used_mib : null;
  const memTotal = m && m.mem_total_mib ? m.mem_total_mib : g.memory_mib;
  return head + `
    <div>Utilisation <b>${num(util, 0)}%</b></div>${bar((util || 0) / 100)}
    <div>Memory <b>${mem === null ? "—" : num(mem / 1024, 1)}</b> / ${num(memTotal / 1024, 0)} GiB</div>${bar(mem ? mem / memTotal : 0)}
    <div>Power <b>${num(m && m.power_w, 0)} W</b> · Temp <b>${num(m && m.temp_c, 0)} °C</b></div></div>`;
}

export async function renderNode(page) {
  const [name] = page.params;
  document.title = `${name} · Nodes · Corral`;
  page.root.innerHTML = `<h1>Node ${esc(name)}</h1><div id="summary" class="row"></div><div id="actions" class="row"></div>
    <h2>Host</h2><div id="range"></div><div class="charts" id="charts"></div>
    <h2>GPUs</h2><div class="cards" id="gpus"></div>
    <h2>Topology</h2><div id="topology"></div>
    <h2>Jobs on this node</h2><div id="jobs"></div>
    <h2>Events</h2><div id="events"></div>`;
  const node = await get(`/api/v1/nodes/${encodeURIComponent(name)}`);
  const range = new RangePicker($("#range"), () => charts());
  const opts = (title, unit, yMax = null) => ({ title, unit, yMax, onZoom: (a, b) => range.zoom(a, b), onReset: () => range.reset() });
  const cs = {
    cpu_pct: { chart: new TimeChart($("#charts"), { ...opts("CPU busy", "%", 100), id: "cpu" }) },
    mem_used_pct: { chart: new TimeChart($("#charts"), { ...opts("Memory used", "%", 100), id: "mem" }) },
    disk_used_pct: { chart: new TimeChart($("#charts"), { ...opts("Disk used", "%", 100), id: "disk" }) },
    net: { chart: new TimeChart($("#charts"), { ...opts("Network traffic", "B/s"), id: "net" }), metrics: ["net_rx_bps", "net_tx_bps"] },
  };
  const charts = () => fillCharts(cs, { node: name }, range);
  const refresh = async () => {
    const [n, gpus, jobs, latest, events] = await Promise.all([
      get(`/api/v1/nodes/${encodeURIComponent(name)}`), get("/api/v1/gpus", { node: name }), get("/api/v1/jobs", { node: name }),
      has("/api/v1/metrics/latest") ? get("/api/v1/metrics/latest", { node: name }) : null,
      has("/api/v1/nodes/{name}/events") ? get(`/api/v1/nodes/${encodeURIComponent(name)}/events`) : null,
    ]);
    if (page.closed) return;
    const mine = gpus.filter((g) => g.node === name).sort((a, b) => a.index - b.index);
    const byIndex = new Map(((latest && latest.gpus) || []).map((m) => [m.index, m]));
    const host = (latest && latest.host) || {};
    const faults = faultsOf(mine, events);
    $("#summary").innerHTML = `${nodeState(n)}${faults.length ? ` <span class="bad" data-node-faults>${esc(faults.join(" · "))}</span>` : ""}${n.cordoned ? ' · <span class="warn" data-cordoned>cordoned</span>' : ""} · ${esc(n.backend)} · ${n.gpus_free} / ${n.gpus_total} GPUs free ·
      ${num(n.cpu_milli / 1000, 0)} cores · ${num(n.memory_mib / 1024, 0)} GiB · heartbeat ${esc(ago(n.last_heartbeat_at))}` +
      (latest && latest.host ? ` · CPU ${num(host.cpu_pct ?? host.host_cpu_percent, 0)}% · RAM ${num(host.mem_used_pct ?? host.host_memory_used_percent, 0)}%` : "");
    // Cordon while the node takes work, Enable while it is cordoned (Drain either way: it also requeues jobs).
    page.root.querySelectorAll("#actions button[data-action]").forEach((b) => {
      if (b.dataset.action !== "drain") b.disabled = (b.dataset.action === "cordon") === n.cordoned;
    });
    const faultOf = new Map(mine.filter((g) => !g.healthy).map((g, i) => [g.index, faults[i].replace(/^GPU \d+: /, "")]));
    $("#gpus").innerHTML = mine.map((g) => gpuCard(name, g, byIndex.get(g.index), faultOf.get(g.index))).join("") || `<p class="muted">no GPUs</p>`;
    $("#topology").innerHTML = mine.length ? topology(mine) : "";
    $("#jobs").innerHTML = table(["Job", "Name", "State", "GPUs", "Tenant", "Started"], jobs.map((j) =>
      [`<a href="/jobs/${j.id}">#${j.id}</a>`, esc(j.name), stateTag(j.state), esc(j.gpus.join(",")), esc(j.tenant ?? ""), esc(fmtDateTime(j.started_at))]), "no jobs here");
    $("#events").innerHTML = events === null ? `<p class="muted">node events are not available on this server</p>`
      : table(["When", "Event", "What happened"], byNewest(events).slice(0, 50).map(eventRow), "no events");
  };
  paintActions(node, () => refresh().catch((e) => page.error(e)));
  await live(page, refresh, 3000);
  await live(page, charts, 10000);
}

// Drain requeues every job running on the node, so it asks first.
const CONFIRM = { drain: (name) => `Drain ${name}? It is cordoned and every job running on it is stopped and requeued.` };

function paintActions(node, refresh) {
  if (!isAdmin()) return;
  const acts = [["cordon", "Cordon"], ["uncordon", "Enable"], ["drain", "Drain"]].filter(([a]) => has(`/api/v1/nodes/{name}/${a}`));
  $("#actions").innerHTML = acts.map(([a, l]) => `<button type="button" class="secondary" data-action="${a}">${l}</button>`).join("")
    || `<span class="muted">cordon / drain are not available on this server</span>`;
  $("#actions").addEventListener("click", async (e) => {
    const b = e.target.closest("button[data-action]"); if (!b) return;
    const ask = CONFIRM[b.dataset.action];
    if (ask && !window.confirm(ask(node.name))) return;
    try { await send("POST", `/api/v1/nodes/${encodeURIComponent(node.name)}/${b.dataset.action}`); toast(`${node.name}: ${b.dataset.action} done`); }
    catch (err) { if (!(err instanceof ApiError && err.status === 401)) toast(err.message); }
    refresh();
  });
}
