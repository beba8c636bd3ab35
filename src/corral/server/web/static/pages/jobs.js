// The jobs queue: position, pending reason and an ETA estimate; running jobs; history by pages.
import { ApiError, canSubmit, get, getWithTotal } from "../api.js";
import { fmtDateTime } from "../format.js";
import { $, ago, clearErrors, dur, esc, live, showError, stateTag, table } from "../ui.js";

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
  "retry-backoff": "waiting to retry after a failure",
  conflict: "placed again after its GPUs were taken at the last moment",
  new: "waiting for the scheduler",
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
  if (j.eta) return `<span data-eta="${esc(j.eta)}" title="${esc(fmtDateTime(j.eta))}">~${esc(dur(seconds))}</span>`;
  return `<span class="muted" title="estimated in the browser from running jobs' time limits">~${esc(dur(seconds))}</span>`;
}

// The state, and what a running job does before its command starts ("RUNNING · pulling 43%") while it says.
export const stateWithPhase = (j) => stateTag(j.state) + (j.phase ? ` <span class="muted" data-phase>· ${esc(j.phase)}</span>` : "");

const SHOWN = 200; // rows per list (the oldest first); the totals come from X-Total-Count
const jobLink = (j) => `<a href="/jobs/${j.id}">#${j.id}</a>`;
const TABS = [["queue", "Queue"], ["running", "Running"], ["history", "History"]];
const STATES = ["", "SUCCEEDED", "FAILED", "CANCELLED", "RUNNING", "PENDING"];
// How long a job ran (still runs: until now); nothing for one that never started.
export const ranFor = (j, nowMs = Date.now()) => (j.started_at
  ? dur(((j.finished_at ? new Date(j.finished_at).getTime() : nowMs) - new Date(j.started_at).getTime()) / 1000) : "—");

// The history filter: each field is a query parameter of GET /api/v1/jobs, filtered by the server.
const FILTER = `<form class="inline filters" id="history-filter" role="search" novalidate hidden>
  <label>State <select name="state">${STATES.map((s) => `<option value="${s}">${s || "any"}</option>`).join("")}</select></label>
  <label>Tenant <input name="tenant" data-field="tenant" maxlength="64" placeholder="e.g. vision" autocomplete="off"></label>
  <label>User <input name="user" data-field="user" maxlength="64" placeholder="e.g. alice" autocomplete="off"></label>
  <label>Name contains <input name="name" data-field="name" maxlength="255" placeholder="e.g. train" autocomplete="off"></label>
  <button type="reset" class="secondary">Clear</button><div class="form-error"></div></form>`;

export async function renderQueue(page) {
  document.title = "Jobs · Corral";
  page.root.innerHTML = `<h1>Jobs</h1><div class="row">${canSubmit() ? '<a href="/submit">Submit a job</a>' : ""}</div>
    <div class="tabs" role="tablist" aria-label="Job lists">${TABS.map(([k, label], i) => `<button type="button" role="tab" id="tab-${k}"
      data-tab="${k}" aria-controls="list" aria-selected="${i === 0}" class="${i === 0 ? "on" : ""}">${label}</button>`).join("")}</div>
    ${FILTER}<div id="list" role="tabpanel" aria-labelledby="tab-queue"></div><div id="more"></div>`;
  let tab = "queue", older = [], total = 0;
  const filter = $("#history-filter");
  const filters = () => Object.fromEntries(new FormData(filter).entries());
  const refresh = async () => {
    if (tab === "history") {
      const f = filters();
      const res = await getWithTotal("/api/v1/jobs", { all: true, limit: 50, newest_first: true, ...f });
      if (page.closed || tab !== "history" || JSON.stringify(f) !== JSON.stringify(filters())) return;
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
      $("#list").innerHTML = `<p class="muted">${running.total} running${running.total > SHOWN ? `, the oldest ${SHOWN} shown` : ""}</p>` + table(["Job", "Name", "State", "Tenant", "Node", "GPUs", "Running for", "Time limit"],
        running.items.map((j) => [jobLink(j), esc(j.name), stateWithPhase(j), esc(j.tenant ?? ""), `<a href="/nodes/${encodeURIComponent(j.node)}">${esc(j.node)}</a>`,
          gpusOf(j) + (j.gpus.length ? ` <span class="muted">(${esc(j.gpus.join(","))})</span>` : ""), esc(ranFor(j)), j.time_limit_s ? dur(j.time_limit_s) : "none"]), "nothing is running");
    }
    $("#more").innerHTML = "";
  };
  const paintHistory = (jobs) => {
    const filtered = Object.values(filters()).some((v) => v);
    $("#list").innerHTML = `<p class="muted" data-total="${total}">${total} ${filtered ? "matching " : ""}job${total === 1 ? "" : "s"}</p>` +
      table(["Job", "Name", "State", "Tenant", "Node", "GPUs", "Duration", "Exit", "Created", "Finished"],
        jobs.map((j) => [jobLink(j), esc(j.name), stateWithPhase(j), esc(j.tenant ?? ""), esc(j.node ?? ""), gpusOf(j), esc(ranFor(j)),
          esc(j.exit_code ?? ""), esc(fmtDateTime(j.created_at)), esc(fmtDateTime(j.finished_at))]),
        filtered ? "no job matches this filter" : "no jobs yet");
    $("#more").innerHTML = jobs.length < total ? `<button type="button" class="secondary" id="older">Older jobs</button>` : "";
    const btn = $("#older");
    if (btn) btn.addEventListener("click", async () => {
      const last = jobs[jobs.length - 1].id;
      older = older.concat(await get("/api/v1/jobs", { all: true, limit: 50, newest_first: true, before_id: last, ...filters() }));
      await refresh();
    });
  };
  const show = () => {
    clearErrors(filter);
    refresh().catch((err) => {
      if (err instanceof ApiError && err.field) showError(filter, err.field, err.message); else page.error(err);
    });
  };
  let typing = null;
  filter.addEventListener("input", () => { older = []; clearTimeout(typing); typing = setTimeout(show, 250); });
  filter.addEventListener("change", () => { older = []; clearTimeout(typing); show(); });
  filter.addEventListener("reset", () => { older = []; setTimeout(show, 0); });
  filter.addEventListener("submit", (e) => { e.preventDefault(); show(); });
  const tabs = page.root.querySelector(".tabs");
  // The arrow keys move between the tabs, as in any tab list.
  tabs.addEventListener("keydown", (e) => {
    const all = [...tabs.querySelectorAll("button[data-tab]")], i = all.indexOf(document.activeElement);
    const step = { ArrowRight: 1, ArrowLeft: -1 }[e.key];
    if (i < 0 || !step) return;
    e.preventDefault();
    const next = all[(i + step + all.length) % all.length];
    next.focus(); next.click();
  });
  tabs.addEventListener("click", (e) => {
    const b = e.target.closest("button[data-tab]"); if (!b) return;
    tab = b.dataset.tab; older = [];
    page.root.querySelectorAll(".tabs button").forEach((x) => { x.classList.toggle("on", x === b); x.setAttribute("aria-selected", String(x === b)); });
    $("#list").setAttribute("aria-labelledby", b.id);
    filter.hidden = tab !== "history";
    $("#list").innerHTML = "";
    show();
  });
  await live(page, refresh, 2000);
}

export const gpusOf = (j) => j.gpu_count ? `${j.gpu_count}${j.gpu_model ? " × " + esc(j.gpu_model) : ""}`
  : j.gpu_milli < 1000 ? `${j.gpu_milli / 1000} GPU` : "0";
