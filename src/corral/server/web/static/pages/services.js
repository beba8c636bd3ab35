// Long-running services behind the gateway: the list (replicas ready of desired, rollout, traffic) and one
// service's page (its replicas and where they run, graphs of requests, latency, errors and replicas, the rollout
// in progress, revisions, events; scale, roll back and delete for members).
import { ApiError, canSubmit, get, has, send } from "../api.js";
import { navigate } from "../app.js";
import { RangePicker, TimeChart } from "../chart.js";
import { fmtDateTime, fmtValue, kindText } from "../format.js";
import { $, ago, esc, live, stateTag, table, toast } from "../ui.js";
import { shellJoin } from "./job.js";

const enc = encodeURIComponent;
const detailPath = (name) => `/api/v1/services/${enc(name)}`;
const jobLink = (id) => `<a href="/jobs/${id}">#${id}</a>`;
const nodeLink = (n) => (n ? `<a href="/nodes/${enc(n)}">${esc(n)}</a>` : "—");

// "complete", "progressing" or "stalled" (a warning: the new revision's replicas do not get ready).
export function rolloutTag(r) {
  const state = String(r?.state || "progressing");
  const cls = state === "stalled" ? "stalled" : state === "complete" ? "complete" : "progressing";
  return `<span class="rollout ${cls}" data-rollout="${esc(state)}">${esc(state)}</span>`;
}

// Requests per second, p99 and errors from the gateway's last few seconds; "—" before any traffic was seen.
export const rpsText = (t) => (t ? `${fmtValue(t.rps)} req/s` : "—");
export const msText = (v) => (v === null || v === undefined ? "—" : `${fmtValue(v)} ms`);
export const pctText = (share) => (share === null || share === undefined ? "—" : fmtValue(share * 100, "%"));

function readyText(s) {
  const cls = s.deleting ? "muted" : s.ready >= s.desired ? "ok" : s.ready === 0 && s.desired > 0 ? "bad" : "warn";
  return `<span class="${cls}" data-ready>${s.ready} / ${s.desired}</span>`;
}

function nameCell(s) {
  return `<a href="/services/${enc(s.name)}" data-service="${esc(s.name)}">${esc(s.name)}</a>`
    + (s.deleting ? ` <span class="state CANCELLED">deleting</span>` : "")
    + (s.public ? ` <span class="muted">public</span>` : "");
}

// The gateway's path, and a link to the service through the gateway when the server names its full URL
// (`endpoint`: the gateway has a port of its own, API port + 3 by default); only http(s) addresses are linked.
export function gatewayCell(s) {
  const path = `<code data-url>${esc(s.url)}</code>`;
  const ok = typeof s.endpoint === "string" && /^https?:\/\//i.test(s.endpoint);
  return ok ? `${path} <a href="${esc(s.endpoint)}" target="_blank" rel="noopener" data-endpoint title="${esc(s.endpoint)}">open</a>` : path;
}

const unavailable = (root, title) => {
  root.innerHTML = `<h1>${esc(title)}</h1><p class="muted">services are not available on this server yet</p>`;
};

export async function renderList(page) {
  document.title = "Services · Corral";
  if (!has("/api/v1/services")) { unavailable(page.root, "Services"); return; }
  page.root.innerHTML = `<h1>Services</h1><p class="muted">Long-running replicas behind the gateway, which serves each at
    <code>/services/NAME/</code> on its own port. ${canSubmit() ? "Create one with <code>corral service create</code>." : ""}</p>
    <div id="list"></div>`;
  const refresh = async () => {
    const items = await get("/api/v1/services");
    if (page.closed) return;
    items.sort((a, b) => a.name.localeCompare(b.name));
    $("#list").innerHTML = table(["Name", "Tenant", "Revision", "Ready / desired", "Rollout", "Requests", "p99", "Errors", "Gateway path"],
      items.map((s) => [
        nameCell(s), esc(s.tenant ?? ""),
        `${s.revision}${s.stable_revision && s.stable_revision !== s.revision ? ` <span class="muted">(serving ${s.stable_revision})</span>` : ""}`,
        readyText(s) + (s.autoscaled ? ` <span class="muted">auto ${esc(s.settings.min_replicas)}–${esc(s.settings.max_replicas)}</span>` : ""),
        rolloutTag(s.rollout), esc(rpsText(s.traffic)), esc(msText(s.traffic?.p99_ms)), esc(pctText(s.traffic?.error_rate)),
        gatewayCell(s),
      ]), "no services yet");
  };
  await live(page, refresh, 3000);
}

// The graphs' points from /metrics: [[unix s, value]] of one field, leaving out missing values.
const pointsOf = (samples, pick) => samples
  .map((p) => [new Date(p.at).getTime() / 1000, pick(p)])
  .filter(([, v]) => v !== null && v !== undefined && Number.isFinite(v));

function replicaRows(s) {
  return s.replicas.slice().sort((a, b) => a.job_id - b.job_id).map((r) => [
    jobLink(r.job_id) + (r.attempt > 1 ? ` <span class="muted">attempt ${r.attempt}</span>` : ""),
    `${r.revision}${r.revision !== s.revision ? ` <span class="muted">old</span>` : ""}`,
    stateTag(r.state),
    r.ready ? `<span class="ok">ready</span>` : `<span class="muted">not ready</span>`,
    nodeLink(r.node),
    r.node && r.gpus.length ? r.gpus.map((g) => `<a href="/gpus/${enc(r.node)}/${g}">${g}</a>`).join(", ") : "—",
    r.port ?? "—",
    r.draining ? `<span class="warn">draining</span>` : "—",
    r.health ? `<span class="bad">${esc(r.health)}</span>` : r.ready ? `<span class="ok">ok</span>` : "—",
    esc(r.started_at ? ago(r.started_at) : ""),
  ]);
}

function revisionRows(s) {
  return s.revisions.slice().sort((a, b) => b.revision - a.revision).map((r) => {
    const t = r.template || {};
    const tags = [r.revision === s.revision ? "wanted" : "", r.revision === s.stable_revision ? "last complete" : ""].filter(Boolean);
    return [
      `${r.revision}${tags.length ? ` <span class="muted">${esc(tags.join(", "))}</span>` : ""}`,
      esc(fmtDateTime(r.created_at)),
      `<code>${esc(shellJoin(t.command || []))}</code>`,
      t.image ? `<code>${esc(t.image)}</code>` : "—",
      esc(t.gpus ?? 0), esc(r.port), `<code>${esc(r.health_path)}</code>`,
    ];
  });
}

// Whether POST rollback has somewhere to go (the server's rule: the last complete revision, else the one before).
const canRollback = (s) => (s.stable_revision && s.stable_revision !== s.revision) || s.revisions.some((r) => r.revision < s.revision);

export async function renderService(page) {
  const name = page.params[0];
  document.title = `Service ${name} · Corral`;
  if (!has("/api/v1/services/{name}")) { unavailable(page.root, `Service ${name}`); return; }
  let svc = await get(detailPath(name));
  if (page.closed) return;
  page.root.innerHTML = `<h1>Service <span id="svc-name"></span> <span id="rollout-state"></span></h1>
    <p id="summary"></p><div id="rollout" class="rollout-box" role="status"></div>
    <div class="row" id="actions"></div><div id="info"></div>
    <h2>Replicas</h2><div id="replicas"></div>
    <h2>Traffic</h2><div id="range"></div><div class="charts" id="charts"></div>
    <h2>Revisions</h2><div id="revisions"></div>
    <h2>Events</h2><div id="events"></div>`;
  $("#svc-name").textContent = name;

  if (canSubmit()) {
    $("#actions").innerHTML = `<form id="scale-form" class="inline"><label>Replicas
        <input type="number" name="replicas" min="0" step="1" required data-field="replicas"></label>
        <button type="submit" class="secondary">Scale</button></form>
      <button type="button" class="secondary" id="rollback">Roll back</button>
      <button type="button" class="danger" id="delete">Delete</button>`;
    const input = $("#scale-form input[name=replicas]");
    input.value = String(svc.desired);
    input.addEventListener("input", () => { input.dataset.dirty = "1"; });
    const act = async (b, fn) => {
      b.disabled = true;
      try { await fn(); } catch (err) { if (!(err instanceof ApiError && err.status === 401)) toast(err.message); }
      finally { b.disabled = false; }
    };
    $("#scale-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const n = Number(input.value);
      if (!Number.isInteger(n) || n < 0) { toast("replicas: a whole number, 0 or more"); return; }
      act(e.target.querySelector("button"), async () => {
        svc = await send("POST", `${detailPath(name)}/scale`, { replicas: n });
        delete input.dataset.dirty;
        toast(`${name}: scaled to ${n} replica${n === 1 ? "" : "s"}`); paint();
      });
    });
    $("#rollback").addEventListener("click", (e) => {
      if (!confirm(`Roll ${name} back to its last complete revision? Its replicas are replaced one by one.`)) return;
      act(e.target, async () => { svc = await send("POST", `${detailPath(name)}/rollback`); toast(`${name}: rolling back to revision ${svc.revision}`); paint(); });
    });
    $("#delete").addEventListener("click", (e) => {
      if (!confirm(`Delete service ${name}? Its replicas are stopped and the gateway stops serving it.`)) return;
      act(e.target, async () => { await send("DELETE", detailPath(name)); toast(`${name}: deleting`); navigate("/services"); });
    });
  }

  const range = new RangePicker($("#range"), () => charts(), 3600);
  const opts = (title, unit, id, yMax = null) => ({ title, unit, yMax, id, onZoom: (a, b) => range.zoom(a, b), onReset: () => range.reset() });
  const cs = {
    rps: new TimeChart($("#charts"), opts("Request rate", "req/s", "svc-rps")),
    latency: new TimeChart($("#charts"), opts("Latency", "ms", "svc-latency")),
    errors: new TimeChart($("#charts"), opts("Errors (share of requests)", "%", "svc-errors", 100)),
    replicas: new TimeChart($("#charts"), opts("Replicas (desired and ready)", "", "svc-replicas")),
  };
  const charts = async () => {
    if (!has("/api/v1/services/{name}/metrics")) {
      for (const c of Object.values(cs)) c.setData([], "service graphs are not available on this server");
      return;
    }
    const [a, b] = range.span();
    const sinceS = Math.min(7 * 86400, Math.max(60, Math.ceil(Date.now() / 1000 - a)));
    const samples = await get(`${detailPath(name)}/metrics`, { since_s: sinceS });
    if (page.closed) return;
    const domain = [a, b], empty = "no traffic recorded in this range";
    cs.rps.setData([{ name: "requests", points: pointsOf(samples, (p) => p.rps) }], empty, domain);
    cs.latency.setData([{ name: "median (p50)", points: pointsOf(samples, (p) => p.p50_ms) },
      { name: "p99", points: pointsOf(samples, (p) => p.p99_ms) }], empty, domain);
    cs.errors.setData([{ name: "answered 5xx or failed", points: pointsOf(samples, (p) => p.error_rate * 100) }], empty, domain);
    // Whole replicas: the axis tops at an even count, so its middle line is a whole number too.
    const most = samples.reduce((m, p) => Math.max(m, p.desired, p.ready), 1);
    cs.replicas.yMax = 2 * Math.ceil(most / 2);
    cs.replicas.setData([{ name: "desired", points: pointsOf(samples, (p) => p.desired) },
      { name: "ready", points: pointsOf(samples, (p) => p.ready) }], "no samples yet", domain);
  };

  function paint() {
    const s = svc;
    $("#rollout-state").innerHTML = rolloutTag(s.rollout) + (s.deleting ? ` <span class="state CANCELLED">deleting</span>` : "");
    const t = s.traffic;
    $("#summary").innerHTML = `${esc(s.tenant ?? "")}${s.owner ? ` · ${esc(s.owner)}` : ""} · gateway ${gatewayCell(s)}`
      + `${s.public ? " (public)" : ""} · ${readyText(s)} ready · ${s.running} running · ${s.pending} pending`
      + (t ? ` · ${esc(rpsText(t))} · p50 ${esc(msText(t.p50_ms))} · p99 ${esc(msText(t.p99_ms))} · errors ${esc(pctText(t.error_rate))} · ${esc(t.in_flight)} in flight` : "");
    const r = s.rollout || {};
    const box = $("#rollout");
    box.className = `rollout-box ${r.state === "stalled" ? "stalled" : r.state === "complete" ? "complete" : "progressing"}`;
    box.innerHTML = `<b>${r.state === "complete" ? `Revision ${esc(r.revision)} is rolled out`
      : r.state === "stalled" ? `The rollout of revision ${esc(r.revision)} is stalled` : `Rolling out revision ${esc(r.revision)}`}</b>`
      + (r.message ? ` <span data-rollout-message>${esc(r.message)}</span>` : "");
    const st = s.settings || {};
    $("#info").innerHTML = table(["Command", "Image", "GPUs per replica", "Port", "Health path", "Scaling", "Revision"], [[
      `<code>${esc(shellJoin(s.command))}</code>`, s.image ? `<code>${esc(s.image)}</code>` : "—",
      s.gpu_milli && s.gpu_milli < 1000 ? `${esc(s.gpu_milli)}m` : esc(s.gpus), esc(s.port), `<code>${esc(s.health_path)}</code>`,
      s.autoscaled ? `auto: ${esc(st.min_replicas)}–${esc(st.max_replicas)} at ${esc(st.target_rps)} req/s per replica` : `${esc(s.desired)} by hand`,
      `${esc(s.revision)}${s.stable_revision ? ` <span class="muted">last complete ${esc(s.stable_revision)}</span>` : ""}`]]);
    $("#replicas").innerHTML = table(["Job", "Revision", "State", "Ready", "Node", "GPUs", "Port", "Draining", "Health", "Started"],
      replicaRows(s), s.desired ? "no replicas yet" : "scaled to zero");
    $("#revisions").innerHTML = table(["Revision", "Created", "Command", "Image", "GPUs", "Port", "Health path"], revisionRows(s), "no revisions");
    $("#events").innerHTML = table(["When", "Event", "What happened"], s.events.slice().reverse().slice(0, 30).map((e) => [
      `<span title="${esc(ago(e.at))}">${esc(fmtDateTime(e.at))}</span>`, esc(kindText(e.kind)), esc(e.message)]), "no events");
    const input = $("#scale-form input[name=replicas]");
    if (input) {
      if (!input.dataset.dirty && document.activeElement !== input) input.value = String(s.desired);
      input.disabled = s.autoscaled || s.deleting;
      $("#scale-form button").disabled = s.autoscaled || s.deleting;
      input.title = s.autoscaled ? "autoscaled: change its min / max replicas instead" : "";
      $("#rollback").disabled = s.deleting || !canRollback(s);
      $("#delete").disabled = s.deleting;
    }
  }

  const refresh = async () => {
    const s = await get(detailPath(name));
    if (page.closed) return;
    svc = s; paint();
  };
  paint();
  await live(page, refresh, 2000);
  await live(page, charts, 10000);
}
