// Small DOM helpers shared by the pages: escaping, formatting, tables, field errors, toasts.
import { fmtDateTime } from "./format.js";
export const $ = (sel, root = document) => root.querySelector(sel);
export const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

export function esc(v) {
  return String(v ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

export function html(strings, ...values) {
  return strings.reduce((out, s, i) => out + s + (i < values.length ? values[i] : ""), "");
}

export function ago(iso) {
  if (!iso) return "";
  const s = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
  if (s < 0) return "in " + dur(-s);
  return dur(s) + " ago";
}

export function dur(s) {
  if (s === null || s === undefined || Number.isNaN(s)) return "—";
  s = Math.max(0, Math.round(s));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
  return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
}

export const time = (iso) => fmtDateTime(iso); // one format on every page: 24-hour with the zone
export const num = (v, digits = 1) => (v === null || v === undefined ? "—" : Number(v).toFixed(digits));
export const stateTag = (s) => `<span class="state ${esc(s)}">${esc(s)}</span>`;
export const bar = (frac) => `<div class="bar"><span style="width:${Math.max(0, Math.min(100, frac * 100)).toFixed(1)}%"></span></div>`;

export function table(cols, rows, empty = "nothing here") {
  const head = cols.map((c) => `<th>${esc(c)}</th>`).join("");
  const body = rows.length
    ? rows.map((r) => "<tr>" + r.map((c) => `<td>${c}</td>`).join("") + "</tr>").join("")
    : `<tr><td colspan="${cols.length}" class="muted">${esc(empty)}</td></tr>`;
  // In a container of its own that scrolls sideways: a wide table never widens the page (a phone's width).
  return `<div class="table-scroll"><table><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table></div>`;
}

export function toast(msg) {
  const t = $("#toast");
  t.textContent = msg; t.style.display = "block";
  clearTimeout(toast.timer); toast.timer = setTimeout(() => { t.style.display = "none"; }, 3000);
}

// Field errors: every input has data-field=<API field>; the API's {"error":{"field"}} lands under it.
export function clearErrors(form) {
  $$("[aria-invalid]", form).forEach((el) => el.removeAttribute("aria-invalid"));
  $$(".field-error", form).forEach((el) => { el.textContent = ""; });
  const fe = $(".form-error", form); if (fe) fe.textContent = "";
}

export function showError(form, field, message) {
  const key = field ? String(field).split(".")[0] : null;
  const input = key ? $(`[data-field="${key}"]`, form) : null;
  if (input) {
    input.setAttribute("aria-invalid", "true");
    const slot = $(`.field-error[data-for="${key}"]`, form);
    if (slot) { slot.textContent = message; return; }
  }
  const fe = $(".form-error", form);
  if (fe) fe.textContent = message;
}

export function fieldError(key) { return `<span class="field-error" data-for="${key}"></span>`; }

// Run `fn` now and every `ms` while the page is shown; overlapping runs are skipped.
export function live(page, fn, ms = 2000) {
  let busy = false;
  const tick = async () => {
    if (busy || page.closed) return;
    busy = true;
    try { await fn(); } catch (e) { page.error(e); } finally { busy = false; }
  };
  page.timers.push(setInterval(tick, ms));
  return tick();
}
