// The console's one way to the server: the same /v1/ API and ACLs as the CLI, with the token in
// the X-Tessera-Token header (as src/api/client.cc sends it). The token lives in this tab's
// sessionStorage only: never a cookie (so no request carries it unasked, and CSRF has nothing
// to ride on) and never localStorage (it goes when the tab closes).

const kTokenKey = 'tessera.token';

export interface Session {
  token: string;
  tenant: string; // The token's tenant; "" for an operator (admin) token.
  chroot: string; // This listener's tenant (X-Tessera-Chroot), "" on a plain listener.
  displayName: string;
  policies: string[];
  expireTime: string | null;
}

export class ApiError extends Error {
  constructor(readonly status: number, readonly errors: string[], readonly path: string) {
    super(errors.length > 0 ? errors.join('; ') : `HTTP ${status}`);
  }
  // The server refused the token itself (expired, revoked, unknown): back to the login form.
  get tokenRefused(): boolean {
    return this.status === 403 && this.errors.some((e) => e.includes('invalid, revoked or expired'));
  }
}

let current: Session | null = null;
let onLogout: (reason: string) => void = () => {};

export function setLogoutHandler(f: (reason: string) => void) {
  onLogout = f;
}

export function session(): Session | null {
  return current;
}

export function storedToken(): string | null {
  return sessionStorage.getItem(kTokenKey);
}

export function logout(reason = '') {
  sessionStorage.removeItem(kTokenKey);
  current = null;
  onLogout(reason);
}

async function send(token: string, method: string, path: string, body?: unknown): Promise<Response> {
  const headers: Record<string, string> = { 'X-Tessera-Token': token };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
  }
  return fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'omit',
    cache: 'no-store',
  });
}

async function decode<T>(resp: Response, path: string): Promise<T> {
  const text = await resp.text();
  let json: unknown = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    // Not JSON: the status says what happened.
  }
  if (!resp.ok) {
    const errors = (json as { errors?: string[] } | null)?.errors ?? [text.trim() || resp.statusText];
    throw new ApiError(resp.status, errors, path);
  }
  return json as T;
}

// Logs in: looks the token up (any token may, GET /v1/auth/token/lookup-self) and learns its
// tenant and whether this listener is chrooted to one.
export async function login(token: string): Promise<Session> {
  const path = '/v1/auth/token/lookup-self';
  let resp: Response;
  try {
    resp = await send(token, 'GET', path);
  } catch (e) {
    throw new ApiError(0, [`the server cannot be reached (${String(e)})`], path);
  }
  const data = (await decode<{ data: Record<string, unknown> }>(resp, path)).data;
  const chroot = resp.headers.get('X-Tessera-Chroot') ?? '';
  const s: Session = {
    token,
    tenant: chroot || String(data.tenant ?? ''),
    chroot,
    displayName: String(data.display_name ?? ''),
    policies: (data.policies as string[]) ?? [],
    expireTime: (data.expire_time as string | null) ?? null,
  };
  sessionStorage.setItem(kTokenKey, token);
  current = s;
  return s;
}

export async function call<T = any>(method: string, path: string, body?: unknown): Promise<T> {
  const s = current;
  if (!s) {
    throw new ApiError(403, ['not logged in'], path);
  }
  let resp: Response;
  try {
    resp = await send(s.token, method, path, body);
  } catch (e) {
    throw new ApiError(0, [`the server cannot be reached (${String(e)})`], path);
  }
  try {
    return await decode<T>(resp, path);
  } catch (e) {
    if (e instanceof ApiError && e.tokenRefused) {
      logout('The server refused your token: it expired or was revoked. Log in again.');
    }
    throw e;
  }
}

export const get = <T = any>(path: string) => call<T>('GET', path);

// A path in tenant `t`'s scope: /v1/tenants/<t>/<rest>, or /v1/<rest> on its chroot listener.
export function tenantPath(t: string, rest: string): string {
  if (current?.chroot) {
    return `/v1/${rest}`;
  }
  return `/v1/tenants/${encodeURIComponent(t)}/${rest}`;
}

export const isOperator = () => current !== null && current.tenant === '' && !current.chroot;

// A workload or key name in a path: each segment encoded.
export const encPath = (p: string) => p.split('/').map(encodeURIComponent).join('/');
