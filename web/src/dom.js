// Tiny element helpers. Text is only ever set with textContent: data from the
// server (job names, log lines, file names) can never become markup here.

// h('a', {href: '#/jobs', class: 'x', on: {click: fn}}, 'text', child, ...)
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'on') {
      for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    } else if (k === 'class') {
      el.className = v;
    } else if (k === 'text') {
      el.textContent = v;
    } else if (k in el && typeof v !== 'string') {
      el[k] = v;
    } else {
      el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function replace(el, ...children) {
  clear(el);
  return append(el, children);
}

// A table with a caption, headers and rows (arrays of cells: text or nodes).
export function table(caption, headers, rows, cls) {
  return h('div', {class: 'table-wrap'},
    h('table', {class: cls || ''},
      caption ? h('caption', {}, caption) : null,
      h('thead', {}, h('tr', {}, headers.map((t) => h('th', {scope: 'col'}, t)))),
      h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', {}, c)))))));
}

export function fmtBytes(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = Number(n);
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? String(v) : v.toFixed(v < 10 ? 1 : 0)) + ' ' + units[i];
}

export function fmtAge(iso) {
  if (!iso) return '';
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return Math.floor(s) + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm';
  if (s < 86400) return Math.floor(s / 3600) + 'h';
  return Math.floor(s / 86400) + 'd';
}

export function fmtTime(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toLocaleString();
}

export function fmtNum(v, digits) {
  if (v === null || v === undefined || v === '') return '';
  const n = Number(v);
  return Number.isFinite(n) ? n.toFixed(digits === undefined ? 2 : digits) : String(v);
}

// An aria-live region for errors and results of actions.
export function alertBox() {
  return h('div', {class: 'alert', role: 'alert', 'aria-live': 'assertive'});
}

export function showAlert(box, message, ok) {
  box.className = 'alert' + (message ? (ok ? ' ok' : ' err') : '');
  box.textContent = message || '';
}
