// Alerts: what fires now, the history, the rule editor and silences.
import { get, has, isAdmin, send } from "../api.js";
import { $, esc, live, table, toast } from "../ui.js";
import { bindForm, formHtml } from "./forms.js";

const RULE_FIELDS = [["name", "Name", "text", "gpu-hot"], ["metric", "Metric", "select", ["gpu_temp_c", "gpu_util_pct", "gpu_mem_used_mib",
  "gpu_power_w", "cpu_pct", "mem_used_pct", "disk_used_pct", "net_rx_bps", "net_tx_bps", "load1"]],
  ["op", "Op", "select", [">", ">=", "<", "<=", "==", "!="]], ["threshold", "Threshold", "number", "85"], ["for_s", "For (s)", "number", "60"],
  ["severity", "Severity", "select", ["warning", "critical", "info"]], ["selector", "Selector (JSON)", "json"], ["tenant", "Tenant", "text", ""]];
const SILENCE_FIELDS = [["matchers", "Matchers (JSON)", "json"], ["until", "Until (ISO time)", "text", "2030-01-01T00:00:00Z"], ["comment", "Comment", "text", ""]];
const labels = (o) => esc(Object.entries(o || {}).map(([k, v]) => `${k}=${v}`).join(" "));

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
  const alertRows = (list) => list.map((a) => [esc(a.severity), esc(a.rule), labels(a.labels), esc(a.value), esc(new Date(a.started_at).toLocaleString()),
    esc(a.resolved_at ? new Date(a.resolved_at).toLocaleString() : ""), esc(a.message)]);
  const cols = ["Severity", "Rule", "Labels", "Value", "Started", "Resolved", "Message"];
  const del = (kind, id) => isAdmin() ? `<button type="button" class="secondary" data-del="${kind}" data-id="${esc(id)}">Delete</button>` : "";
  const refresh = async () => {
    const [firing, pending, resolved, rules, silences] = await Promise.all([
      get("/api/v1/alerts", { state: "firing" }), get("/api/v1/alerts", { state: "pending" }), get("/api/v1/alerts", { state: "resolved" }),
      has("/api/v1/alert-rules") ? get("/api/v1/alert-rules") : [], has("/api/v1/silences") ? get("/api/v1/silences") : []]);
    if (page.closed) return;
    $("#firing").innerHTML = table(cols, alertRows(firing), "no alert is firing");
    $("#pending").innerHTML = table(cols, alertRows(pending), "none pending");
    $("#history").innerHTML = table(cols, alertRows(resolved.slice(-100).reverse()), "no resolved alerts");
    $("#rules").innerHTML = table(["Name", "Metric", "Condition", "For", "Severity", "Selector", "Tenant", ""], rules.map((r) =>
      [esc(r.name), esc(r.metric), `${esc(r.op)} ${esc(r.threshold)}`, `${esc(r.for_s)} s`, esc(r.severity), labels(r.selector), esc(r.tenant ?? ""), del("alert-rules", r.id)]), "no rules");
    $("#silences").innerHTML = table(["Matchers", "Until", "Comment", ""], silences.map((s) =>
      [labels(s.matchers), esc(new Date(s.until).toLocaleString()), esc(s.comment), del("silences", s.id)]), "no silences");
  };
  if (isAdmin()) {
    bindForm("rule-form", RULE_FIELDS, async (body) => { body.selector = body.selector || {}; await send("POST", "/api/v1/alert-rules", body); toast("rule added"); await refresh(); });
    bindForm("silence-form", SILENCE_FIELDS, async (body) => { body.matchers = body.matchers || {}; await send("POST", "/api/v1/silences", body); toast("silence added"); await refresh(); });
    page.root.addEventListener("click", async (e) => {
      const b = e.target.closest("button[data-del]"); if (!b) return;
      try { await send("DELETE", `/api/v1/${b.dataset.del}/${encodeURIComponent(b.dataset.id)}`); await refresh(); } catch (err) { toast(err.message); }
    });
  }
  await live(page, refresh, 3000);
}
