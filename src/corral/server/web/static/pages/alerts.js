// Alerts: what fires now, the history, the rule editor and silences.
import { ApiError, get, has, isAdmin, send } from "../api.js";
import { fmtDateTime } from "../format.js";
import { $, esc, live, table, toast } from "../ui.js";
import { bindForm, formHtml } from "./forms.js";

// The labels a rule's selector and a silence's matchers are made of, one input each: [input, label name, words].
const LABEL_INPUTS = [["node", "node", "node"], ["gpu", "gpu", "GPU"], ["tenant_label", "tenant", "tenant"], ["job", "job", "job"]];
const title = (t) => t[0].toUpperCase() + t.slice(1);
const RULE_FIELDS = [["name", "Name", "text", "e.g. gpu-hot"], ["metric", "Metric", "text", "e.g. gpu_temperature_c"],
  ["op", "Op", "select", [">", ">=", "<", "<=", "==", "!="]], ["threshold", "Threshold", "number", "e.g. 85"], ["for_s", "For (s)", "number", "e.g. 60"],
  ["severity", "Severity", "select", ["warning", "critical", "info"]],
  ...LABEL_INPUTS.map(([k, , what]) => [k, `Only ${what}`, "text", k === "gpu" ? "e.g. 0" : "empty: any"]),
  ["selector", "More label matchers", "text", 'e.g. pool="a"'], ["tenant", "Rule of tenant (empty: the cluster's)", "text", "e.g. vision"]];
const DURATIONS = [[3600, "1 hour"], [4 * 3600, "4 hours"], [86400, "1 day"], [3 * 86400, "3 days"], [7 * 86400, "7 days"], [30 * 86400, "30 days"]];
const SILENCE_FIELDS = [["alertname", "Rule", "text", "e.g. gpu_temperature"],
  ...LABEL_INPUTS.map(([k, , what]) => [k, title(what), "text", k === "gpu" ? "e.g. 0" : "empty: any"]),
  ["matchers", "More label matchers", "text", 'e.g. severity="critical"'], ["duration_s", "For", "select", DURATIONS],
  ["until", "Or until (ISO time)", "text", "e.g. 2030-01-31T18:00Z"], ["comment", "Comment", "text", "e.g. maintenance window"]];
// Selectors and matchers come as {label: value} objects or as `label="value", ...` strings.
const labels = (o) => esc(typeof o === "string" ? o : Object.entries(o || {}).map(([k, v]) => `${k}=${v}`).join(" "));
const when = (v) => fmtDateTime(v);
const quoted = (v) => `"${String(v).replace(/[\\"]/g, (c) => "\\" + c)}"`;

// One selector text from the label inputs (each `label="value"`) and the free matchers text (selector text, or a
// JSON object {label: value}); the inputs it used are removed from `body`. Throws an ApiError naming the input.
export function selectorOf(body, inputs, extraKey) {
  const parts = [];
  for (const [k, name] of inputs) {
    const v = body[k]; delete body[k];
    if (v === undefined) continue;
    if (name === "gpu" && !/^\d+$/.test(String(v))) throw new ApiError(0, "invalid", "a GPU index, e.g. 0", k);
    parts.push(`${name}=${quoted(v)}`);
  }
  let extra = body[extraKey]; delete body[extraKey];
  if (extra !== undefined && /^\s*\{/.test(extra)) {
    try { extra = Object.entries(JSON.parse(extra)).map(([k, v]) => `${k}=${quoted(v)}`).join(", "); }
    catch (_) { throw new ApiError(0, "invalid", 'label matchers like node="gpu-1", gpu=~"0|1"', extraKey); }
  }
  if (extra) parts.push(extra);
  return parts.join(", ");
}

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
    bindForm("rule-form", RULE_FIELDS, async (body) => {
      body.selector = selectorOf(body, LABEL_INPUTS, "selector");
      if (body.tenant) body.scope = "tenant";
      await send("POST", "/api/v1/alert-rules", body); toast("rule added"); await refresh();
    });
    bindForm("silence-form", SILENCE_FIELDS, async (body) => {
      body.matchers = selectorOf(body, [["alertname", "alertname"], ...LABEL_INPUTS], "matchers");
      if (!body.matchers) throw new ApiError(0, "invalid", "name a rule or at least one label to silence", "alertname");
      if (body.until) delete body.duration_s; else body.duration_s = Number(body.duration_s);
      await send("POST", "/api/v1/silences", body); toast("silence added"); await refresh();
    }, { ends_at: "until", starts_at: "until", duration_s: "duration_s", selector: "matchers" });
    page.root.addEventListener("click", async (e) => {
      const b = e.target.closest("button[data-del]"); if (!b) return;
      try { await send("DELETE", `/api/v1/${b.dataset.del}/${encodeURIComponent(b.dataset.id)}`); await refresh(); } catch (err) { toast(err.message); }
    });
  }
  await live(page, refresh, 3000);
}
