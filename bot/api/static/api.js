// Same-origin JSON calls. The session cookie rides along by itself (HttpOnly: no script reads it);
// every write carries the CSRF token the login answered.
let csrf = null;
export function setCsrf(token) { csrf = token; }

export class ApiError extends Error {
  constructor(status, code, message, data) {
    super(message || code || String(status)); this.status = status; this.code = code; this.data = data;
  }
}

export async function api(method, path, body, headers = {}) {
  const h = {...headers};
  if (body !== undefined) h['Content-Type'] = 'application/json';
  if (method !== 'GET' && method !== 'HEAD' && csrf) h['X-CSRF-Token'] = csrf;
  const resp = await fetch(path, {method, headers: h, credentials: 'same-origin',
    body: body === undefined ? undefined : JSON.stringify(body)});
  const ctype = resp.headers.get('Content-Type') || '';
  const data = ctype.startsWith('application/json') ? await resp.json() : await resp.text();
  if (!resp.ok) throw new ApiError(resp.status, data?.error?.code, data?.error?.message, data);
  return data;
}

export const get = (path, params) => {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== '' && v !== null && v !== undefined) q.set(k, v);
  const qs = q.toString();
  return api('GET', qs ? `${path}?${qs}` : path);
};
