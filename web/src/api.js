// Fetch wrapper for the REST API: same-origin, the session cookie, the CSRF
// header on every change, and errors that carry the server's message.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let csrf = '';
let onUnauthenticated = () => {};

export function setCsrf(token) { csrf = token || ''; }
export function csrfToken() { return csrf; }
export function setUnauthenticatedHandler(fn) { onUnauthenticated = fn; }

export function changeHeaders(method) {
  return method === 'GET' || method === 'HEAD' || !csrf ? {} : {'X-CSRF-Token': csrf};
}

export async function errorOf(resp) {
  let code = '';
  let message = resp.status + ' ' + resp.statusText;
  try {
    const body = await resp.json();
    if (body && body.error) {
      code = body.error.code || '';
      message = body.error.message || message;
    }
  } catch (_) { /* not JSON: keep the status line */ }
  return new ApiError(resp.status, code, message);
}

// request('POST', '/api/v1/jobs', body, {contentType, signal, raw, quiet401})
export async function request(method, path, body, opts = {}) {
  const headers = changeHeaders(method);
  let payload = body;
  if (body !== undefined && typeof body !== 'string' && !(body instanceof Blob)) {
    headers['Content-Type'] = 'application/json';
    payload = JSON.stringify(body);
  } else if (typeof body === 'string') {
    headers['Content-Type'] = opts.contentType || 'application/json';
  }
  const resp = await fetch(path, {method, headers, body: payload, credentials: 'same-origin', signal: opts.signal});
  if (!resp.ok) {
    const err = await errorOf(resp);
    if (resp.status === 401 && !opts.quiet401) onUnauthenticated(err);
    throw err;
  }
  if (opts.raw) return resp;
  const type = resp.headers.get('Content-Type') || '';
  return type.includes('json') ? resp.json() : resp.text();
}

export const get = (path, opts) => request('GET', path, undefined, opts);
export const post = (path, body, opts) => request('POST', path, body === undefined ? {} : body, opts);
export const del = (path, opts) => request('DELETE', path, undefined, opts);

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '' && v !== false) q.set(k, v === true ? '1' : String(v));
  }
  const s = q.toString();
  return s ? '?' + s : '';
}

// A file's URL: each path segment percent-encoded, the slashes kept.
export function fileUrl(path) {
  return '/api/v1/files/' + path.split('/').map(encodeURIComponent).join('/');
}
