// Admin console: tenants, users and roles, quotas, API tokens, and the audit trail of admin actions.
import { canManageTenant, get, has, isAdmin, send } from "../api.js";
import { $, esc, live, table, time, toast } from "../ui.js";
import { bindForm, formHtml } from "./forms.js";

const ROLES = ["member", "viewer", "tenant-admin", "admin"];

// Keep a select's options in step with the tenants that exist, keeping what was chosen.
function fillSelect(formSel, name, options) {
  const sel = $(`${formSel} select[name=${name}]`);
  if (!sel || [...sel.options].map((o) => o.value).join("\n") === options.join("\n")) return;
  const keep = sel.value;
  sel.innerHTML = options.map((o) => `<option value="${esc(o)}">${esc(o || "(none)")}</option>`).join("");
  if (options.includes(keep)) sel.value = keep;
}

export async function render(page) {
  document.title = "Admin · Corral";
  const admin = isAdmin(), tenantAdmin = canManageTenant();
  const tenants = await get("/api/v1/tenants");
  const tenantNames = tenants.map((t) => t.name);
  const TENANT = [["name", "Name", "text", "e.g. vision"], ["parent", "Parent", "select", ["", ...tenantNames]], ["weight", "Fair-share weight", "number", "e.g. 2 (empty: 1)"]];
  const USER = [["name", "User name", "text", "e.g. alice"], ["role", "Role", "select", admin ? ROLES : ROLES.slice(0, 3)],
    ["tenant", "Tenant", "select", tenantNames], ["password", "Password (8+ characters)", "password", ""]];
  const QUOTA = [["tenant", "Tenant", "select", tenantNames], ["gpu_model", "GPU model (empty: all)", "text", "e.g. H100"],
    ["guaranteed_gpus", "Guaranteed GPUs", "number", "e.g. 4 (empty: 0)"], ["max_gpus", "Max GPUs (empty: no limit)", "number", ""]];
  const TOKEN = [["name", "Token name", "text", "e.g. ci"], ...(tenantAdmin ? [["user", "For user (empty: me)", "text", ""]] : []),
    ["expires_in_s", "Expires in (s, empty: never)", "number", ""]];
  page.root.innerHTML = `<h1>Admin</h1>
    <h2>Tenants</h2><div id="tenants"></div>${admin ? formHtml("tenant-form", TENANT, "Create tenant") : ""}
    ${tenantAdmin ? `<h2>Users</h2><div id="users"></div>${formHtml("user-form", USER, "Create user")}` : ""}
    <h2>Quotas</h2><div id="quotas"></div>${admin ? formHtml("quota-form", QUOTA, "Set quota") : ""}
    <h2>API tokens</h2><div id="new-token"></div><div id="tokens"></div>${formHtml("token-form", TOKEN, "Create token")}
    ${admin ? `<h2>Audit trail</h2><div id="audit"></div>` : ""}`;

  const refresh = async () => {
    const [ts, users, quotas, tokens, audit] = await Promise.all([get("/api/v1/tenants"), tenantAdmin ? get("/api/v1/users") : [],
      get("/api/v1/quotas"), get("/api/v1/tokens"), admin && has("/api/v1/audit") ? get("/api/v1/audit", { limit: 100 }) : null]);
    if (page.closed) return;
    const names = ts.map((t) => t.name);
    fillSelect("#tenant-form", "parent", ["", ...names]);
    fillSelect("#user-form", "tenant", names);
    fillSelect("#quota-form", "tenant", names);
    $("#tenants").innerHTML = table(["Tenant", "Parent", "Weight", "Created"], ts.map((t) => [esc(t.name), esc(t.parent ?? ""), esc(t.weight), esc(time(t.created_at))]));
    if (tenantAdmin && !document.activeElement?.matches("select[data-role-of]")) {
      $("#users").innerHTML = table(["User", "Tenant", "Role", "Password", "Created"], users.map((u) => [esc(u.name), esc(u.tenant ?? ""),
        `<select data-role-of="${esc(u.name)}">${(admin ? ROLES : ROLES.slice(0, 3)).concat(ROLES.includes(u.role) ? [] : [u.role]).map((r) =>
          `<option${r === u.role ? " selected" : ""}>${esc(r)}</option>`).join("")}</select>`, u.has_password ? "set" : "—", esc(time(u.created_at))]));
    }
    $("#quotas").innerHTML = table(["Tenant", "GPU model", "Guaranteed", "Max", ""], quotas.map((q) => [esc(q.tenant), esc(q.gpu_model || "all"),
      q.guaranteed_gpus, q.max_gpus ?? "no limit", admin ? `<button type="button" class="secondary" data-del-quota="${esc(q.tenant)}" data-model="${esc(q.gpu_model)}">Delete</button>` : ""]), "no quotas");
    $("#tokens").innerHTML = table(["ID", "Name", "User", "Created", "Expires", "State", ""], tokens.map((t) => [t.id, esc(t.name), esc(t.user ?? ""),
      esc(time(t.created_at)), esc(t.expires_at ? time(t.expires_at) : "never"), t.revoked ? "revoked" : '<span class="ok">active</span>',
      t.revoked ? "" : `<button type="button" class="secondary" data-revoke="${t.id}">Revoke</button>`]));
    if (admin) {
      $("#audit").innerHTML = audit === null ? `<p class="muted">the audit trail is not available on this server yet</p>`
        : table(["When", "Actor", "Action", "Target", "Detail"], audit.map((a) => [esc(time(a.at)), esc(a.actor), esc(a.action), esc(a.target),
          esc(typeof a.detail === "string" ? a.detail : JSON.stringify(a.detail))]), "nothing recorded");
    }
  };

  if (admin) {
    bindForm("tenant-form", TENANT, async (b) => { await send("POST", "/api/v1/tenants", b); toast(`tenant ${b.name} created`); await refresh(); });
    bindForm("quota-form", QUOTA, async (b) => {
      const tenant = b.tenant; delete b.tenant;
      await send("PUT", `/api/v1/tenants/${encodeURIComponent(tenant)}/quotas`, b); toast(`quota set for ${tenant}`); await refresh();
    });
  }
  if (tenantAdmin) bindForm("user-form", USER, async (b) => { await send("POST", "/api/v1/users", b); toast(`user ${b.name} created`); await refresh(); });
  bindForm("token-form", TOKEN, async (b) => {
    const t = await send("POST", "/api/v1/tokens", b);
    $("#new-token").innerHTML = `<p>New token <b>${esc(t.name)}</b> (shown once):</p><div class="secret" data-secret>${esc(t.token)}</div>`;
    await refresh();
  });
  page.root.addEventListener("change", async (e) => {
    const s = e.target.closest("select[data-role-of]"); if (!s) return;
    try { await send("PATCH", `/api/v1/users/${encodeURIComponent(s.dataset.roleOf)}`, { role: s.value }); toast(`${s.dataset.roleOf} is now ${s.value}`); }
    catch (err) { toast(err.message); }
    s.blur(); await refresh();
  });
  page.root.addEventListener("click", async (e) => {
    const q = e.target.closest("button[data-del-quota]"), r = e.target.closest("button[data-revoke]");
    try {
      if (q) await send("DELETE", `/api/v1/tenants/${encodeURIComponent(q.dataset.delQuota)}/quotas?gpu_model=${encodeURIComponent(q.dataset.model)}`);
      else if (r) await send("DELETE", `/api/v1/tokens/${r.dataset.revoke}`);
      else return;
      await refresh();
    } catch (err) { toast(err.message); }
  });
  await live(page, refresh, 5000);
}
