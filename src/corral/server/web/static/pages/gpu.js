// One GPU: what it is, its history (utilisation, memory, power, temperature) and health events.
import { ApiError, get, has, isAdmin, send } from "../api.js";
import { RangePicker, TimeChart } from "../chart.js";
import { $, esc, live, table, toast } from "../ui.js";
import { faultText } from "../format.js";
import { fillCharts } from "./metrics.js";
import { byNewest, eventRow, faultsOf } from "./nodes.js";

export async function render(page) {
  const [node, indexText] = page.params;
  const index = Number(indexText);
  document.title = `GPU ${index} on ${node} · Corral`;
  const gpus = await get("/api/v1/gpus", { node });
  if (!gpus.some((g) => g.node === node && g.index === index)) throw new ApiError(404, "not_found", `GPU ${index} on node ${node} not found`, null);
  page.root.innerHTML = `<h1>GPU ${index} on <a href="/nodes/${encodeURIComponent(node)}">${esc(node)}</a></h1>
    <div id="info"></div><div id="vitals"></div><div id="actions" class="row"></div>
    <h2>History</h2><div id="range"></div><div class="charts" id="charts"></div>
    <h2>Health events</h2><div id="events"></div>`;
  const range = new RangePicker($("#range"), () => charts());
  const opts = (title, unit, id, yMax = null) => ({ title, unit, id, yMax, onZoom: (a, b) => range.zoom(a, b), onReset: () => range.reset() });
  const cs = {
    gpu_util_pct: { chart: new TimeChart($("#charts"), opts("Utilisation", "%", "util", 100)) },
    gpu_mem_used_mib: { chart: new TimeChart($("#charts"), opts("Memory used", "GiB", "mem")), scale: 1 / 1024 },
    gpu_power_w: { chart: new TimeChart($("#charts"), opts("Power", "W", "power")) },
    gpu_temp_c: { chart: new TimeChart($("#charts"), opts("Temperature", "°C", "temp")) },
  };
  const charts = () => fillCharts(cs, { node, gpu: index }, range);
  const eventsPath = `/api/v1/gpus/${encodeURIComponent(node)}/${index}/events`;
  const refresh = async () => {
    const [all, events] = await Promise.all([get("/api/v1/gpus", { node }), has("/api/v1/gpus/{node}/{index}/events") ? get(eventsPath) : null]);
    if (page.closed) return;
    const g = all.find((x) => x.node === node && x.index === index);
    if (!g) return;
    const health = g.health || (g.healthy ? "HEALTHY" : "UNHEALTHY");
    $("#info").innerHTML = table(["Model", "Memory", "UUID", "PCI bus", "NUMA", "NVLink peers", "Health", "Job"], [[
      esc(g.model), `${(g.memory_mib / 1024).toFixed(0)} GiB`, esc(g.uuid), esc(g.pci_bus_id), esc(g.numa_node ?? "—"),
      esc(g.nvlink_peers.join(", ") || "none"),
      `<span class="${health === "HEALTHY" ? "ok" : "bad"}" data-health="${esc(health)}">${esc(health.toLowerCase())}</span> ${esc(g.healthy ? "" : (faultsOf([g], events)[0] || "").replace(/^GPU \d+: /, "") || faultText(g.health_reason))}`,
      g.job_id !== null ? `<a href="/jobs/${g.job_id}">#${g.job_id}</a>` : g.used_milli > 0 ? "used (another tenant's job)" : "free"]]);
    // An admin's buttons follow the state: Disable while it is in the pool, Enable while it is out.
    page.root.querySelectorAll("#actions button[data-action]").forEach((b) => {
      b.disabled = b.dataset.action === "disable" ? health === "DISABLED" : health === "HEALTHY";
    });
    $("#events").innerHTML = events === null ? `<p class="muted">GPU health events are not available on this server</p>`
      : table(["When", "Event", "What happened"], byNewest(events).map(eventRow), "no health events");
    $("#vitals").innerHTML = g.health_reason === "off_bus"
      ? `<p class="bad" data-no-vitals>Off the bus: this GPU sends no readings; the graphs end when it fell off.</p>` : "";
  };
  if (isAdmin()) paintActions(node, index, () => refresh().catch((e) => page.error(e)));
  await live(page, refresh, 3000);
  await live(page, charts, 10000);
}

function paintActions(node, index, refresh) {
  const acts = [["enable", "Enable"], ["disable", "Disable"]].filter(([a]) => has(`/api/v1/gpus/{node}/{index}/${a}`));
  $("#actions").innerHTML = acts.map(([a, l]) => `<button type="button" class="secondary" data-action="${a}">${l}</button>`).join("");
  $("#actions").addEventListener("click", async (e) => {
    const b = e.target.closest("button[data-action]"); if (!b) return;
    try { await send("POST", `/api/v1/gpus/${encodeURIComponent(node)}/${index}/${b.dataset.action}`); toast(`GPU ${index}: ${b.dataset.action}d`); }
    catch (err) { if (!(err instanceof ApiError && err.status === 401)) toast(err.message); }
    refresh();
  });
}
