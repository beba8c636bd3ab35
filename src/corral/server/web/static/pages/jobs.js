// The jobs queue: position, pending reason and an ETA estimate; running jobs; history by pages.
import { canSubmit, get, getWithTotal } from "../api.js";
import { $, ago, dur, esc, live, stateTag, table } from "../ui.js";

// The scheduler's pending-reason codes, in words (codes the portal does not know are shown as they come).
const REASONS = {
  quota: "the tenant's maximum quota would be exceeded",
  "borrow-limit": "needs GPUs above the tenant's guarantee and none are idle to borrow",
  capacity: "not enough free GPUs of an allowed model",
  "model-constraint": "no GPU of the requested model exists in the pool",
  "gang-incomplete": "only part of the gang's GPUs are free; it starts all at once or not at all",
  "behind-head": "waiting behind the blocked head of a strict queue",
  "backfill-reserved": "would delay the reserved start of the job at the head",
  preempting: "lower-ranked jobs are being preempted to make room",
  priority: "higher-ranked jobs take the free GPUs first",
  "array-limit": "its array already runs as many tasks at once as its limit allows",
};
export const reasonText = (r) => (r ? REASONS[r] || REASONS[String(r).split(":")[0]] || r : "waiting for the scheduler");

const serverPosition = (j) => j.queue_position ?? j.position ?? null;

// The scheduler's own rank when the API gives one; otherwise priority first, then age.
export function queueOrder(jobs) {
  return jobs.slice().sort((a, b) => {
    const pa = serverPosition(a), pb = serverPosition(b);
    if (pa !== null && pb !== null) return pa - pb;
    return b.priority - a.priority || a.id - b.id;
  });
}

// The scheduler's ETA (`eta_s`, seconds from now) when the API gives one. Otherwise an estimate: the k-th job in
// line starts no earlier than the k-th running job reaches its time limit; jobs without a time limit give no
// bound, so the ETA is unknown past them.
export function etas(pending, running, nowS) {
  const ends = running.filter((j) => j.time_limit_s && j.started_at)
    .map((j) => new Date(j.started_at).getTime() / 1000 + j.time_limit_s).sort((a, b) => a - b);
  return pending.map((j, i) => (j.eta_s !== undefined && j.eta_s !== null ? j.eta_s
    : i < ends.length ? Math.max(0, ends[i] - nowS) : null));
}

// The scheduler's 0-based rank, shown from 1 (data-position keeps it); else the place in the list shown.
const position = (j, i) => { const p = serverPosition(j); return p === null ? String(i + 1) : `<span data-position="${p}">${p + 1}</span>`; };
// The scheduler's ETA carries its absolute time (data-eta, and a tooltip); a browser estimate says so.
function etaCell(j, seconds) {
  if (seconds === null) return "unknown";
  if (j.eta) return `<span data-eta="${esc(j.eta)}" title="${esc(new Date(j.eta).toLocaleString())}">~${esc(dur(seconds))}</span>`;
  return `<span class="muted" title="estimated in the browser from running jobs' time limits">~${esc(dur(seconds))}</span>`;
}

const SHOWN = 200; // rows per list (the oldest first); the totals come from X-Total-Count
const jobLink = (j) => `<a href="/jobs/${j.id}">#${j.id}</a>`;

export async function renderQueue(page) {
  document.title = "Jobs · Corral";
  page.root.innerHTML = `<h1>Jobs</h1><div class="row">${canSubmit() ? '<a href="/submit">Submit a job</a>' : ""}</div>
    <div class="tabs"><button type="button" data-tab="queue" class="on">Queue</button><button type="button" data-tab="running">Running</button>
    <button type="button" data-tab="history">History</button></div><div id="list"></div><div id="more"></div>`;
  let tab = "queue", older = [], total = 0;
  const refresh = async () => {
    if (tab === "history") {
      const res = await getWithTotal("/api/v1/jobs", { all: true, limit: 50, newest_first: true });
      total = res.total;
      const ids = new Set(res.items.map((j) => j.id));
      paintHistory([...res.items, ...older.filter((j) => !ids.has(j.id))]);
      return;
    }
    const [pending, running] = await Promise.all([
      getWithTotal("/api/v1/jobs", { state: "PENDING", limit: SHOWN }), getWithTotal("/api/v1/jobs", { state: "RUNNING", limit: SHOWN }),
    ]);
    if (page.closed || tab === "history") return;
    if (tab === "queue") {
      const line = queueOrder(pending.items), eta = etas(line, running.items, Date.now() / 1000);
      $("#list").innerHTML = `<p class="muted">${pending.total} pending${pending.total > SHOWN ? `, the oldest ${SHOWN} shown` : ""}</p>` + table(["Pos", "Job", "Name", "Tenant", "Queue", "Priority", "GPUs", "Waiting", "Pending reason", "ETA (estimate)"],
        line.map((j, i) => [position(j, i), jobLink(j), esc(j.name), esc(j.tenant ?? ""), esc(j.queue), j.priority, gpusOf(j), esc(ago(j.created_at)),
          esc(reasonText(j.pending_reason || j.reason)), etaCell(j, eta[i])]), "the queue is empty");
    } else {
      $("#list").innerHTML = `<p class="muted">${running.total} running${running.total > SHOWN ? `, the oldest ${SHOWN} shown` : ""}</p>` + table(["Job", "Name", "Tenant", "Node", "GPUs", "Running for", "Time limit"],
        running.items.map((j) => [jobLink(j), esc(j.name), esc(j.tenant ?? ""), `<a href="/nodes/${encodeURIComponent(j.node)}">${esc(j.node)}</a>`,
          esc(j.gpus.join(",")), esc(dur((Date.now() - new Date(j.started_at)) / 1000)), j.time_limit_s ? dur(j.time_limit_s) : "none"]), "nothing is running");
    }
    $("#more").innerHTML = "";
  };
  const paintHistory = (jobs) => {
    $("#list").innerHTML = `<p class="muted">${total} jobs</p>` + table(["Job", "Name", "State", "Tenant", "Node", "Exit", "Created", "Finished"],
      jobs.map((j) => [jobLink(j), esc(j.name), stateTag(j.state), esc(j.tenant ?? ""), esc(j.node ?? ""), esc(j.exit_code ?? ""),
        esc(new Date(j.created_at).toLocaleString()), esc(j.finished_at ? new Date(j.finished_at).toLocaleString() : "")]), "no jobs yet");
    $("#more").innerHTML = jobs.length < total ? `<button type="button" class="secondary" id="older">Older jobs</button>` : "";
    const btn = $("#older");
    if (btn) btn.addEventListener("click", async () => {
      const last = jobs[jobs.length - 1].id;
      older = older.concat(await get("/api/v1/jobs", { all: true, limit: 50, newest_first: true, before_id: last }));
      await refresh();
    });
  };
  page.root.querySelector(".tabs").addEventListener("click", (e) => {
    const b = e.target.closest("button[data-tab]"); if (!b) return;
    tab = b.dataset.tab; older = [];
    page.root.querySelectorAll(".tabs button").forEach((x) => x.classList.toggle("on", x === b));
    refresh().catch((err) => page.error(err));
  });
  await live(page, refresh, 2000);
}

export const gpusOf = (j) => j.gpu_count ? `${j.gpu_count}${j.gpu_model ? " × " + esc(j.gpu_model) : ""}`
  : j.gpu_milli < 1000 ? `${j.gpu_milli / 1000} GPU` : "0";
