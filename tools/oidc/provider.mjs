// A real OpenID Connect provider for the console's single sign-on tests: node-oidc-provider
// (pinned in package-lock.json), with a plain login form of its own in place of the library's
// development pages, and a directory the test edits while it runs.
//
// Usage: node provider.mjs CONFIG.json. The config names the issuer's port, the clients (their
// secrets too: never on this command line) and the state file. The state file is read on every
// sign-in and every token answer, so a test changes the directory between sign-ins:
//   {"accounts": {"alice": {"password": "...", "groups": ["..."], "email": "...",
//                           "name": "..."}},
//    "tamper": null | "audience" | "issuer" | "nonce" | "signature"}
// An account missing from "accounts" cannot sign in (a person removed from the directory).
// "tamper" makes the token endpoint answer an ID token that is wrong in one way: another
// audience, another issuer or another nonce (each signed with the provider's own key), or the
// right claims signed by a key that is not the provider's (with the provider's key id). The
// token endpoint itself, the code, PKCE and client authentication are the library's own.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { randomBytes } from 'node:crypto';

import * as jose from 'jose';
import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const issuer = `http://127.0.0.1:${config.port}`;

function state() {
  return JSON.parse(readFileSync(config.state_file, 'utf8'));
}

async function signingKey(kid) {
  const { privateKey } = await jose.generateKeyPair('RS256', { extractable: true });
  return { ...(await jose.exportJWK(privateKey)), kid, alg: 'RS256', use: 'sig' };
}

const providerKey = await signingKey('plinth-test-key');
const foreignKey = await signingKey('plinth-test-key'); // same id, not the provider's key

async function findAccount(ctx, id) {
  const account = state().accounts[id];
  if (!account) return undefined; // removed from the directory: every session of theirs ends
  return {
    accountId: id,
    async claims() {
      return {
        sub: id,
        email: account.email ?? `${id}@example.test`,
        email_verified: true,
        name: account.name ?? id,
        preferred_username: id,
        groups: account.groups ?? [],
      };
    },
  };
}

async function logoutSource(ctx, form) {
  ctx.body = `<!doctype html><html><head><title>Test IdP sign-out</title></head><body>
<h1>Sign out of the Test IdP?</h1>${form}
<button type="submit" form="op.logoutForm" value="yes" name="logout">Yes, sign me out</button>
<button type="submit" form="op.logoutForm">No, stay signed in</button></body></html>`;
}

const provider = new Provider(issuer, {
  clients: config.clients,
  jwks: { keys: [providerKey] },
  cookies: { keys: [randomBytes(32).toString('hex')] },
  findAccount,
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username'],
    groups: ['groups'],
  },
  scopes: ['openid', 'email', 'profile', 'groups', 'offline_access'],
  pkce: { required: () => true }, // a client that sends no S256 challenge is refused
  features: {
    devInteractions: { enabled: false },
    // The library's own pages load web fonts from the internet; a test machine has none.
    rpInitiatedLogout: { enabled: true, logoutSource },
  },
  renderError(ctx, out) {
    ctx.type = 'html';
    ctx.body = `<!doctype html><title>Test IdP error</title><p id="error">${escapeHtml(out.error)}: ${escapeHtml(out.error_description ?? '')}</p>`;
  },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
});

async function tamperedIdToken(idToken, mode) {
  const changed = { ...jose.decodeJwt(idToken) };
  const protectedHeader = jose.decodeProtectedHeader(idToken);
  if (mode === 'audience') changed.aud = 'another-client';
  if (mode === 'issuer') changed.iss = 'http://127.0.0.1:9/another-issuer';
  if (mode === 'nonce') changed.nonce = 'a-nonce-from-another-sign-in';
  const key = await jose.importJWK(mode === 'signature' ? foreignKey : providerKey, 'RS256');
  return new jose.SignJWT(changed).setProtectedHeader(protectedHeader).sign(key);
}

provider.use(async (ctx, next) => {
  await next();
  const mode = state().tamper;
  if (mode && ctx.path === '/token' && ctx.body && ctx.body.id_token) {
    ctx.body = { ...ctx.body, id_token: await tamperedIdToken(ctx.body.id_token, mode) };
  }
});

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function loginPage(uid, message) {
  return `<!doctype html><html><head><title>Test IdP sign-in</title></head><body>
<h1>Test IdP</h1>${message ? `<p id="error">${escapeHtml(message)}</p>` : ''}
<form method="post" action="/interaction/${uid}/login">
<label for="login">Username</label><input id="login" name="login" autofocus>
<label for="password">Password</label><input id="password" name="password" type="password">
<button type="submit">Sign in to the IdP</button></form></body></html>`;
}

async function readForm(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

// First-party consent: the console's client gets what it asked for without a page.
async function grantConsent(details) {
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
  grant.addOIDCScope(details.params.scope);
  return { consent: { grantId: await grant.save() } };
}

async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  if (details.prompt.name === 'consent') {
    return provider.interactionFinished(req, res, await grantConsent(details), {
      mergeWithLastSubmission: true,
    });
  }
  if (req.method === 'GET') {
    res.setHeader('content-type', 'text/html; charset=utf-8');
    return res.end(loginPage(details.uid));
  }
  const form = await readForm(req);
  const account = state().accounts[form.get('login')];
  if (!account || account.password !== form.get('password')) {
    res.statusCode = 200;
    res.setHeader('content-type', 'text/html; charset=utf-8');
    return res.end(loginPage(details.uid, 'Unknown user or wrong password.'));
  }
  return provider.interactionFinished(req, res, { login: { accountId: form.get('login') } }, {
    mergeWithLastSubmission: false,
  });
}

const handle = provider.callback();
createServer((req, res) => {
  if (req.url === '/favicon.ico') {
    res.statusCode = 204;
    return res.end();
  }
  if (req.url.startsWith('/interaction/')) {
    return interaction(req, res).catch((error) => {
      res.statusCode = 400;
      res.end(`interaction failed: ${error.message}`);
    });
  }
  return handle(req, res);
}).listen(config.port, '127.0.0.1', () => console.log(`oidc provider on ${issuer}`));
