// One job: state timeline from its events, live logs, its GPUs and their graphs, cancel and retry.
import { canSubmit, get, has, request, send } from "../api.js";
import { RangePicker, TimeChart } from "../chart.js";
import { navigate } from "../app.js";
import { faultText, fmtDateTime, kindText } from "../format.js";
import { $, dur, esc, live, stateTag, table, toast } from "../ui.js";
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
  if (j.secret_env && Object.keys(j.secret_env).length) spec.secret_env = j.secret_env;  // names: the values stay sealed
  if (j.nodes > 1) spec.nodes = j.nodes;  // a gang again
  if (j.stage_in && j.stage_in.length) spec.stage_in = j.stage_in;  // its data staged again (the node may have it)
  if (j.stage_out && j.stage_out.length) spec.stage_out = j.stage_out;
  if (j.stage_secret) spec.stage_secret = j.stage_secret;
  if (j.image) { // the same container again (its image by name: a newer push of the tag is pulled)
    spec.image = j.image;
    if (j.mounts && j.mounts.length) spec.mounts = j.mounts;
    if (j.shm_size_mib) spec.shm_size_mib = j.shm_size_mib;
    if (j.container_user) spec.container_user = j.container_user;
    if (j.registry_secret) spec.registry_secret = j.registry_secret;
  }
  return spec;
}

// What a running job does before its command starts ("pulling 43%"), shown beside its state; "" otherwise.
export const phaseText = (j) => (j.phase ? `· ${j.phase}` : "");

// A container job's image, mounts, /dev/shm, user and registry login; "" for a plain process.
export function containerTable(j) {
  if (!j.image) return "";
  const mounts = (j.mounts || []).map((m) => `<code>${esc(m)}</code>`).join("<br>") || "none";
  return table(["Image", "Image digest", "Mounts", "Shared memory", "Container user", "Registry secret"], [[
    `<code data-image>${esc(j.image)}</code>`,
    j.image_digest ? `<code>${esc(j.image_digest)}</code>` : `<span class="muted">once it starts</span>`, mounts,
    j.shm_size_mib ? `${esc(j.shm_size_mib)} MiB` : `<span class="muted">default</span>`,
    j.container_user ? esc(j.container_user) : `<span class="muted">the job's own</span>`,
    j.registry_secret ? esc(j.registry_secret) : `<span class="muted">none</span>`]]);
}

// A job's data staging: its items each way, where its input is, and how shipping its output went; "" without any.
export function stagingTable(j) {
  const ins = j.stage_in || [], outs = j.stage_out || [];
  if (!ins.length && !outs.length) return "";
  const items = (xs) => xs.map((x) => `<code>${esc(x)}</code>`).join("<br>") || `<span class="muted">none</span>`;
  const input = j.stage_state ? `${esc(j.stage_state)} on ${esc((j.stage_nodes && j.stage_nodes.length ? j.stage_nodes : [j.stage_node || ""]).join(", "))}` : `<span class="muted">—</span>`;
  const output = j.stage_out_state
    ? esc(j.stage_out_state) + (j.stage_out_message ? `: ${esc(j.stage_out_message)}` : "") : `<span class="muted">—</span>`;
  return table(["Stage in", "Stage out", "S3 secret", "Input", "Output"], [[items(ins), items(outs),
    j.stage_secret ? esc(j.stage_secret) : `<span class="muted">none</span>`, input, `<span data-stage-out>${output}</span>`]]);
}

// "GPU 0 on n1 failed (xid: fatal Xid 79: simulated)" -> "GPU 0 on n1 failed (Xid 79)": the fault in words.
export const messageText = (m) => String(m || "").replace(/\((xid|ecc_dbe|off_bus|nvml_error|temperature|gpu_missing): ([^)]*)\)/g,
  (_, code, detail) => `(${faultText(code, detail)})`);

// The job's events oldest first: by time, then by the order the server recorded them (its sequence); a message
// already shown (a requeue repeating the failure that caused it) is not repeated.
export function timelineOf(events) {
  const sorted = events.map((e, seq) => ({ ...e, seq })).sort((a, b) => new Date(a.at) - new Date(b.at) || a.seq - b.seq);
  const seen = new Set();
  return sorted.map((e) => {
    const text = messageText(e.message);
    const repeat = text && seen.has(text);
    seen.add(text);
    return { ...e, text: repeat ? "" : text };
  });
}

// Why a job went back to the queue, from its requeue events: "—", or "1 time: GPU 0 on n1 failed (Xid 79)".
export function requeuedText(events) {
  const requeues = events.filter((e) => e.kind === "requeued" || e.kind === "preempted");
  if (!requeues.length) return "—";
  const last = requeues[requeues.length - 1];
  const why = last.kind === "preempted" ? `preempted${last.message ? ": " + messageText(last.message) : ""}` : messageText(last.message) || "requeued";
  return `${requeues.length} time${requeues.length > 1 ? "s" : ""}, last: ${why}`;
}

// The attempts' starts: the "assigned" events, oldest first.
const startsOf = (events) => events.filter((e) => e.kind === "assigned").map((e) => new Date(e.at).getTime() / 1000);

export async function render(page) {
  const id = Number(page.params[0]);
  let job = await get(`/api/v1/jobs/${id}`);
  document.title = `Job #${id} · Corral`;
  page.root.innerHTML = `<h1>Job #${id} <span id="name"></span> <span id="state"></span> <span id="phase" aria-live="polite"></span></h1>
    <div class="row" id="actions"></div><div class="row" id="webui"></div><div id="info"></div><div id="container"></div>
    <h2>Timeline</h2><ul class="timeline" id="timeline"></ul>
    <h2>Logs</h2><div id="logs" data-size="0"></div>
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
  let events = [];
  // The job's run: from its first attempt's start to its end (or now); the graph never shows time before it.
  const firstStart = () => {
    const starts = startsOf(events);
    return starts.length ? starts[0] : job.started_at ? new Date(job.started_at).getTime() / 1000 : null;
  };
  const runSpan = () => {
    const end = job.finished_at ? new Date(job.finished_at).getTime() / 1000 : Date.now() / 1000;
    const start = firstStart() ?? end - 60;
    return [start, Math.max(end, start + 1)];
  };
  const range = new RangePicker($("#range"), () => charts(), 3600, { whole: runSpan, wholeLabel: "whole run" });
  const util = new TimeChart($("#charts"), { title: "GPU utilisation of this job", unit: "%", yMax: 100, id: "job-util",
    onZoom: (a, b) => range.zoom(a, b), onReset: () => range.reset() });
  const charts = async () => {
    if (!has("/api/v1/metrics/series")) { util.setData([], "metrics are not available on this server"); return; }
    const start = firstStart();
    if (start === null) { util.setData([], "the job has not started"); return; }
    const [a, b] = range.span();
    const domain = [Math.max(a, start), b];
    if (domain[0] >= domain[1]) { util.setData([], "the job had not started in this range"); return; }
    const step_s = Math.max(5, Math.round((domain[1] - domain[0]) / 150));
    const res = await get("/api/v1/metrics/series", { metric: "gpu_util_pct", job: id, start: new Date(domain[0] * 1000).toISOString(),
      end: new Date(domain[1] * 1000).toISOString(), step_s });
    util.setData(res.series.map((s) => ({ name: `${s.labels.node ?? ""} GPU ${s.labels.gpu ?? ""}`, points: s.points })),
      "no samples yet", domain);
  };

  function paint() {
    $("#name").textContent = job.name ? `· ${job.name}` : "";
    $("#state").innerHTML = stateTag(job.state);
    $("#phase").textContent = phaseText(job);
    const cancel = $("#cancel");
    if (cancel) {
      cancel.disabled = TERMINAL.has(job.state) || job.cancel_requested;
      cancel.hidden = TERMINAL.has(job.state); // nothing to cancel once it ended
    }
    // The job's own web UI (the port Corral assigned it), through Corral's authenticated proxy, while it runs.
    $("#webui").innerHTML = (job.web_url ? `<a id="open-webui" href="${esc(job.web_url)}" target="_blank" rel="noopener">Open the job's web UI (port ${job.port})</a>` : "")
      + (job.schedule_id ? ` <span class="muted">started by <a href="/schedules#schedule-${job.schedule_id}">schedule ${job.schedule_id}</a></span>` : "");
    const ran = job.started_at ? ((job.finished_at ? new Date(job.finished_at) : new Date()) - new Date(job.started_at)) / 1000 : null;
    $("#info").innerHTML = table(["Command", "Tenant", "Queue", "Priority", "GPUs", "Node", "Exit", "Ran for", "Reason", "In line", "Requeued"], [[
      `<code>${esc(shellJoin(job.command))}</code>`, esc(job.tenant ?? ""), esc(job.queue), job.priority, gpusOf(job),
      job.node ? `<a href="/nodes/${encodeURIComponent(job.node)}">${esc(job.node)}</a>` : "—", esc(job.exit_code ?? ""),
      (ran === null ? "—" : dur(ran)) + (job.prediction ? `<div class="muted" data-prediction>predicted: ${esc(job.prediction)}</div>` : ""), esc(job.pending_reason ? reasonText(job.pending_reason) : messageText(job.reason)), inLine(job),
      `<span data-requeued>${esc(requeuedText(events))}</span>`]]);
    $("#container").innerHTML = containerTable(job) + stagingTable(job);
    $("#gpus").innerHTML = job.node && job.gpus.length ? job.gpus.map((g) =>
      `<a href="/gpus/${encodeURIComponent(job.node)}/${g}">${esc(job.node)} GPU ${g}</a>`).join(" · ") : `<p class="muted">no GPUs assigned</p>`;
  }

  // The log stream holds every attempt in order; X-Log-Runs says where each attempt's part ends, so each gets its
  // own heading and block.
  const logs = $("#logs");
  const blocks = new Map(); // attempt -> { pre, decoder, head }
  let offset = 0, done = false;
  const block = (attempt) => {
    if (!blocks.has(attempt)) {
      const sec = document.createElement("section");
      sec.className = "attempt"; sec.dataset.attempt = String(attempt);
      sec.innerHTML = `<h3 class="attempt-head"></h3><pre class="logs"></pre>`;
      logs.append(sec);
      blocks.set(attempt, { pre: sec.querySelector("pre"), head: sec.querySelector("h3"), decoder: new TextDecoder() });
      paintLogHeads();
    }
    return blocks.get(attempt);
  };
  function paintLogHeads() {
    const starts = events.filter((e) => e.kind === "assigned");
    for (const [attempt, b] of blocks) {
      const st = attempt > 0 ? starts[attempt - 1] : null;
      b.head.textContent = (attempt > 0 ? `Attempt ${attempt}` : "Earlier attempts") + (st ? ` · started ${fmtDateTime(st.at)} · ${st.message}` : "");
    }
  }
  // "1=120,2=80" -> [[attempt, first byte, end byte]] of the stream (the list holds the newest runs; bytes before
  // its first run belong to earlier attempts, shown as attempt 0).
  const runsOf = (header, total) => {
    const runs = String(header || "").split(",").filter(Boolean).map((p) => p.split("=").map(Number));
    let end = total;
    const out = [];
    for (let i = runs.length - 1; i >= 0; i--) { out.unshift([runs[i][0], end - runs[i][1], end]); end -= runs[i][1]; }
    if (end > 0 || !out.length) out.unshift([runs.length ? 0 : job.attempt || 1, 0, runs.length ? end : Infinity]);
    return out;
  };
  async function pollLogs() {
    if (done) return;
    const r = await request("GET", `/api/v1/jobs/${id}/logs`, { params: { offset }, raw: true });
    const bytes = new Uint8Array(await r.arrayBuffer());
    if (page.closed) return;
    const total = Number(r.headers.get("X-Log-Size") || 0);
    if (bytes.length) {
      const box = logs.querySelector("section:last-child pre");
      const atEnd = !box || box.scrollTop + box.clientHeight >= box.scrollHeight - 20;
      for (const [attempt, a, b] of runsOf(r.headers.get("X-Log-Runs"), Math.max(total, offset + bytes.length))) {
        const lo = Math.max(a, offset), hi = Math.min(b, offset + bytes.length);
        if (lo >= hi) continue;
        const bl = block(attempt);
        bl.pre.append(document.createTextNode(bl.decoder.decode(bytes.subarray(lo - offset, hi - offset), { stream: true })));
      }
      offset += bytes.length;
      logs.dataset.size = String(offset);
      const last = logs.querySelector("section:last-child pre");
      if (atEnd && last) last.scrollTop = last.scrollHeight;
    }
    if (TERMINAL.has(r.headers.get("X-Job-State")) && offset >= total) done = true;
  }

  async function refresh() {
    const [j, evs] = await Promise.all([get(`/api/v1/jobs/${id}`), get(`/api/v1/jobs/${id}/events`)]);
    if (page.closed) return;
    job = j; events = evs;
    const items = evs.slice();
    if (!evs.some((e) => e.kind === "submitted" || e.kind === "created")) items.unshift({ kind: "submitted", at: job.created_at, message: "" });
    if (job.started_at && !evs.some((e) => /start|run|assigned/.test(e.kind.toLowerCase()))) items.push({ kind: "started", at: job.started_at, message: `on ${job.node}` });
    if (job.finished_at && !evs.some((e) => TERMINAL.has(e.kind.toUpperCase()))) items.push({ kind: job.state.toLowerCase(), at: job.finished_at, message: job.reason || "" });
    paint(); paintLogHeads();
    $("#timeline").innerHTML = timelineOf(items).map((e) => `<li data-kind="${esc(e.kind)}"><b>${esc(kindText(e.kind))}</b> <span class="muted" data-time>${esc(fmtDateTime(e.at))}</span> ${esc(e.text)}</li>`).join("");
  }
  paint();
  await live(page, refresh, 1500);
  await live(page, pollLogs, 1000);
  await live(page, charts, 10000);
}
