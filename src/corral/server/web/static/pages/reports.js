// Reports: GPU-hours and utilisation per tenant, user, GPU model or day over a range; charts and CSV export.
import { get, has, query } from "../api.js";
import { $, esc, num, table } from "../ui.js";

const day = (d) => d.toISOString().slice(0, 10);
// Two decimals, but a few minutes of GPU time still shows as more than 0.00 (three significant digits).
export const hours = (h) => (h === null || h === undefined ? "—" : h > 0 && h < 1 ? Number(h.toPrecision(3)).toString() : num(h, 2));

// Horizontal bars, one a row, each with its key on the left and its value at its end: read without hovering, and
// as readable at a phone's width as on a desktop (the labels never crowd under narrow bars). A null value has no bar.
export function valueBars(parent, rows, { title = "", format = (v) => String(v), empty = "no usage in this range" } = {}) {
  const W = Math.max(parent.clientWidth || 600, 260), rowH = 24, pad = 4;
  const labelW = Math.min(160, Math.round(W * 0.3)), valueW = 100, span = Math.max(20, W - labelW - valueW - 6);
  const max = Math.max(1e-9, ...rows.map((r) => r.value ?? 0));
  const H = Math.max(1, rows.length) * rowH + 2 * pad;
  let out = `<svg viewBox="0 0 ${W} ${H}" width="100%" height="${H}" data-points="${rows.length}" class="bars" role="img" aria-label="${esc(title)}">`;
  rows.forEach((r, i) => {
    const y = pad + i * rowH, w = (r.value ?? 0) > 0 ? Math.max(2, (r.value / max) * span) : 0, label = String(r.label);
    const short = label.length > 22 ? label.slice(0, 21) + "…" : label;
    out += `<text x="${labelW - 6}" y="${y + 16}" text-anchor="end" font-size="12" fill="#1d2330">${esc(short)}</text>`;
    out += `<rect x="${labelW}" y="${y + 5}" width="${w.toFixed(1)}" height="${rowH - 10}" rx="2" fill="#2b59c3"><title>${esc(label)}: ${esc(format(r.value))}</title></rect>`;
    out += `<text x="${(labelW + w + 5).toFixed(1)}" y="${y + 16}" font-size="12" fill="#344054" data-value="${esc(label)}">${esc(format(r.value))}</text>`;
  });
  if (!rows.length) out += `<text x="${W / 2}" y="${H / 2 + 4}" text-anchor="middle" font-size="12" fill="#667085">${esc(empty)}</text>`;
  parent.innerHTML = `<div class="chart"><h3>${esc(title)}</h3>${out}</svg></div>`;
}

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
    valueBars($("#hours"), rows.map((r) => ({ label: r.key, value: r.gpu_hours })), { title: `GPU-hours by ${p.group_by}`, format: (v) => `${hours(v)} GPU-h` });
    valueBars($("#util"), rows.map((r) => ({ label: r.key, value: r.avg_util_pct })), { title: "Average GPU utilisation",
      format: (v) => (v === null || v === undefined ? "— (no samples)" : `${num(v, 1)} %`) });
    $("#table").innerHTML = table([p.group_by, "GPU-hours", "Jobs", "Avg utilisation %"], rows.map((r) =>
      [`<span data-key="${esc(r.key)}">${esc(r.key)}</span>`, hours(r.gpu_hours), r.jobs, num(r.avg_util_pct, 1)]), "no usage in this range");
  };
  // Any change shows the new report at once, so the table, the charts and the CSV link always agree.
  form.addEventListener("change", () => show().catch((err) => page.error(err)));
  form.addEventListener("submit", (e) => { e.preventDefault(); show().catch((err) => page.error(err)); });
  await show();
}
