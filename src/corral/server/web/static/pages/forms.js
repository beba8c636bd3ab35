// A small form helper for the admin, alerts and reports pages: inputs with data-field, API errors inline.
import { ApiError } from "../api.js";
import { $, clearErrors, esc, fieldError, showError, toast } from "../ui.js";

// fields: [name, label, type ("text"|"number"|"password"|"select"|"json"), options]. For a select, options are values
// or [value, label] pairs; for an input, the hint shown as its placeholder (worded "e.g. ..." so it never reads as a
// value that was filled in).
const option = (o) => (Array.isArray(o) ? o : [o, o || "(none)"]);
export function formHtml(id, fields, button) {
  return `<form class="inline" id="${id}" novalidate>` + fields.map(([k, label, type, opts]) => `<label>${esc(label)}` + (type === "select"
    ? `<select name="${k}" data-field="${k}">${(opts || []).map(option).map(([v, t]) => `<option value="${esc(v)}">${esc(t)}</option>`).join("")}</select>`
    : `<input name="${k}" data-field="${k}" type="${type === "password" ? "password" : "text"}"${type === "number" ? ' inputmode="numeric"' : ""} placeholder="${esc(type === "json" ? "e.g. {}" : opts || "")}">`)
    + `${fieldError(k)}</label>`).join("") + `<button type="submit">${esc(button)}</button><div class="form-error"></div></form>`;
}

// Turn the form's strings into the API's types: numbers where `type` says number, JSON objects for json.
// `aliases` maps a field name the API reports to the input that holds it (e.g. ends_at -> until).
export function bindForm(id, fields, submit, aliases = {}) {
  const form = $(`#${id}`);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    clearErrors(form);
    const body = {};
    for (const [k, , type] of fields) {
      const raw = String(form.elements[k].value).trim();
      if (raw === "") continue;
      if (type === "number") {
        const v = Number(raw);
        if (Number.isNaN(v)) { showError(form, k, "must be a number"); return; }
        body[k] = v;
      } else if (type === "json") {
        try { body[k] = JSON.parse(raw); } catch (_) { showError(form, k, "must be JSON, e.g. {\"node\": \"gpu-1\"}"); return; }
      } else body[k] = raw;
    }
    try { await submit(body); form.reset(); }
    catch (err) {
      if (err instanceof ApiError && err.status === 401) return;
      showError(form, aliases[err.field] || err.field, err.message);
      if (!err.field) toast(err.message);
    }
  });
}
