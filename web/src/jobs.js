// The jobs list: filters, server-side paging and live updates every 2 s.
// Rows are kept per job and replaced only when what they show changed, so a
// poll neither rebuilds the table nor moves the keyboard focus.
import {get, query} from './api.js';
import {h, replace, alertBox, showAlert, fmtAge, fmtBytes, fmtNum} from './dom.js';

const PAGE = 50;
const STATES = ['', 'PENDING,RUNNING', 'PENDING', 'SCHEDULED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'LOST'];
const KINDS = ['', 'train', 'distributed', 'dev'];
// Filters survive leaving the page and coming back.
const filters = {state: '', kind: '', name: '', user: '', all: false, offset: 0};
let marked = false;

function select(id, label, values, value) {
  const s = h('select', {id, name: id},
    values.map((v) => h('option', {value: v, selected: v === value}, v === '' ? 'any' : v.replace(',', ' or '))));
  return h('div', {class: 'field'}, h('label', {for: id}, label), s);
}

function usageText(u) {
  if (!u) return '';
  const parts = [];
  if (u.cpu_cores !== undefined && u.cpu_cores !== null) parts.push(fmtNum(u.cpu_cores, 1) + ' cpu');
  if (u.memory_bytes) parts.push(fmtBytes(u.memory_bytes));
  if (u.gpu_util !== undefined && u.gpu_util !== null) parts.push(fmtNum(u.gpu_util * (u.gpu_util <= 1 ? 100 : 1), 0) + '% gpu');
  return parts.join(', ');
}

export function render(main, ctx) {
  document.title = 'Jobs · Ringmaster';
  const admin = ctx.session.user.role === 'admin';
  const box = alertBox();
  const form = h('form', {class: 'filters', role: 'search', 'aria-label': 'Filter jobs'},
    select('f-state', 'State', STATES, filters.state),
    select('f-kind', 'Kind', KINDS, filters.kind),
    h('div', {class: 'field'}, h('label', {for: 'f-name'}, 'Name contains'),
      h('input', {id: 'f-name', name: 'name', type: 'search', value: filters.name})),
    admin ? h('div', {class: 'field'}, h('label', {for: 'f-user'}, 'User'),
      h('input', {id: 'f-user', name: 'user', value: filters.user})) : null,
    admin ? h('div', {class: 'field check'}, h('input', {id: 'f-all', type: 'checkbox', checked: filters.all}),
      h('label', {for: 'f-all'}, 'Every user\'s jobs')) : null,
    h('button', {type: 'submit', id: 'f-apply'}, 'Apply'));
  const headers = ['ID', 'Name'].concat(admin ? ['User'] : [], ['Kind', 'State', 'Queue', 'Age', 'Usage']);
  const tbody = h('tbody', {id: 'jobs-body'});
  const tbl = h('div', {class: 'table-wrap'}, h('table', {id: 'jobs-table'},
    h('caption', {class: 'sr-only'}, 'Jobs, newest first'),
    h('thead', {}, h('tr', {}, headers.map((t) => h('th', {scope: 'col'}, t)))), tbody));
  const count = h('span', {id: 'jobs-count', 'aria-live': 'polite'});
  const prev = h('button', {type: 'button', id: 'jobs-prev'}, 'Previous');
  const next = h('button', {type: 'button', id: 'jobs-next'}, 'Next');
  const empty = h('p', {id: 'jobs-empty', hidden: true}, 'No jobs match.');
  main.append(h('div', {class: 'page-head'}, h('h1', {}, 'Jobs'), h('a', {class: 'button', href: '#/submit'}, 'Submit a job')),
    form, box, tbl, empty, h('div', {class: 'pager'}, prev, count, next));

  const rows = new Map();  // id -> {sig, tr}
  let lastLen = 0;
  let lastTotal;

  const rowFor = (j) => {
    const sig = JSON.stringify([j.name, j.user, j.kind, j.state, j.queue_position, j.usage, j.stopping, fmtAge(j.created_at)]);
    const old = rows.get(j.id);
    if (old && old.sig === sig) return old.tr;
    const cells = [h('a', {href: '#/jobs/' + j.id}, String(j.id)), h('a', {href: '#/jobs/' + j.id}, j.name || '')];
    if (admin) cells.push(j.user || '');
    cells.push(j.kind || '', h('span', {class: 'state state-' + String(j.state).toLowerCase()}, j.state + (j.stopping ? ' (stopping)' : '')),
      j.state === 'PENDING' && j.queue_position ? '#' + j.queue_position : '', fmtAge(j.created_at),
      j.state === 'RUNNING' ? usageText(j.usage) : '');
    const tr = h('tr', {'data-id': j.id}, cells.map((c) => h('td', {}, c)));
    rows.set(j.id, {sig, tr});
    return tr;
  };

  const load = async () => {
    const params = {limit: PAGE, offset: filters.offset || undefined, state: filters.state, kind: filters.kind,
      name: filters.name, user: admin ? filters.user : '', all: admin && filters.all};
    let body;
    try {
      body = await get('/api/v1/jobs' + query(params));
      showAlert(box, '');
    } catch (err) {
      showAlert(box, err.message);
      return;
    }
    const list = body.jobs || [];
    const wanted = list.map(rowFor);
    const keep = new Set(list.map((j) => j.id));
    for (const id of rows.keys()) if (!keep.has(id)) rows.delete(id);
    // Touch the DOM only where a row differs from the one in its place.
    wanted.forEach((tr, i) => {
      if (tbody.children[i] !== tr) tbody.insertBefore(tr, tbody.children[i] || null);
    });
    while (tbody.children.length > wanted.length) tbody.removeChild(tbody.lastChild);
    empty.hidden = list.length > 0;
    lastLen = list.length;
    lastTotal = body.total;
    const from = list.length ? filters.offset + 1 : 0;
    const to = filters.offset + list.length;
    count.textContent = typeof body.total === 'number' ? `${from}–${to} of ${body.total}` : (list.length ? `${from}–${to}` : '');
    prev.disabled = filters.offset === 0;
    next.disabled = typeof lastTotal === 'number' ? to >= lastTotal : lastLen < PAGE;
    if (!marked) {
      marked = true;
      performance.mark('rm-interactive');
    }
  };

  let stop = ctx.poll(load, 2000);
  const restart = () => {
    stop();
    stop = ctx.poll(load, 2000);
  };
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    filters.state = form.querySelector('#f-state').value;
    filters.kind = form.querySelector('#f-kind').value;
    filters.name = form.querySelector('#f-name').value.trim();
    if (admin) {
      filters.user = form.querySelector('#f-user').value.trim();
      filters.all = form.querySelector('#f-all').checked;
    }
    filters.offset = 0;
    restart();
  });
  for (const id of ['#f-state', '#f-kind']) form.querySelector(id).addEventListener('change', () => form.requestSubmit());
  prev.addEventListener('click', () => { filters.offset = Math.max(0, filters.offset - PAGE); restart(); });
  next.addEventListener('click', () => { filters.offset += PAGE; restart(); });
  return () => { stop(); replace(tbody); };
}
