// The OpenID provider the OIDC sign-in browser tests sign in through (tests/ui/oidc_provider.py starts it).
//
// oidc-provider (the certified Node.js OpenID Provider) set up as an organisation would: a login page of its own
// (user name and password checked against the users file; devInteractions, its quick-start page that lets anyone
// in, is off), one confidential client for the app (authorization-code flow with PKCE, client_secret_basic, no
// consent screen), ID tokens signed with an RSA key made at start, a "groups" claim in the ID token, and
// RP-initiated logout. Sessions and grants live in memory (its default adapter): enough for one test run. It
// runs on Node 20 (it prints that it prefers 22).
//
//   node tests/oidc/provider.mjs CONFIG.json
//
// CONFIG: {"port", "control_port", "client_id", "client_secret", "redirect_uri", "users": {name: {password,
// email, name, groups?}}}. A user without "groups" gets no groups claim at all.
//
// The control port (loopback, test only) makes the provider misbehave on purpose for the next token response,
// as an attacker between the app and the provider would: POST /next-id-token with one of
//   tampered      the ID token's payload altered (more groups), its signature kept
//   wrong-issuer  a well-signed ID token (the provider's own key) whose "iss" names another issuer
//   foreign-key   a well-formed ID token signed by a key that is not the provider's (same "kid")
// so the tests can check that the app refuses each of them.

import { createHash, generateKeyPairSync, randomBytes, sign } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';

import Provider, { interactionPolicy } from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const issuer = `http://127.0.0.1:${config.port}`;
const users = config.users;
const KID = 'test-rs256';
const GROUPS_SCOPE = 'groups';

// ----------------------------------------------------------------------------- keys
function rsaKey() {
  return generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
}
const signingKey = rsaKey();
const foreignKey = rsaKey(); // an attacker's: never published
const signingJwk = { ...signingKey.export({ format: 'jwk' }), kid: KID, alg: 'RS256', use: 'sig' };

// ----------------------------------------------------------------------------- pages
const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function page(title, body) {
  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font-family:sans-serif;max-width:22rem;margin:3rem auto}label,input,button{display:block;width:100%;
margin:.4rem 0}input{padding:.4rem}button{padding:.5rem}.error{color:#a00}</style></head>
<body><h1>Test Identity Provider</h1><h2>${escapeHtml(title)}</h2>${body}</body></html>`;
}

function loginPage(uid, { login = '', error = '' } = {}) {
  return page('Sign in', `${error ? `<p class="error" role="alert">${escapeHtml(error)}</p>` : ''}
<form method="post" action="/interaction/${escapeHtml(uid)}/login" autocomplete="off">
<label for="login">User name</label><input id="login" name="login" required value="${escapeHtml(login)}">
<label for="password">Password</label><input id="password" name="password" type="password" required>
<button type="submit">Sign in</button></form>
<p><a href="/interaction/${escapeHtml(uid)}/abort">Cancel</a></p>`);
}

function chooserPage(uid, accountId) {
  return page('Choose an account', `<form method="post" action="/interaction/${escapeHtml(uid)}/continue">
<button type="submit">Continue as ${escapeHtml(accountId)}</button></form>
<p><a href="/interaction/${escapeHtml(uid)}?another=1">Use another account</a></p>
<p><a href="/interaction/${escapeHtml(uid)}/abort">Cancel</a></p>`);
}

async function formBody(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > 16384) throw new Error('form too large');
    chunks.push(chunk);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

function passwordMatches(user, password) {
  // Compare digests, so the time taken does not depend on where the strings differ.
  const digest = (text) => createHash('sha256').update(String(text)).digest('hex');
  return user !== undefined && digest(user.password) === digest(password);
}

// ----------------------------------------------------------------------------- the provider
// Streamlit asks for prompt=select_account (its default): offer the account the provider session has, or the
// login form when it has none, as hosted providers do.
const policy = interactionPolicy.base();
policy.add(new interactionPolicy.Prompt({ name: 'select_account', requestable: true }), 0);

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: config.client_id,
      client_secret: config.client_secret,
      client_name: 'Policy support bot',
      redirect_uris: [config.redirect_uri],
      post_logout_redirect_uris: [config.redirect_uri],
      response_types: ['code'],
      grant_types: ['authorization_code'],
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: 'RS256',
    },
  ],
  jwks: { keys: [signingJwk] },
  cookies: { keys: [randomBytes(32).toString('hex')] },
  scopes: ['openid', 'email', 'profile', GROUPS_SCOPE],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username'],
    [GROUPS_SCOPE]: ['groups'],
  },
  // The groups go in the ID token itself (Streamlit reads the ID token, not the userinfo endpoint).
  conformIdTokenClaims: false,
  features: {
    devInteractions: { enabled: false },
    rpInitiatedLogout: { enabled: true },
  },
  interactions: {
    policy,
    url: (ctx, interaction) => `/interaction/${interaction.uid}`,
  },
  async findAccount(ctx, id) {
    const user = Object.hasOwn(users, id) ? users[id] : undefined;
    if (user === undefined) return undefined;
    return {
      accountId: id,
      async claims() {
        const claims = {
          sub: id,
          email: user.email,
          email_verified: true,
          name: user.name,
          preferred_username: id,
        };
        if (user.groups !== undefined) claims.groups = user.groups;
        return claims;
      },
    };
  },
  // The app is the organisation's own (first-party) client: no consent screen, as an operator would set it up.
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) {
      const found = await ctx.oidc.provider.Grant.find(grantId);
      if (found) return found;
    }
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope(`openid email profile ${GROUPS_SCOPE}`);
    await grant.save();
    return grant;
  },
  pkce: { required: () => true },
  // Lifetimes in seconds. The grants and sessions live in memory (the default adapter): enough for a test run.
  ttl: { AuthorizationCode: 60, Interaction: 600, Session: 3600, Grant: 3600, AccessToken: 600, IdToken: 600 },
  renderError(ctx, out) {
    ctx.type = 'html';
    ctx.body = page('Error', `<p class="error" role="alert">${escapeHtml(out.error)}: ${escapeHtml(out.error_description || '')}</p>`);
  },
});

// ----------------------------------------------------------------------------- the login page
provider.use(async (ctx, next) => {
  const match = ctx.path.match(/^\/interaction\/([\w-]+)(?:\/(login|continue|abort))?$/);
  if (!match) return next();
  ctx.set('Cache-Control', 'no-store');
  const [, uid, action] = match;
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  if (details.uid !== uid) ctx.throw(400, 'interaction mismatch');
  const finish = (result) => provider.interactionFinished(ctx.req, ctx.res, result, { mergeWithLastSubmission: false });

  if (ctx.method === 'GET' && action === undefined) {
    const accountId = details.session?.accountId;
    ctx.type = 'html';
    ctx.body = details.prompt.name === 'select_account' && accountId && !ctx.query.another
      ? chooserPage(uid, accountId)
      : loginPage(uid, { login: details.params.login_hint || '' });
    return undefined;
  }
  if (ctx.method === 'GET' && action === 'abort') {
    return finish({ error: 'access_denied', error_description: 'The user cancelled the sign-in.' });
  }
  if (ctx.method === 'POST' && action === 'login') {
    const form = await formBody(ctx.req);
    const login = form.get('login') || '';
    const user = Object.hasOwn(users, login) ? users[login] : undefined;
    if (!passwordMatches(user, form.get('password') || '')) {
      ctx.type = 'html';
      ctx.body = loginPage(uid, { login, error: 'Wrong user name or password.' });
      return undefined;
    }
    return finish({ login: { accountId: login }, select_account: {} });
  }
  if (ctx.method === 'POST' && action === 'continue' && details.session?.accountId) {
    return finish({ select_account: {} });
  }
  return ctx.throw(405);
});

// ----------------------------------------------------------------------------- attacks, on request
let nextIdToken = null;
const b64url = (data) => Buffer.from(data).toString('base64url');
const parts = (jwt) => jwt.split('.');
const payloadOf = (jwt) => JSON.parse(Buffer.from(parts(jwt)[1], 'base64url').toString('utf8'));
function signJwt(payload, key) {
  const head = b64url(JSON.stringify({ alg: 'RS256', kid: KID, typ: 'JWT' }));
  const body = b64url(JSON.stringify(payload));
  return `${head}.${body}.${b64url(sign('sha256', Buffer.from(`${head}.${body}`), key))}`;
}
const ATTACKS = {
  tampered(jwt) {
    const payload = payloadOf(jwt);
    payload.groups = [...new Set([...(payload.groups || []), 'hr', 'security', 'admin'])];
    const [head, , signature] = parts(jwt);
    return `${head}.${b64url(JSON.stringify(payload))}.${signature}`;
  },
  'wrong-issuer': (jwt) => signJwt({ ...payloadOf(jwt), iss: 'https://id.attacker.invalid' }, signingKey),
  'foreign-key': (jwt) => signJwt({ ...payloadOf(jwt), groups: ['staff', 'hr', 'admin'] }, foreignKey),
};

provider.use(async (ctx, next) => {
  await next();
  if (ctx.path === '/token' && nextIdToken && ctx.body && typeof ctx.body.id_token === 'string') {
    ctx.body = { ...ctx.body, id_token: ATTACKS[nextIdToken](ctx.body.id_token) };
    console.log(`token: sent a ${nextIdToken} ID token`);
    nextIdToken = null;
  }
});

const control = createServer(async (req, res) => {
  if (req.method === 'POST' && req.url === '/next-id-token') {
    const mode = (await formBody(req)).get('mode');
    if (!Object.hasOwn(ATTACKS, mode || '')) {
      res.writeHead(400).end(`unknown mode ${mode}`);
      return;
    }
    nextIdToken = mode;
    res.writeHead(204).end();
    return;
  }
  res.writeHead(404).end();
});

provider.on('server_error', (ctx, error) => console.error('server_error', error));
control.listen(config.control_port, '127.0.0.1');
provider.listen(config.port, '127.0.0.1', () => console.log(`oidc-provider ${issuer} ready`));
