// Alerts: what fires now, the history, the rule editor and silences.
import { get, has, isAdmin, send } from "../api.js";
import { $, esc, live, table, toast } from "../ui.js";
import { bindForm, formHtml } from "./forms.js";

const RULE_FIELDS = [["name", "Name", "text", "gpu-hot"], ["metric", "Metric", "text", "gpu_temperature_c"],
  ["op", "Op", "select", [">", ">=", "<", "<=", "==", "!="]], ["threshold", "Threshold", "number", "85"], ["for_s", "For (s)", "number", "60"],
  ["severity", "Severity", "select", ["warning", "critical", "info"]], ["selector", "Selector (JSON)", "json"], ["tenant", "Tenant", "text", ""]];
const SILENCE_FIELDS = [["matchers", "Matchers (JSON)", "json"], ["until", "Until (ISO time)", "text", new Date(Date.now() + 86400e3).toISOString().slice(0, 16) + "Z"], ["comment", "Comment", "text", ""]];
// Selectors and matchers come as {label: value} objects or as `label="value", ...` strings.
const labels = (o) => esc(typeof o === "string" ? o : Object.entries(o || {}).map(([k, v]) => `${k}=${v}`).join(" "));
const when = (v) => (v === null || v === undefined || v === "" ? "" : new Date(typeof v === "number" ? v * 1000 : v).toLocaleString());

export async function render(page) {
  document.title = "Alerts · Corral";
  if (!has("/api/v1/alerts")) {
    page.root.innerHTML = `<h1>Alerts</h1><p class="muted">alerts are not available on this server yet</p>`;
    return;
  }
  page.root.innerHTML = `<h1>Alerts</h1><h2>Firing</h2><div id="firing"></div><h2>Pending</h2><div id="pending"></div>
    <h2>History</h2><div id="history"></div>
    <h2>Rules</h2><div id="rules"></div>${isAdmin() ? formHtml("rule-form", RULE_FIELDS, "Add rule") : ""}
    <h2>Silences</h2><div id="silences"></div>${isAdmin() ? formHtml("silence-form", SILENCE_FIELDS, "Add silence") : ""}`;
  const alertRows = (list) => list.map((a) => [esc(a.severity), esc(a.rule), labels(a.labels), esc(a.value), esc(when(a.started_at)),
    esc(when(a.resolved_at)), esc(a.message)]);
  const cols = ["Severity", "Rule", "Labels", "Value", "Started", "Resolved", "Message"];
  const historyRows = (list) => list.map((h) => [esc(when(h.at ?? h.resolved_at ?? h.started_at)), esc(h.state), esc(h.severity), esc(h.rule),
    labels(h.labels), esc(h.value), esc(h.message)]);
  const del = (kind, id) => isAdmin() ? `<button type="button" class="secondary" data-del="${kind}" data-id="${esc(id)}">Delete</button>` : "";
  const refresh = async () => {
    const [firing, pending, resolved, rules, silences] = await Promise.all([
      get("/api/v1/alerts", { state: "firing" }), get("/api/v1/alerts", { state: "pending" }), get("/api/v1/alerts", { history: true, limit: 100 }),
      has("/api/v1/alert-rules") ? get("/api/v1/alert-rules") : [], has("/api/v1/silences") ? get("/api/v1/silences") : []]);
    if (page.closed) return;
    $("#firing").innerHTML = table(cols, alertRows(firing), "no alert is firing");
    $("#pending").innerHTML = table(cols, alertRows(pending), "none pending");
    $("#history").innerHTML = table(["When", "State", "Severity", "Rule", "Labels", "Value", "Message"], historyRows(resolved), "no alert history");
    $("#rules").innerHTML = table(["Name", "Metric", "Condition", "For", "Severity", "Selector", "Tenant", ""], rules.map((r) =>
      [esc(r.name), esc(r.metric), `${esc(r.op ?? r.comparison)} ${esc(r.threshold)}`, `${esc(r.for_s)} s`, esc(r.severity), labels(r.selector),
        esc(r.tenant ?? ""), r.id === null || r.id === undefined || r.builtin ? '<span class="muted">built in</span>' : del("alert-rules", r.id)]), "no rules");
    $("#silences").innerHTML = table(["Matchers", "Until", "Comment", ""], silences.map((s) =>
      [labels(s.matchers), esc(when(s.until ?? s.ends_at)), esc(s.comment), del("silences", s.id)]), "no silences");
  };
  if (isAdmin()) {
    bindForm("rule-form", RULE_FIELDS, async (body) => { body.selector = body.selector || {}; await send("POST", "/api/v1/alert-rules", body); toast("rule added"); await refresh(); });
    bindForm("silence-form", SILENCE_FIELDS, async (body) => { body.matchers = body.matchers || {}; await send("POST", "/api/v1/silences", body); toast("silence added"); await refresh(); },
      { ends_at: "until", starts_at: "until" });
    page.root.addEventListener("click", async (e) => {
      const b = e.target.closest("button[data-del]"); if (!b) return;
      try { await send("DELETE", `/api/v1/${b.dataset.del}/${encodeURIComponent(b.dataset.id)}`); await refresh(); } catch (err) { toast(err.message); }
    });
  }
  await live(page, refresh, 3000);
}
