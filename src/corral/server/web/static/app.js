// The portal's client-side router: one shell, a page module per route, live refresh while a page is shown.
import { ApiError, loadCapabilities, loadSession, send, session, toLogin } from "./api.js";
import { $, $$, esc } from "./ui.js";

const ROUTES = [
  [/^\/login$/, "login", "render", null],
  [/^\/$/, "fleet", "render", "fleet"],
  [/^\/nodes$/, "nodes", "renderList", "nodes"],
  [/^\/nodes\/([^/]+)$/, "nodes", "renderNode", "nodes"],
  [/^\/gpus\/([^/]+)\/(\d+)$/, "gpu", "render", "nodes"],
  [/^\/jobs$/, "jobs", "renderQueue", "jobs"],
  [/^\/jobs\/(\d+)$/, "job", "render", "jobs"],
  [/^\/submit$/, "submit", "render", "submit"],
  [/^\/schedules$/, "schedules", "render", "schedules"],
  [/^\/services$/, "services", "renderList", "services"],
  [/^\/services\/([^/]+)$/, "services", "renderService", "services"],
  [/^\/pools$/, "pools", "renderList", "pools"],
  [/^\/pools\/([^/]+)$/, "pools", "renderPool", "pools"],
  [/^\/alerts$/, "alerts", "render", "alerts"],
  [/^\/admin$/, "admin", "render", "admin"],
  [/^\/reports$/, "reports", "render", "reports"],
];

let current = null;

class Page {
  constructor(root, params) { this.root = root; this.params = params; this.timers = []; this.closed = false; }
  close() { this.closed = true; this.timers.forEach(clearInterval); this.timers = []; }
  error(e) {
    if (this.closed) return;
    if (e instanceof ApiError && e.status === 404) { notFound(this.root, e.message); this.close(); return; }
    if (e instanceof ApiError && e.status === 401) return; // toLogin() is on its way
    let box = $(".page-error", this.root);
    if (!box) { box = document.createElement("div"); box.className = "page-error form-error"; this.root.prepend(box); }
    box.textContent = e.message || String(e);
  }
}

export function notFound(root, detail = "") {
  root.innerHTML = `<div class="notfound"><h1>404</h1><p>Page not found.</p>
    <p class="muted">${esc(detail)}</p><p><a href="/">Back to the fleet</a></p></div>`;
  document.title = "Not found · Corral";
}

function paintHeader(section) {
  const logged = !!session.user;
  $("#nav").hidden = !logged;
  $("#logout").hidden = !logged;
  $("#who").textContent = logged ? `${session.user} · ${session.role}${session.tenant ? " · " + session.tenant : ""}` : "";
  $$("#nav a").forEach((a) => {
    a.classList.toggle("active", a.dataset.nav === section);
    if (a.dataset.nav === section) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
    if (a.dataset.role) a.hidden = !a.dataset.role.split(" ").includes(session.role);
  });
}

async function route() {
  if (current) current.close();
  const root = $("#app");
  const path = location.pathname;
  const match = ROUTES.map(([re, mod, fn, section]) => [path.match(re), mod, fn, section]).find(([m]) => m);
  const page = new Page(root, match ? match[0].slice(1).map(decodeURIComponent) : []);
  current = page;
  try {
    const [authed] = await Promise.all([loadSession(), loadCapabilities()]);
    if (page.closed) return;
    if (!authed && (!match || match[1] !== "login")) { toLogin(); return; }
    paintHeader(match ? match[3] : null);
    root.innerHTML = "";
    if (!match) { notFound(root); return; }
    const module = await import(`./pages/${match[1]}.js`);
    if (page.closed) return;
    await module[match[2]](page);
  } catch (e) { page.error(e); }
}

export function navigate(href) {
  history.pushState(null, "", href);
  route();
}

document.addEventListener("click", (e) => {
  const a = e.target.closest("a[href]");
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey) return;
  const href = a.getAttribute("href");
  // Only the portal's own pages are routed here; the API, files, downloads, a job's web UI behind the proxy and
  // links meant for another tab go to the browser.
  if (!href.startsWith("/") || /^\/(api|static|proxy)\//.test(href) || a.hasAttribute("download") || a.target) return;
  e.preventDefault();
  navigate(href);
});

window.addEventListener("popstate", route);
$("#logout").addEventListener("click", async () => {
  try { await send("POST", "/web/logout"); } finally { location.assign("/login"); }
});
route();
