// Reports: GPU-hours and utilisation per tenant, user, GPU model or day over a range; charts and CSV export.
import { get, has, query } from "../api.js";
import { barChart } from "../chart.js";
import { $, esc, num, table } from "../ui.js";

const day = (d) => d.toISOString().slice(0, 10);
// Two decimals, but a few minutes of GPU time still shows as more than 0.00 (three significant digits).
export const hours = (h) => (h === null || h === undefined ? "—" : h > 0 && h < 1 ? Number(h.toPrecision(3)).toString() : num(h, 2));

export async function render(page) {
  document.title = "Reports · Corral";
  if (!has("/api/v1/reports/usage")) {
    page.root.innerHTML = `<h1>Reports</h1><p class="muted">usage reports are not available on this server yet</p>`;
    return;
  }
  const now = new Date(), from = new Date(now.getTime() - 30 * 86400e3);
  page.root.innerHTML = `<h1>Reports</h1><form class="inline" id="report-form">
    <label>Group by <select name="group_by">${["tenant", "user", "gpu_model", "day"].map((g) => `<option>${g}</option>`).join("")}</select></label>
    <label>From <input type="date" name="start" value="${day(from)}"></label><label>To <input type="date" name="end" value="${day(now)}"></label>
    <button type="submit">Show</button><a id="csv" download="corral-usage.csv">Export CSV</a><div class="form-error"></div></form>
    <div class="charts"><div id="hours"></div><div id="util"></div></div><div id="table"></div>`;
  const form = $("#report-form");
  const params = () => {
    const f = Object.fromEntries(new FormData(form).entries());
    const end = new Date(f.end + "T00:00:00Z"); end.setUTCDate(end.getUTCDate() + 1);
    return { group_by: f.group_by, start: new Date(f.start + "T00:00:00Z").toISOString(), end: end.toISOString() };
  };
  const show = async () => {
    const p = params();
    $("#csv").href = "/api/v1/reports/usage" + query({ ...p, format: "csv" });
    const rows = await get("/api/v1/reports/usage", { ...p, format: "json" });
    if (page.closed) return;
    barChart($("#hours"), rows.map((r) => ({ label: r.key, value: r.gpu_hours })), { unit: "GPU-h", title: `GPU-hours by ${p.group_by}` });
    barChart($("#util"), rows.map((r) => ({ label: r.key, value: r.avg_util_pct ?? 0 })), { unit: "%", title: "Average GPU utilisation" });
    $("#table").innerHTML = table([p.group_by, "GPU-hours", "Jobs", "Avg utilisation %"], rows.map((r) =>
      [`<span data-key="${esc(r.key)}">${esc(r.key)}</span>`, hours(r.gpu_hours), r.jobs, num(r.avg_util_pct, 1)]), "no usage in this range");
  };
  // Any change shows the new report at once, so the table, the charts and the CSV link always agree.
  form.addEventListener("change", () => show().catch((err) => page.error(err)));
  form.addEventListener("submit", (e) => { e.preventDefault(); show().catch((err) => page.error(err)); });
  await show();
}
