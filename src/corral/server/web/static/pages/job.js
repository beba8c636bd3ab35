// One job: state timeline from its events, live logs, its GPUs and their graphs, cancel and retry.
import { canSubmit, get, has, request, send } from "../api.js";
import { RangePicker, TimeChart } from "../chart.js";
import { navigate } from "../app.js";
import { $, dur, esc, live, stateTag, table, time, toast } from "../ui.js";
import { gpusOf, reasonText } from "./jobs.js";

const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);

// argv as a shell would need it typed: words with spaces or shell characters in single quotes.
export const shellJoin = (argv) => argv.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, "'\\''")}'`)).join(" ");

// A pending job's place in the scheduler's line (shown from 1) and its estimated start.
const inLine = (j) => j.state !== "PENDING" || (j.queue_position ?? null) === null ? "—"
  : `#${j.queue_position + 1}` + (j.eta_s !== null && j.eta_s !== undefined ? `, starts in ~${esc(dur(j.eta_s))}` : "");

export function retrySpec(j) {
  const spec = { command: j.command, name: j.name, gpus: j.gpu_count, gpu_milli: j.gpu_milli, env: j.env,
    priority: j.priority, queue: j.queue };
  if (j.gpu_model) spec.gpu_model = j.gpu_model;
  if (j.workdir) spec.workdir = j.workdir;
  if (j.time_limit_s) spec.time_limit_s = j.time_limit_s;
  if (j.web_ui || j.port) spec.web_ui = true;  // Corral assigns the port again
  return spec;
}

export async function render(page) {
  const id = Number(page.params[0]);
  let job = await get(`/api/v1/jobs/${id}`);
  document.title = `Job #${id} · Corral`;
  page.root.innerHTML = `<h1>Job #${id} <span id="name"></span> <span id="state"></span></h1>
    <div class="row" id="actions"></div><div class="row" id="webui"></div><div id="info"></div>
    <h2>Timeline</h2><ul class="timeline" id="timeline"></ul>
    <h2>Logs</h2><pre class="logs" id="logs" data-size="0"></pre>
    <h2>GPUs</h2><div id="gpus"></div><div id="range"></div><div class="charts" id="charts"></div>`;
  const actions = $("#actions");
  if (canSubmit()) {
    actions.innerHTML = `<button type="button" class="danger" id="cancel">Cancel</button><button type="button" class="secondary" id="retry">Retry</button>`;
    $("#cancel").addEventListener("click", async () => {
      try { job = await send("POST", `/api/v1/jobs/${id}/cancel`); toast(`job #${id}: cancel requested`); paint(); } catch (e) { toast(e.message); }
    });
    $("#retry").addEventListener("click", async () => {
      try { const j = await send("POST", "/api/v1/jobs", retrySpec(job)); navigate(`/jobs/${j.id}`); } catch (e) { toast(e.message); }
    });
  }
  const range = new RangePicker($("#range"), () => charts());
  const util = new TimeChart($("#charts"), { title: "GPU utilisation of this job", unit: "%", yMax: 100, id: "job-util",
    onZoom: (a, b) => range.zoom(a, b), onReset: () => range.reset() });
  const charts = async () => {
    if (!has("/api/v1/metrics/series")) { util.setData([], "metrics are not available on this server"); return; }
    const res = await get("/api/v1/metrics/series", { metric: "gpu_util_pct", job: id, ...range.current() });
    util.setData(res.series.map((s) => ({ name: `${s.labels.node ?? ""} GPU ${s.labels.gpu ?? ""}`, points: s.points })));
  };

  function paint() {
    $("#name").textContent = job.name ? `· ${job.name}` : "";
    $("#state").innerHTML = stateTag(job.state);
    const cancel = $("#cancel");
    if (cancel) cancel.disabled = TERMINAL.has(job.state) || job.cancel_requested;
    // The job's own web UI (the port Corral assigned it), through Corral's authenticated proxy, while it runs.
    $("#webui").innerHTML = (job.web_url ? `<a id="open-webui" href="${esc(job.web_url)}" target="_blank" rel="noopener">Open the job's web UI (port ${job.port})</a>` : "")
      + (job.schedule_id ? ` <span class="muted">started by <a href="/schedules#schedule-${job.schedule_id}">schedule ${job.schedule_id}</a></span>` : "");
    const ran = job.started_at ? ((job.finished_at ? new Date(job.finished_at) : new Date()) - new Date(job.started_at)) / 1000 : null;
    $("#info").innerHTML = table(["Command", "Tenant", "Queue", "Priority", "GPUs", "Node", "Exit", "Ran for", "Reason", "In line", "Preempted"], [[
      `<code>${esc(shellJoin(job.command))}</code>`, esc(job.tenant ?? ""), esc(job.queue), job.priority, gpusOf(job),
      job.node ? `<a href="/nodes/${encodeURIComponent(job.node)}">${esc(job.node)}</a>` : "—", esc(job.exit_code ?? ""),
      ran === null ? "—" : dur(ran), esc(job.pending_reason ? reasonText(job.pending_reason) : job.reason || ""), inLine(job),
      job.preemptions ? `${job.preemptions} time${job.preemptions > 1 ? "s" : ""}` : "—"]]);
    $("#gpus").innerHTML = job.node && job.gpus.length ? job.gpus.map((g) =>
      `<a href="/gpus/${encodeURIComponent(job.node)}/${g}">${esc(job.node)} GPU ${g}</a>`).join(" · ") : `<p class="muted">no GPUs assigned</p>`;
  }

  const logs = $("#logs");
  let offset = 0, done = false;
  async function pollLogs() {
    if (done) return;
    const r = await request("GET", `/api/v1/jobs/${id}/logs`, { params: { offset }, raw: true });
    const text = await r.text();
    if (page.closed) return;
    if (text) {
      const atEnd = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 20;
      logs.append(document.createTextNode(text));
      offset += new TextEncoder().encode(text).length;
      logs.dataset.size = String(offset);
      if (atEnd) logs.scrollTop = logs.scrollHeight;
    }
    if (TERMINAL.has(r.headers.get("X-Job-State")) && offset >= Number(r.headers.get("X-Log-Size") || 0)) done = true;
  }

  async function refresh() {
    const [j, events] = await Promise.all([get(`/api/v1/jobs/${id}`), get(`/api/v1/jobs/${id}/events`)]);
    if (page.closed) return;
    job = j; paint();
    const items = events.map((e) => [e.kind, e.at, e.message]);
    if (!events.some((e) => e.kind === "submitted" || e.kind === "created")) items.unshift(["submitted", job.created_at, ""]);
    if (job.started_at && !events.some((e) => e.kind.toLowerCase().includes("start") || e.kind.toLowerCase().includes("run"))) items.push(["started", job.started_at, `on ${job.node}`]);
    if (job.finished_at && !events.some((e) => TERMINAL.has(e.kind.toUpperCase()))) items.push([job.state.toLowerCase(), job.finished_at, job.reason || ""]);
    items.sort((a, b) => new Date(a[1]) - new Date(b[1]));
    $("#timeline").innerHTML = items.map(([k, at, msg]) => `<li><b>${esc(k)}</b> <span class="muted">${esc(time(at))}</span> ${esc(msg)}</li>`).join("");
  }
  paint();
  await live(page, refresh, 1500);
  await live(page, pollLogs, 1000);
  await live(page, charts, 10000);
}
