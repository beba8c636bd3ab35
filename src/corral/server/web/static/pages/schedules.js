// Repeating jobs: each schedule with its next runs, last and active jobs, counts; pause, resume, run now, delete.
import { canSubmit, get, send } from "../api.js";
import { $, ago, esc, live, table, time, toast } from "../ui.js";

const jobLink = (id) => `<a href="/jobs/${id}">#${id}</a>`;

function status(s) {
  if (s.paused) return `<span class="state CANCELLED">paused</span>`;
  if (s.last_skip_reason) return `<span class="muted" data-skip>${esc(s.last_skip_reason)}</span>`;
  return s.active_job_ids.length ? "running" : "waiting";
}

function actions(s) {
  if (!canSubmit()) return "";
  return `<button type="button" class="secondary" data-act="run" data-id="${s.id}">Run now</button>
    <button type="button" class="secondary" data-act="${s.paused ? "resume" : "pause"}" data-id="${s.id}">${s.paused ? "Resume" : "Pause"}</button>
    <button type="button" class="danger" data-act="delete" data-id="${s.id}">Delete</button>`;
}

export async function render(page) {
  document.title = "Schedules · Corral";
  page.root.innerHTML = `<h1>Schedules</h1><p class="muted">Repeating jobs. ${canSubmit()
    ? 'Make one from the <a href="/submit">submit form</a> with a repeat schedule.' : ""}</p><div id="list"></div>`;
  const refresh = async () => {
    const items = await get("/api/v1/schedules");
    if (page.closed) return;
    $("#list").innerHTML = table(["Name", "Tenant", "Schedule", "If still running", "Next run", "Last job", "Active", "Runs", "Skipped", "Missed", "Status", ""],
      items.map((s) => [
        `<span id="schedule-${s.id}" data-schedule="${s.id}">${esc(s.name)}</span>`, esc(s.tenant ?? ""),
        `<code title="${esc(s.description)}">${esc(s.schedule)}</code><div class="muted">${esc(s.description)}</div>`,
        esc(s.concurrency),
        s.next_run_at ? `<span title="${esc(s.upcoming.map(time).join("\n"))}">${esc(time(s.next_run_at))}<div class="muted">${esc(ago(s.next_run_at))}</div></span>` : "—",
        s.last_job_id ? `${jobLink(s.last_job_id)} <span class="muted">${esc(ago(s.last_run_at))}</span>` : "—",
        s.active_job_ids.map(jobLink).join(" ") || "—", s.runs, s.skipped, s.missed, status(s), actions(s),
      ]), "no schedules yet");
    if (location.hash) { const el = $(location.hash); if (el) el.closest("tr").classList.add("highlight"); }
  };
  $("#list").addEventListener("click", async (e) => {
    const b = e.target.closest("button[data-act]");
    if (!b) return;
    const id = b.dataset.id, act = b.dataset.act;
    if (act === "delete" && !confirm(`Delete schedule ${id}? Jobs it already started keep running.`)) return;
    b.disabled = true;
    try {
      if (act === "run") { const job = await send("POST", `/api/v1/schedules/${id}/run`); toast(`started job #${job.id}`); }
      else if (act === "delete") { await send("DELETE", `/api/v1/schedules/${id}`); toast(`schedule ${id} deleted`); }
      else { await send("PATCH", `/api/v1/schedules/${id}`, { paused: act === "pause" }); toast(`schedule ${id} ${act}d`); }
      await refresh();
    } catch (err) { page.error(err); } finally { b.disabled = false; }
  });
  await live(page, refresh, 2000);
}
