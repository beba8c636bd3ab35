// The portal's only way to the server: fetch with the session cookie, CSRF header, errors as ApiError.
export const session = { user: null, role: null, tenant: null, csrf: null };

export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message); this.status = status; this.code = code; this.field = field;
  }
}

const UNSAFE = new Set(["POST", "PUT", "PATCH", "DELETE"]);

function csrfCookie() {
  const m = document.cookie.match(/(?:^|;\s*)corral_csrf=([^;]+)/);
  return m ? decodeURIComponent(m[1]) : null;
}

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v === undefined || v === null || v === "") continue;
    for (const item of Array.isArray(v) ? v : [v]) q.append(k, String(item));
  }
  const s = q.toString();
  return s ? "?" + s : "";
}

// A 401 means the session is gone (expired or revoked): back to the login page, remembering where we were.
export function toLogin() {
  const here = location.pathname + location.search;
  if (location.pathname !== "/login") location.assign("/login" + query({ next: here }));
}

export async function request(method, path, { body, params, raw } = {}) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (UNSAFE.has(method)) headers["X-CSRF-Token"] = session.csrf || csrfCookie() || "";
  const r = await fetch(path + query(params), {
    method, headers, credentials: "same-origin", body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (r.status === 401 && !path.startsWith("/web/")) {
    toLogin();
    throw new ApiError(401, "unauthorized", "session expired; log in again", null);
  }
  if (!r.ok) {
    let err = { code: "http_" + r.status, message: r.statusText, field: null };
    try { err = (await r.json()).error || err; } catch (_) { /* not JSON */ }
    throw new ApiError(r.status, err.code, err.message, err.field);
  }
  if (raw) return r;
  if (r.status === 204) return null;
  return r.json();
}

export const get = (path, params) => request("GET", path, { params });
export const send = (method, path, body) => request(method, path, { body });

export async function getWithTotal(path, params) {
  const r = await request("GET", path, { params, raw: true });
  return { items: await r.json(), total: Number(r.headers.get("X-Total-Count") || 0) };
}

export async function loadSession() {
  const s = await request("GET", "/web/session");
  Object.assign(session, s.authenticated ? s : { user: null, role: null, tenant: null, csrf: null });
  return s.authenticated;
}

// Which API paths this server has: pages ask before calling optional endpoints (metrics, alerts, reports,
// audit), so a server without them shows "not available" instead of failing requests.
let capabilities = null;
export async function loadCapabilities() {
  if (!capabilities) {
    const spec = await request("GET", "/openapi.json");
    capabilities = new Set(Object.keys(spec.paths || {}));
  }
  return capabilities;
}
export const has = (path) => capabilities !== null && capabilities.has(path);

export const isAdmin = () => session.role === "admin";
export const canManageTenant = () => session.role === "admin" || session.role === "tenant-admin";
export const canSubmit = () => session.role && session.role !== "viewer";
