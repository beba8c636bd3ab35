// A real OpenID Connect provider for Corral's tests: panva's oidc-provider (OpenID Certified), with a login form
// that checks passwords, accounts and groups from $OIDC_ACCOUNTS, and one confidential client.
// Usage: node server.mjs PORT   env [OIDC_JWK, OIDC_ID_TOKEN_TTL]: OIDC_CLIENTS='[{"client_id":..,"client_secret":..,"redirect_uris":[..]}]'
//                                    OIDC_ACCOUNTS='{"alice":{"password":"..","groups":["vision"]}}'
import { generateKeyPairSync } from 'node:crypto';
import Provider from 'oidc-provider';

const port = Number(process.argv[2]);
const issuer = `http://127.0.0.1:${port}`;
const accounts = JSON.parse(process.env.OIDC_ACCOUNTS);
const clients = JSON.parse(process.env.OIDC_CLIENTS).map((c) => ({
  grant_types: ['authorization_code'], response_types: ['code'], token_endpoint_auth_method: 'client_secret_basic', ...c,
}));
// The signing key: from $OIDC_JWK when the tests want to mint tokens the provider could have made, else fresh.
const jwk = process.env.OIDC_JWK ? JSON.parse(process.env.OIDC_JWK) : {
  ...generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' }), kid: 'test-key-1', use: 'sig', alg: 'RS256',
};

const provider = new Provider(issuer, {
  clients,
  jwks: { keys: [jwk] },
  cookies: { keys: ['corral-test-cookie-key'] },
  scopes: ['openid', 'profile', 'email', 'groups'],
  claims: { openid: ['sub'], profile: ['preferred_username', 'name'], email: ['email'], groups: ['groups'] },
  conformIdTokenClaims: false, // the scopes' claims go into the ID token, not only /userinfo
  pkce: { required: () => true },
  features: { devInteractions: { enabled: false } },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  ttl: { IdToken: Number(process.env.OIDC_ID_TOKEN_TTL || 3600) },
  async findAccount(ctx, id) {
    const a = accounts[id];
    if (!a) return undefined;
    return {
      accountId: id,
      async claims() {
        return { sub: id, preferred_username: a.username || id, name: id, email: `${id}@corral.test`, groups: a.groups };
      },
    };
  },
});

const escape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const form = (uid, message) => `<!DOCTYPE html><html><body><h1>Sign in</h1><p class="error">${escape(message)}</p>
<form method="post" action="/interaction/${escape(uid)}/login">
<input name="login" type="text"/><input name="password" type="password"/><button type="submit">Sign in</button>
</form></body></html>`;

async function readForm(req) {
  let body = '';
  for await (const chunk of req) body += chunk;
  return new URLSearchParams(body);
}

provider.use(async (ctx, next) => {
  const m = ctx.path.match(/^\/interaction\/([^/]+)(\/login)?$/);
  if (!m) return next();
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  if (ctx.method === 'GET') {
    ctx.type = 'html';
    ctx.body = form(details.uid, '');
    return undefined;
  }
  const f = await readForm(ctx.req);
  const account = accounts[f.get('login')];
  if (!account || account.password !== f.get('password')) {
    ctx.status = 401;
    ctx.type = 'html';
    ctx.body = form(details.uid, 'wrong login or password');
    return undefined;
  }
  const grant = new provider.Grant({ accountId: f.get('login'), clientId: details.params.client_id });
  grant.addOIDCScope(String(details.params.scope));
  const grantId = await grant.save();
  const to = await provider.interactionResult(ctx.req, ctx.res, {
    login: { accountId: f.get('login') }, consent: { grantId },
  }, { mergeWithLastSubmission: false });
  ctx.status = 303;
  ctx.redirect(to);
  return undefined;
});

provider.listen(port, '127.0.0.1', () => console.log(`oidc provider up at ${issuer}`));
