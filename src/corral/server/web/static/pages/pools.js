// Node pools and budgets (docs/elastic.md): every pool (kind, provider, nodes of max, GPUs, pending demand, spend
// this month, instance types) and the visible budgets (used % against the limit, state, policy); one pool's page
// (its types, nodes, and for admins its settings and newest events). Admins create, pause / resume, resize and
// delete cloud pools, and set and delete tenants' budgets.
import { ApiError, get, has, isAdmin, send } from "../api.js";
import { navigate } from "../app.js";
import { fmtDateTime, kindText } from "../format.js";
import { $, $$, ago, bar, esc, live, table, toast } from "../ui.js";
import { bindForm, formHtml } from "./forms.js";

const enc = encodeURIComponent;
const detailPath = (name) => `/api/v1/pools/${enc(name)}`;
const STATIC = "static";

export const money = (v) => (v === null || v === undefined ? "—" : Number(v).toFixed(2));
const hours = (v) => (v === null || v === undefined ? "—" : Number(v).toFixed(1));

// "g4: 4 x A100-80GB, 2.50/h, spot"
export function typeText(t) {
  const gpus = t.gpus ? `${t.gpus} x ${t.gpu_model}` : "no GPU";
  const extra = [t.cpus ? `${t.cpus} CPUs` : "", t.memory_gib ? `${t.memory_gib} GiB` : "", t.spot ? "spot" : ""].filter(Boolean);
  return `${t.name}: ${gpus}, ${money(t.price_per_hour)}/h${extra.length ? ", " + extra.join(", ") : ""}`;
}

const pausedTag = (p) => (p.paused ? ` <span class="state CANCELLED" data-paused>paused</span>` : "");

function nameCell(p) {
  if (p.kind === STATIC) return `<a href="/nodes" data-pool="${esc(p.name)}">${esc(p.name)}</a> <span class="muted">the agents you run</span>`;
  return `<a href="/pools/${enc(p.name)}" data-pool="${esc(p.name)}">${esc(p.name)}</a>${pausedTag(p)}`;
}

const nodesText = (p) => (p.kind === STATIC ? `${esc(p.node_count)}` : `${esc(p.node_count)} / ${esc(p.max_nodes)}`);
const pendingText = (p) => (p.pending_jobs ? `${esc(p.pending_jobs)} job${p.pending_jobs === 1 ? "" : "s"} · ${esc(p.pending_gpus)} GPUs` : "—");

// Budgets: used % against the limit as a bar, the state in words (ok, warning at 80%, exceeded at 100%).
const STATE_CLASS = { ok: "ok", warning: "warn", exceeded: "bad" };

function limitText(b) {
  const parts = [];
  if (b.money !== null && b.money !== undefined) parts.push(`${money(b.money_used)} of ${money(b.money)}`);
  if (b.gpu_hours !== null && b.gpu_hours !== undefined) parts.push(`${hours(b.gpu_hours_used)} of ${hours(b.gpu_hours)} GPU-h`);
  return parts.length ? parts.map(esc).join("<br>") : `<span class="muted">no limit</span>`;
}

function budgetRows(items) {
  return items.map((b) => [
    `<span data-budget="${esc(b.tenant)}">${esc(b.tenant)}</span>`,
    esc(b.period),
    limitText(b),
    `<div data-used="${esc(b.used_pct)}" title="${esc(b.used_pct)}%">${bar(Number(b.used_pct) / 100)}</div>`
      + `<span data-used-pct>${esc(Number(b.used_pct).toFixed(1))}%</span>`,
    `<span class="${STATE_CLASS[b.state] || ""}" data-state>${esc(b.state)}</span>`,
    `<span data-policy>${esc(b.policy)}</span>${b.enforced ? ` <span class="bad">enforced</span>` : ""}`,
    `<span title="${esc(fmtDateTime(b.period_start))}">${esc(fmtDateTime(b.period_end))}</span>`,
    ...(isAdmin() ? [`<button type="button" class="danger" data-delete-budget="${esc(b.tenant)}">Delete</button>`] : []),
  ]);
}

const POOL_FIELDS = [
  ["name", "Name", "text", "e.g. burst"],
  ["provider", "Provider", "select", ["local", "aws"]],
  ["type_name", "Instance type", "text", "e.g. g4"],
  ["gpus", "GPUs", "number", "e.g. 4"],
  ["gpu_model", "GPU model", "text", "e.g. A100-80GB"],
  ["price_per_hour", "Price / hour", "number", "e.g. 2.5"],
  ["spot", "Spot", "select", [["", "no"], ["yes", "yes"]]],
  ["min_nodes", "Min nodes", "number", "e.g. 0"],
  ["max_nodes", "Max nodes", "number", "e.g. 2"],
  ["idle_s", "Idle (s)", "number", "e.g. 300"],
  ["settings", "Settings", "json", ""],
];

const BUDGET_FIELDS = [
  ["tenant", "Tenant", "text", "e.g. research"],
  ["period", "Period", "select", ["month", "week", "day"]],
  ["money", "Money", "number", "e.g. 5000"],
  ["gpu_hours", "GPU-hours", "number", "e.g. 2000"],
  ["policy", "Policy", "select", ["notify", "no-burst", "hold"]],
];

// The form's flat fields as the API's PoolIn: one instance type (the CLI and API take more).
function poolBody(f) {
  const type = { name: f.type_name ?? "", gpus: f.gpus ?? 0, spot: f.spot === "yes" };
  if (f.gpu_model !== undefined) type.gpu_model = f.gpu_model;
  if (f.price_per_hour !== undefined) type.price_per_hour = f.price_per_hour;
  const body = { name: f.name ?? "", provider: f.provider ?? "local", instance_types: [type] };
  for (const k of ["min_nodes", "max_nodes", "idle_s", "settings"]) if (f[k] !== undefined) body[k] = f[k];
  return body;
}

// The API's error fields (instance_types.0.gpus) on the form's inputs.
const TYPE_FIELDS = { name: "type_name", gpus: "gpus", gpu_model: "gpu_model", price_per_hour: "price_per_hour", spot: "spot" };
function poolField(field) {
  const m = String(field || "").match(/^instance_types(?:\.\d+)?\.([a-z_]+)/);
  return m ? TYPE_FIELDS[m[1]] || "type_name" : field === "instance_types" ? "type_name" : field;
}

const unavailable = (root, title) => {
  root.innerHTML = `<h1>${esc(title)}</h1><p class="muted">pools are not available on this server yet</p>`;
};

export async function renderList(page) {
  document.title = "Pools · Corral";
  if (!has("/api/v1/pools")) { unavailable(page.root, "Pools"); return; }
  const admin = isAdmin();
  const budgets = has("/api/v1/budgets");
  page.root.innerHTML = `<h1>Pools</h1><p class="muted">Every node is in a pool: the agents you run form the
    <code>static</code> pool; a cloud pool starts nodes when waiting jobs fit no node and gives them back when idle.</p>
    <div id="list"></div>
    ${admin ? `<h2>Create a cloud pool</h2><div id="create"></div>` : ""}
    ${budgets ? `<h2 id="budgets-title">Budgets</h2><p class="muted">What each tenant spent this period against its limit;
      at 80% a warning, at 100% its policy applies (notify, no-burst: no new cloud nodes, hold: its jobs wait).</p>
      <div id="budgets"></div>${admin ? `<h3>Set a tenant's budget</h3><div id="set-budget"></div>` : ""}` : ""}`;

  if (admin) {
    $("#create").innerHTML = formHtml("pool-form", POOL_FIELDS, "Create pool");
    const form = $("#pool-form");
    form.elements.min_nodes.value = "0"; form.elements.max_nodes.value = "1"; form.elements.idle_s.value = "300";
    bindForm("pool-form", POOL_FIELDS, async (f) => {
      let created;
      try { created = await send("POST", "/api/v1/pools", poolBody(f)); }
      catch (err) { if (err instanceof ApiError) err.field = poolField(err.field); throw err; }
      toast(`pool ${created.name} created`);
      await refresh();
    });
    form.addEventListener("reset", () => setTimeout(() => {
      form.elements.min_nodes.value = "0"; form.elements.max_nodes.value = "1"; form.elements.idle_s.value = "300";
    }));
  }

  if (budgets && admin) {
    $("#set-budget").innerHTML = formHtml("budget-form", BUDGET_FIELDS, "Set budget");
    bindForm("budget-form", BUDGET_FIELDS, async (f) => {
      const { tenant, ...body } = f;
      if (!tenant) throw new ApiError(422, "invalid", "name a tenant", "tenant");
      await send("PUT", `/api/v1/budgets/${enc(tenant)}`, body);
      toast(`budget of ${tenant} set`);
      await refreshBudgets();
    });
    $("#budgets").addEventListener("click", async (e) => {
      const b = e.target.closest("button[data-delete-budget]");
      if (!b) return;
      const tenant = b.dataset.deleteBudget;
      if (!confirm(`Delete the budget of ${tenant}? Its spend is no longer limited.`)) return;
      b.disabled = true;
      try { await send("DELETE", `/api/v1/budgets/${enc(tenant)}`); toast(`budget of ${tenant} deleted`); await refreshBudgets(); }
      catch (err) { b.disabled = false; if (!(err instanceof ApiError && err.status === 401)) toast(err.message); }
    });
  }

  const refresh = async () => {
    const items = await get("/api/v1/pools");
    if (page.closed) return;
    $("#list").innerHTML = table(["Name", "Kind", "Provider", "Nodes", "GPUs", "Pending", "Spend this month", "Instance types"],
      items.map((p) => [
        nameCell(p), esc(p.kind), esc(p.provider || "—"), `<span data-nodes>${nodesText(p)}</span>`, esc(p.gpus),
        pendingText(p), `<span data-spend>${esc(money(p.spend_month))}</span>`,
        p.instance_types.length ? p.instance_types.map((t) => esc(typeText(t))).join("<br>") : "—",
      ]), "no pools");
    $$("#list tbody tr").forEach((tr, i) => { if (items[i]) tr.dataset.poolRow = items[i].name; });
  };
  const refreshBudgets = async () => {
    if (!budgets) return;
    const items = await get("/api/v1/budgets");
    if (page.closed) return;
    items.sort((a, b) => a.tenant.localeCompare(b.tenant));
    const cols = ["Tenant", "Period", "Used of limit", "Used", "State", "Policy", "Period ends"];
    $("#budgets").innerHTML = table(admin ? [...cols, ""] : cols, budgetRows(items), "no budgets");
    $$("#budgets tbody tr").forEach((tr, i) => { if (items[i]) tr.dataset.budgetRow = items[i].tenant; });
  };
  await live(page, refresh, 3000);
  await live(page, refreshBudgets, 5000);
}

function nodeRows(p) {
  return p.nodes.slice().sort((a, b) => a.name.localeCompare(b.name)).map((n) => [
    n.node_state ? `<a href="/nodes/${enc(n.name)}">${esc(n.name)}</a>` : esc(n.name),
    esc(n.instance_type) + (n.spot ? ` <span class="muted">spot</span>` : ""),
    `<span data-node-state>${esc(n.state)}</span>${n.node_state ? ` <span class="muted">${esc(n.node_state)}</span>` : ""}`,
    esc(n.jobs), esc(n.gpus),
    `<span title="${esc(fmtDateTime(n.launched_at))}">${esc(ago(n.launched_at))}</span>`,
    n.idle_since ? `<span title="${esc(fmtDateTime(n.idle_since))}">${esc(ago(n.idle_since))}</span>` : "—",
    n.reason ? `<span data-reason>${esc(n.reason)}</span>` : "—",
  ]);
}

export async function renderPool(page) {
  const name = page.params[0];
  document.title = `Pool ${name} · Corral`;
  if (!has("/api/v1/pools/{name}")) { unavailable(page.root, `Pool ${name}`); return; }
  let pool = await get(detailPath(name));
  if (page.closed) return;
  const admin = isAdmin();
  page.root.innerHTML = `<h1>Pool <span id="pool-name"></span> <span id="pool-state"></span></h1>
    <p id="summary"></p><div class="row" id="actions"></div>
    <h2>Instance types</h2><div id="types"></div>
    <h2>Nodes</h2><div id="nodes"></div>
    <div id="admin-only"></div>`;
  $("#pool-name").textContent = name;

  if (admin && pool.kind !== STATIC) {
    $("#admin-only").innerHTML = `<h2>Settings</h2><div id="settings"></div><h2>Events</h2><div id="events"></div>`;
    $("#actions").innerHTML = `<button type="button" class="secondary" id="pause"></button>
      <form id="max-form" class="inline" novalidate><label>Max nodes
        <input name="max_nodes" inputmode="numeric" data-field="max_nodes"></label>
        <button type="submit" class="secondary">Set max</button></form>
      <button type="button" class="danger" id="delete">Delete</button>`;
    const input = $("#max-form input[name=max_nodes]");
    input.value = String(pool.max_nodes);
    input.addEventListener("input", () => { input.dataset.dirty = "1"; });
    const act = async (b, fn) => {
      b.disabled = true;
      try { await fn(); } catch (err) { if (!(err instanceof ApiError && err.status === 401)) toast(err.message); }
      finally { b.disabled = false; }
    };
    $("#pause").addEventListener("click", (e) => act(e.target, async () => {
      const paused = !pool.paused;
      pool = await send("PATCH", detailPath(name), { paused });
      toast(`${name}: ${paused ? "paused: it starts no new node" : "resumed"}`);
      await refresh();
    }));
    $("#max-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const n = Number(input.value);
      if (!Number.isInteger(n) || n < 0) { toast("max nodes: a whole number, 0 or more"); return; }
      act(e.target.querySelector("button"), async () => {
        pool = await send("PATCH", detailPath(name), { max_nodes: n });
        delete input.dataset.dirty;
        toast(`${name}: at most ${n} node${n === 1 ? "" : "s"}`);
        await refresh();
      });
    });
    $("#delete").addEventListener("click", (e) => {
      if (!confirm(`Delete pool ${name}? Its nodes are drained (their jobs end first) and released.`)) return;
      act(e.target, async () => { await send("DELETE", detailPath(name)); toast(`${name}: deleted`); navigate("/pools"); });
    });
  }

  function paint() {
    const p = pool;
    $("#pool-state").innerHTML = pausedTag(p);
    const nodes = p.kind === STATIC ? `${esc(p.node_count)} nodes (<a href="/nodes">the nodes page</a>)`
      : `<span data-nodes>${esc(p.node_count)} / ${esc(p.max_nodes)}</span> nodes (at least ${esc(p.min_nodes)}), idle ones go after ${esc(p.idle_s)} s`;
    $("#summary").innerHTML = [
      `${esc(p.kind)}${p.provider ? ` · ${esc(p.provider)}` : ""}${p.region ? ` · ${esc(p.region)}` : ""}`,
      nodes, `${esc(p.gpus)} GPUs`, `pending: ${pendingText(p)}`,
      `spend this month <b data-spend>${esc(money(p.spend_month))}</b>, in all ${esc(money(p.spend_total))}`,
      p.failed_launches ? `<span class="warn">${esc(p.failed_launches)} failed launches</span>` : "",
      Object.keys(p.labels || {}).length ? `labels ${Object.entries(p.labels).map(([k, v]) => `<code>${esc(k)}=${esc(v)}</code>`).join(" ")}` : "",
      (p.taints || []).length ? `taints ${p.taints.map((t) => `<code>${esc(t)}</code>`).join(" ")}` : "",
      p.policy ? `policy <code>${esc(p.policy)}</code>` : "",
    ].filter(Boolean).join(" · ");
    $("#types").innerHTML = table(["Name", "GPUs", "GPU model", "GPU memory", "CPUs", "Memory", "Price / hour", "Spot"],
      p.instance_types.map((t) => [esc(t.name), esc(t.gpus), esc(t.gpu_model || "—"),
        t.gpu_memory_mib ? `${esc(Math.round(t.gpu_memory_mib / 1024))} GiB` : "—", t.cpus ? esc(t.cpus) : "—",
        t.memory_gib ? `${esc(t.memory_gib)} GiB` : "—", esc(money(t.price_per_hour)), t.spot ? "yes" : "no"]),
      p.kind === STATIC ? "the static pool's nodes are the agents you run" : "no instance types");
    $("#nodes").innerHTML = p.kind === STATIC ? `<p class="muted">See <a href="/nodes">the nodes page</a>.</p>`
      : table(["Node", "Type", "State", "Jobs", "GPUs", "Launched", "Idle since", "Reason"], nodeRows(p), "no nodes running");
    if ($("#settings")) {
      $("#settings").innerHTML = table(["Setting", "Value"],
        Object.entries(p.settings || {}).map(([k, v]) => [`<code>${esc(k)}</code>`, `<code data-setting="${esc(k)}">${esc(v)}</code>`]),
        "no settings");
    }
    if ($("#events")) {
      const events = (p.events || []).slice().sort((a, b) => String(b.at).localeCompare(String(a.at))).slice(0, 30);
      $("#events").innerHTML = table(["When", "Node", "Event", "What happened"], events.map((e) => [
        `<span title="${esc(ago(e.at))}">${esc(fmtDateTime(e.at))}</span>`, e.node ? esc(e.node) : "—",
        esc(kindText(e.kind)), `<span data-event>${esc(e.message)}</span>`]), "no events");
    }
    const pause = $("#pause");
    if (pause) {
      pause.textContent = p.paused ? "Resume" : "Pause";
      pause.title = p.paused ? "start new nodes again" : "start no new node (running ones stay until idle)";
      const input = $("#max-form input[name=max_nodes]");
      if (!input.dataset.dirty && document.activeElement !== input) input.value = String(p.max_nodes);
    }
  }

  const refresh = async () => {
    const p = await get(detailPath(name));
    if (page.closed) return;
    pool = p; paint();
  };
  paint();
  await live(page, refresh, 2000);
}
