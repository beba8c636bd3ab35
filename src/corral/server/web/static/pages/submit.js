// Submit form: every JobSubmit field, checked like the API checks it, the API's own errors shown inline,
// and a draft kept in sessionStorage so an expired session loses nothing that was typed.
import { ApiError, get, send, session } from "../api.js";
import { navigate } from "../app.js";
import { $, $$, clearErrors, esc, fieldError, showError } from "../ui.js";

const DRAFT = "corral-submit-draft";
const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/;

// Shell-like split: whitespace separates words; quotes group; backslash escapes the next character.
export function splitCommand(text) {
  const out = []; let cur = "", inWord = false, quote = null;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quote) { if (c === quote) quote = null; else if (c === "\\" && quote === '"' && i + 1 < text.length) cur += text[++i]; else cur += c; }
    else if (c === "'" || c === '"') { quote = c; inWord = true; }
    else if (c === "\\" && i + 1 < text.length) { cur += text[++i]; inWord = true; }
    else if (/\s/.test(c)) { if (inWord) { out.push(cur); cur = ""; inWord = false; } }
    else { cur += c; inWord = true; }
  }
  if (quote) throw new Error("unterminated quote");
  if (inWord) out.push(cur);
  return out;
}

// [field, label, kind, class, hint]: the hint is the input's placeholder, worded so it never reads as a value.
// The container's own fields (CONTAINER) are shown only while an image is filled in.
const FIELDS = [
  ["command", "Command", "text", "wide", "e.g. python train.py --epochs 3"],
  ["name", "Name", "text", "", "empty: the program's name"],
  ["image", "Container image (empty: the job runs as a plain process)", "text", "", "e.g. pytorch/pytorch:2.4 (empty: a plain process)"],
  ["mounts", "Host mounts (SRC:DST or SRC:DST:ro, one a line)", "textarea", "wide", "e.g. /data/imagenet:/data:ro"],
  ["shm_size_mib", "Shared memory, /dev/shm (e.g. 2g or 512m; a bare number is MiB)", "text", "", "e.g. 2g (empty: 1g, or a quarter of the memory)"],
  ["container_user", "Container user (UID or UID:GID)", "text", "", "e.g. 1000:1000 (empty: the job's own Unix identity)"],
  ["registry_secret", "Registry secret (to pull a private image)", "select", "", ""],
  ["gpus", "GPUs (whole, on one node)", "number", "", "e.g. 2 (empty: none)"],
  ["gpu_milli", "GPU share in milli (fraction of one GPU; 1000 = whole)", "number", "", "e.g. 500 (empty: a whole GPU)"],
  ["gpu_model", "GPU model (e.g. H100 or A100|H100)", "text", "", "empty: any model"],
  ["min_gpu_memory_mib", "Minimum GPU memory (MiB)", "number", "", "e.g. 40000 (empty: any)"],
  ["cpu_milli", "CPU (milli-cores)", "number", "", "e.g. 4000 (empty: none reserved)"],
  ["memory_mib", "Memory (MiB)", "number", "", "e.g. 16384 (empty: none reserved)"],
  ["workdir", "Data path / working directory (absolute)", "text", "", "e.g. /data/project"],
  ["queue", "Queue", "text", "", "empty: the default queue"],
  ["priority", "Priority (-1000..1000)", "number", "", "e.g. 10 (empty: normal)"],
  ["time_limit_s", "Time limit (seconds)", "number", "", "e.g. 3600 (empty: no limit)"],
  ["port", "Web UI (any number: Corral assigns the port, $CORRAL_JOB_PORT)", "number", "", "e.g. 8888 (empty: no web UI)"],
  ["env", "Environment (KEY=VALUE, one a line)", "textarea", "wide", "e.g. NCCL_DEBUG=INFO"],
  ["repeat", "Repeat schedule (empty: run once; a cron line, @daily or @every 15m)", "text", "", "e.g. @daily (empty: run once)"],
  ["timezone", "Time zone of the schedule", "text", "", "empty: UTC"],
  ["concurrency", "If the previous run is still active", "select", "", ""],
];
const CONCURRENCY = [["forbid", "skip this run (forbid)"], ["allow", "start another (allow)"], ["replace", "cancel it, start anew (replace)"]];
const CONTAINER = new Set(["mounts", "shm_size_mib", "container_user", "registry_secret"]);
const NO_SECRET = [["", "none (a public image)"]];
// A select's options before the page loads any: the registry secrets come from GET /api/v1/secrets.
const OPTIONS = { concurrency: CONCURRENCY, registry_secret: NO_SECRET };
const MAX_MOUNTS = 16, MAX_SHM_MIB = 1 << 20;
const SIZE = /^([0-9]{1,9})\s*([kmgt]?)(i?b)?$/i;
const SIZE_MIB = { k: 1 / 1024, m: 1, g: 1024, t: 1 << 20 };

// A size as Docker spells it (512m, 2g, 1GiB, 1073741824b) in MiB, rounded up; a bare number is MiB already.
// null when it is no size.
export function sizeMib(text) {
  const m = SIZE.exec(String(text).trim());
  if (!m) return null;
  const unit = m[2].toLowerCase(), n = Number(m[1]);
  const mib = unit ? n * SIZE_MIB[unit] : m[3] ? n / (1 << 20) : n;
  return Math.max(Math.ceil(mib), 1);
}

// One host mount, checked as the API parses it (which host paths may be mounted only the server knows); a problem
// in the API's words, or null.
export function mountProblem(text) {
  const parts = text.split(":");
  if ((parts.length !== 2 && parts.length !== 3) || (parts.length === 3 && !["ro", "rw"].includes(parts[2])))
    return `'${text}': write SRC:DST or SRC:DST:ro with absolute paths`;
  for (const path of parts.slice(0, 2))
    if (!path.startsWith("/") || path.split("/").includes("..") || path.includes(","))
      return `'${text}': '${path}' must be an absolute path without '..' or ','`;
  const top = parts[1].split("/").filter(Boolean)[0];
  if (!top || ["proc", "sys", "dev"].includes(top)) return `'${text}': cannot mount over /${top || ""}`;
  return null;
}

// A schedule's fields, checked as the API checks them where the browser can (the cron grammar is the server's).
export function buildSchedule(values, job) {
  const errors = [], repeat = (values.repeat || "").trim();
  if (!repeat) return { schedule: null, errors };
  const timezone = (values.timezone || "").trim() || "UTC";
  try { new Intl.DateTimeFormat("en", { timeZone: timezone }); }
  catch (_) { errors.push(["timezone", `unknown time zone '${timezone}' (use an IANA name like UTC or Europe/Paris)`]); }
  if (/^@every\s*$/i.test(repeat)) errors.push(["repeat", "@every needs a duration, e.g. @every 15m"]);
  const schedule = { schedule: repeat, timezone, concurrency: values.concurrency || "forbid", job };
  if (job.name) schedule.name = job.name;
  return { schedule, errors };
}

// The API names a schedule's fields `schedule` and a job's `job.FIELD`: the form's inputs are `repeat` and FIELD.
export function formField(apiField) {
  if (!apiField) return apiField;
  if (apiField === "schedule") return "repeat";
  return apiField.startsWith("job.") ? apiField.slice(4) : apiField;
}
const INT_RANGES = { gpus: [0, 1024], gpu_milli: [1, 1000], min_gpu_memory_mib: [0, null], cpu_milli: [0, null],
  memory_mib: [0, null], priority: [-1000, 1000], time_limit_s: [1, 366 * 86400], port: [1, 65535] };

// Build the request body, or a list of [field, message] in the API's words.
export function buildBody(values) {
  const errors = [], body = {};
  try {
    body.command = splitCommand(values.command || "");
    if (!body.command.length) errors.push(["command", "a command is required"]);
  } catch (e) { errors.push(["command", e.message]); }
  if (values.name) { if (values.name.length > 255) errors.push(["name", "at most 255 characters"]); body.name = values.name; }
  for (const [k, [lo, hi]] of Object.entries(INT_RANGES)) {
    const raw = String(values[k] ?? "").trim();
    if (!raw) continue;
    const v = Number(raw);
    if (!Number.isInteger(v)) { errors.push([k, "must be a whole number"]); continue; }
    if (lo !== null && v < lo) errors.push([k, `must be ≥ ${lo}`]);
    else if (hi !== null && v > hi) errors.push([k, `must be ≤ ${hi}`]);
    else body[k] = v;
  }
  if (values.gpu_model && values.gpu_model.trim()) body.gpu_model = values.gpu_model.trim();
  if (values.workdir && values.workdir.trim()) {
    if (!values.workdir.trim().startsWith("/")) errors.push(["workdir", "must be an absolute path"]);
    body.workdir = values.workdir.trim();
  }
  const image = (values.image || "").trim();
  if (image) { // the container's fields count only with an image (hidden, a draft may still hold them)
    body.image = image;
    const mounts = (values.mounts || "").split("\n").map((l) => l.trim()).filter(Boolean);
    if (mounts.length > MAX_MOUNTS) errors.push(["mounts", `at most ${MAX_MOUNTS} mounts`]);
    const bad = mounts.map(mountProblem).find(Boolean);
    if (bad) errors.push(["mounts", bad]);
    if (mounts.length) body.mounts = mounts;
    const shm = (values.shm_size_mib || "").trim();
    if (shm) {
      const mib = sizeMib(shm);
      if (mib === null) errors.push(["shm_size_mib", `'${shm}': give a size like 512m or 2g (a bare number is MiB)`]);
      else if (mib > MAX_SHM_MIB) errors.push(["shm_size_mib", "at most 1t"]);
      else body.shm_size_mib = mib;
    }
    const user = (values.container_user || "").trim();
    if (user && !/^[0-9]{1,10}(:[0-9]{1,10})?$/.test(user)) errors.push(["container_user", `'${user}': give a numeric UID or UID:GID`]);
    else if (user) body.container_user = user;
    if (values.registry_secret) body.registry_secret = values.registry_secret;
  }
  const queue = (values.queue || "").trim();
  if (queue.length > 64) errors.push(["queue", "at most 64 characters"]); else if (queue) body.queue = queue;
  body.env = {};
  (values.env || "").split("\n").forEach((line, i) => {
    if (!line.trim()) return;
    const eq = line.indexOf("=");
    const key = eq < 0 ? line.trim() : line.slice(0, eq).trim();
    if (eq < 0) errors.push(["env", `line ${i + 1}: expected KEY=VALUE`]);
    else if (!ENV_KEY.test(key)) errors.push(["env", `invalid environment variable name '${key}'`]);
    else body.env[key] = line.slice(eq + 1);
  });
  return { body, errors };
}

const options = (pairs) => pairs.map(([v, t]) => `<option value="${esc(v)}">${esc(t)}</option>`).join("");

// IANA zones the browser knows, for the time-zone field's suggestions.
function zones() {
  try { return ["UTC", ...Intl.supportedValuesOf("timeZone").filter((z) => z !== "UTC")]; } catch (_) { return ["UTC"]; }
}

export async function render(page) {
  document.title = "Submit · Corral";
  page.root.innerHTML = `<h1>Submit a job</h1><form class="grid" id="submit-form" novalidate>` + FIELDS.map(([k, label, type, cls, ph]) =>
    `<label class="${cls}"${CONTAINER.has(k) ? " data-container hidden" : ""}>${esc(label)}${type === "textarea"
      ? `<textarea name="${k}" data-field="${k}" rows="3" placeholder="${esc(ph)}"></textarea>`
      : type === "select" ? `<select name="${k}" data-field="${k}">${options(OPTIONS[k])}</select>`
      : `<input name="${k}" data-field="${k}" type="${type === "number" ? "text" : type}" inputmode="${type === "number" ? "numeric" : "text"}" placeholder="${esc(ph)}"${k === "queue" ? ' list="queues"' : k === "timezone" ? ' list="zones"' : ""}>`}
      ${fieldError(k)}</label>`).join("") +
    `<datalist id="queues"></datalist><datalist id="zones">${zones().map((z) => `<option value="${esc(z)}">`).join("")}</datalist><div class="wide"><div class="form-error"></div><button type="submit">Submit</button>
     <button type="button" class="secondary" id="clear">Clear</button></div></form>`;
  const form = $("#submit-form");
  const values = () => Object.fromEntries(new FormData(form).entries());
  // The container's fields show while an image is filled in.
  const showContainer = () => {
    const on = Boolean(form.elements.image.value.trim());
    $$("[data-container]", form).forEach((el) => { el.hidden = !on; });
  };
  let draft = {};
  try {
    draft = JSON.parse(sessionStorage.getItem(DRAFT) || "{}") || {};
    for (const [k, v] of Object.entries(draft)) if (form.elements[k]) form.elements[k].value = v;
  } catch (_) { sessionStorage.removeItem(DRAFT); }
  showContainer();
  form.addEventListener("input", () => { showContainer(); sessionStorage.setItem(DRAFT, JSON.stringify(values())); });
  $("#clear").addEventListener("click", () => { form.reset(); sessionStorage.removeItem(DRAFT); clearErrors(form); showContainer(); });
  get("/api/v1/queues").then((qs) => {
    $("#queues").innerHTML = [...new Set(qs.map((q) => q.name))].map((n) => `<option value="${esc(n)}">`).join("");
  }).catch(() => {});
  // The registry logins of the user's own tenant (an admin's list would hold every tenant's): "name (user@host)".
  if (session.tenant) get("/api/v1/secrets", { tenant: session.tenant }).then((secrets) => {
    const select = form.elements.registry_secret, chosen = select.value || draft.registry_secret || "";
    const registry = secrets.filter((x) => x.kind === "registry" && x.tenant === session.tenant);
    select.innerHTML = options([...NO_SECRET, ...registry.map((x) => [x.name, `${x.name} (${x.username ?? ""}@${x.host ?? ""})`])]);
    select.value = registry.some((x) => x.name === chosen) ? chosen : ""; // the draft's choice, once its option exists
  }).catch(() => {});
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    clearErrors(form);
    sessionStorage.setItem(DRAFT, JSON.stringify(values()));
    const { body, errors } = buildBody(values());
    const { schedule, errors: scheduleErrors } = buildSchedule(values(), body);
    errors.push(...scheduleErrors);
    if (errors.length) { errors.forEach(([f, m]) => showError(form, f, m)); return; }
    const btn = $("button[type=submit]", form);
    btn.disabled = true;
    try {
      if (schedule) {
        const created = await send("POST", "/api/v1/schedules", schedule);
        sessionStorage.removeItem(DRAFT);
        navigate(`/schedules#schedule-${created.id}`);
      } else {
        const job = await send("POST", "/api/v1/jobs", body);
        sessionStorage.removeItem(DRAFT);
        navigate(`/jobs/${job.id}`);
      }
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) return; // on the way to the login page; the draft is kept
      showError(form, formField(err.field), err.message);
    } finally { btn.disabled = false; }
  });
  $$("input, textarea", form)[0].focus();
}
