// A real OAuth 2.1 authorization server for the interoperability tests: oidc-provider (pinned in
// tests/interop/package-lock.json) on a loopback port it picks, configured the way an MCP
// deployment's authorization server is: PKCE (S256) required, resource indicators (RFC 8707)
// issuing JWT access tokens whose audience is the resource, refresh tokens, dynamic client
// registration, introspection, revocation and the client credentials grant.
//
// The login needs no JavaScript, so that a test's scripted browser completes it: the user is
// the `login_hint` of the authorization request, or else whatever name the one-field form at
// /interaction/<uid> is posted with; consent is granted without asking.
//
// stdout: the issuer URL on the first line, then one JSON line per event a test counts
// ({"event": "grant", "grant_type": ..., "client_id": ..., "account": ...} for every token
// issued at the token endpoint, and "grant_error", "registration", "revocation"). Tokens and
// secrets are never printed.
//
// Options:
//   --access-token-ttl SECONDS   lifetime of access tokens (default 3600)
//   --scope "a b"                the scopes every loopback resource server offers (default "mcp")
//   --client ID:SECRET           a pre-registered confidential client for the client
//                                credentials grant (repeatable)
//   --login-client ID=URI        a pre-registered public client signing users in with OpenID
//                                Connect (authorization code, PKCE) back to redirect URI URI
//                                (repeatable). Its ID tokens carry a `roles` claim: a user
//                                whose name starts with "admin" holds "manifold-admin".
//   --port N                     the port (default 0: any free one)
import * as crypto from 'node:crypto';
import * as http from 'node:http';
import { Provider } from 'oidc-provider';

function parseArgs(argv) {
  const opts = { accessTokenTtl: 3600, scope: 'mcp', clients: [], loginClients: [], port: 0 };
  for (let i = 0; i < argv.length; i += 1) {
    const value = argv[i + 1];
    switch (argv[i]) {
      case '--access-token-ttl': opts.accessTokenTtl = Number(value); i += 1; break;
      case '--scope': opts.scope = value; i += 1; break;
      case '--client': opts.clients.push(value); i += 1; break;
      case '--login-client': opts.loginClients.push(value); i += 1; break;
      case '--port': opts.port = Number(value); i += 1; break;
      default: throw new Error(`unknown option ${argv[i]}`);
    }
  }
  if (!(opts.accessTokenTtl > 0)) throw new Error('--access-token-ttl must be a positive number of seconds');
  return opts;
}

function emit(event) {
  process.stdout.write(`${JSON.stringify(event)}\n`);
}

// Only resources on this machine are served: a test's upstream is always on a loopback address.
function isLoopbackResource(indicator) {
  try {
    const url = new URL(indicator);
    return url.protocol === 'http:' && ['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname);
  } catch {
    return false;
  }
}

function signingKey() {
  const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: crypto.randomUUID(), use: 'sig', alg: 'RS256' };
}

function preRegisteredClients(specs) {
  return specs.map((spec) => {
    const at = spec.indexOf(':');
    if (at <= 0) throw new Error(`--client wants ID:SECRET, got ${spec}`);
    return {
      client_id: spec.slice(0, at),
      client_secret: spec.slice(at + 1),
      grant_types: ['client_credentials'],
      response_types: [],
      redirect_uris: [],
    };
  });
}

function loginClients(specs) {
  return specs.map((spec) => {
    const at = spec.indexOf('=');
    if (at <= 0) throw new Error(`--login-client wants ID=REDIRECT_URI, got ${spec}`);
    return {
      client_id: spec.slice(0, at),
      token_endpoint_auth_method: 'none',
      grant_types: ['authorization_code'],
      response_types: ['code'],
      redirect_uris: [spec.slice(at + 1)],
    };
  });
}

function configuration(opts) {
  return {
    clients: [...preRegisteredClients(opts.clients), ...loginClients(opts.loginClients)],
    // ID tokens carry the claims of the scopes asked for (here `roles` with `openid`), not only
    // the userinfo endpoint.
    conformIdTokenClaims: false,
    claims: { openid: ['sub', 'roles'] },
    // The resource servers' scopes are listed too: a client registering dynamically names the
    // scopes it will ask for, and only listed ones are accepted there.
    scopes: ['openid', 'offline_access', ...opts.scope.split(' ').filter(Boolean)],
    responseTypes: ['code'],
    jwks: { keys: [signingKey()] },
    cookies: { keys: [crypto.randomBytes(32).toString('base64url')] },
    async findAccount(_ctx, id) {
      const roles = id.startsWith('admin') ? ['viewer', 'manifold-admin'] : ['viewer'];
      return { accountId: id, async claims() { return { sub: id, roles }; } };
    },
    features: {
      devInteractions: { enabled: false },
      registration: { enabled: true },
      introspection: { enabled: true },
      revocation: { enabled: true },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        // A client that names the resource at the authorization endpoint only still gets a
        // token for it at the token endpoint (RFC 8707 lets it leave the parameter out there).
        async useGrantedResource() { return true; },
        async getResourceServerInfo(_ctx, indicator) {
          if (!isLoopbackResource(indicator)) {
            throw new Error(`resource ${indicator} is not served here`);
          }
          return {
            scope: opts.scope,
            accessTokenTTL: opts.accessTokenTtl,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'RS256' } },
          };
        },
      },
    },
    pkce: { required: () => true },
    // Every client allowed the refresh grant gets a refresh token, without asking for the
    // OpenID Connect offline_access scope (an MCP client asks for the resource's scopes only).
    async issueRefreshToken(_ctx, client) {
      return client.grantTypeAllowed('refresh_token');
    },
    ttl: { AccessToken: () => opts.accessTokenTtl, ClientCredentials: () => opts.accessTokenTtl },
  };
}

function logEvents(provider) {
  provider.on('grant.success', (ctx) => emit({
    event: 'grant',
    grant_type: ctx.oidc.params.grant_type,
    client_id: ctx.oidc.client?.clientId,
    account: ctx.oidc.account?.accountId ?? null,
  }));
  provider.on('grant.error', (ctx, error) => emit({
    event: 'grant_error',
    grant_type: ctx.oidc.params?.grant_type,
    error: error.error ?? error.message,
    description: error.error_description,
  }));
  provider.on('registration_create.success', (_ctx, client) => emit({ event: 'registration', client_id: client.clientId }));
  provider.on('revocation.success', () => emit({ event: 'revocation' }));
  provider.on('server_error', (_ctx, error) => process.stderr.write(`server_error: ${error.stack}\n`));
}

function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

async function readForm(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > 16 * 1024) throw new Error('form too large');
    chunks.push(chunk);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

function loginForm(res, uid) {
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
  res.end(`<!doctype html><title>Sign in</title>
<form method="post" action="/interaction/${escapeHtml(uid)}/login">
<label>User <input name="login" autofocus></label> <button type="submit">Sign in</button>
</form>`);
}

async function finishLogin(provider, req, res, accountId) {
  // Not remembered: each test browser starts without a session, so each login is its own.
  const login = { accountId, remember: false };
  await provider.interactionFinished(req, res, { login }, { mergeWithLastSubmission: false });
}

// Consent is granted for whatever the request asked: the scopes and resources it is missing.
async function grantConsent(provider, req, res, details) {
  const { prompt, params, session } = details;
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  const missing = prompt.details;
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const grantId = await grant.save();
  const consent = details.grantId ? {} : { grantId };
  await provider.interactionFinished(req, res, { consent }, { mergeWithLastSubmission: true });
}

async function interaction(provider, req, res, path) {
  const details = await provider.interactionDetails(req, res);
  const name = details.prompt.name;
  if (req.method === 'POST' && path.endsWith('/login') && name === 'login') {
    const form = await readForm(req);
    const user = (form.get('login') ?? '').trim();
    if (!user) return loginForm(res, details.uid);
    return finishLogin(provider, req, res, user);
  }
  if (name === 'login') {
    const hint = details.params.login_hint;
    return hint ? finishLogin(provider, req, res, hint) : loginForm(res, details.uid);
  }
  if (name === 'consent') return grantConsent(provider, req, res, details);
  res.writeHead(400, { 'content-type': 'text/plain' });
  return res.end(`unexpected prompt ${name}`);
}

function handler(provider) {
  const callback = provider.callback();
  return (req, res) => {
    const path = new URL(req.url, 'http://x').pathname;
    if (!path.startsWith('/interaction/')) return callback(req, res);
    return interaction(provider, req, res, path).catch((error) => {
      if (!res.headersSent) res.writeHead(400, { 'content-type': 'text/plain' });
      res.end(`interaction failed: ${error.message}`);
    });
  };
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const server = http.createServer();
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, '127.0.0.1', resolve);
  });
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, configuration(opts));
  logEvents(provider);
  server.on('request', handler(provider));
  process.stdout.write(`${issuer}\n`);
  // Nothing is kept that outlives the process: stop at once, open connections and all.
  const stop = () => process.exit(0);
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((error) => {
  process.stderr.write(`authorization server failed to start: ${error.stack}\n`);
  process.exit(1);
});
