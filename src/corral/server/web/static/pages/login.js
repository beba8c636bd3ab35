// Login: a user name and password (local or LDAP), an API token, or single sign-on (OpenID Connect) when the
// server has a provider; each opens a cookie session.
import { ApiError, request } from "../api.js";
import { $, clearErrors, fieldError, showError } from "../ui.js";

function target() {
  const next = new URLSearchParams(location.search).get("next") || "/";
  return next.startsWith("/") && !next.startsWith("//") && !next.startsWith("/login") ? next : "/";
}

export async function render(page) {
  document.title = "Log in · Corral";
  page.root.innerHTML = `<div class="login"><h1>Log in to Corral</h1>
    <form id="password-login" novalidate>
      <label>User name <input name="username" data-field="username" autocomplete="username" required></label>${fieldError("username")}
      <label>Password <input name="password" data-field="password" type="password" autocomplete="current-password" required></label>${fieldError("password")}
      <div class="form-error"></div><button type="submit">Log in</button>
    </form>
    <form id="token-login" novalidate>
      <label>API token <input name="token" data-field="token" type="password" autocomplete="off" required></label>${fieldError("token")}
      <div class="muted">The first admin token is in <code>admin-token</code> in the server's data dir.</div>
      <div class="form-error"></div><button type="submit">Log in with token</button>
    </form><p id="sso-login" hidden><a href="/web/oidc/login">Log in with single sign-on</a></p></div>`;
  request("GET", "/web/oidc").then((sso) => { if (sso.enabled) $("#sso-login").hidden = false; }, () => {});
  for (const form of [$("#password-login"), $("#token-login")]) {
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      clearErrors(form);
      const body = Object.fromEntries(new FormData(form).entries());
      const missing = Object.entries(body).filter(([, v]) => !String(v).trim());
      if (missing.length) { missing.forEach(([k]) => showError(form, k, "required")); return; }
      try {
        await request("POST", "/web/login", { body });
        location.assign(target());
      } catch (err) {
        showError(form, err instanceof ApiError ? err.field : null, err.message);
      }
    });
  }
}
