// The dashboard's shell: the session, the hash router and polling that runs
// only while the tab is visible. Each page module exports render(main, ctx)
// and returns a function that stops what the page started.
import {get, del, setCsrf, setUnauthenticatedHandler} from './api.js';
import {h, replace} from './dom.js';
import * as jobs from './jobs.js';
import * as job from './job.js';
import * as submit from './submit.js';
import * as nodes from './nodes.js';
import * as files from './files.js';
import * as admin from './admin.js';
import * as login from './login.js';

const main = document.getElementById('main');
let session = null;
let stopPage = () => {};

function setSession(s) {
  session = s;
  setCsrf(s ? s.csrf : '');
  document.getElementById('top').hidden = !s;
  document.getElementById('who').textContent = s ? s.user.name + (s.user.role === 'admin' ? ' (admin)' : '') : '';
  document.getElementById('admin-link').hidden = !(s && s.user.role === 'admin');
}

// poll(fn, ms): calls fn now and every ms while the tab is visible; returns a stop function.
function poll(fn, ms) {
  let timer = null;
  let stopped = false;
  let running = false;
  const tick = async () => {
    timer = null;
    if (stopped) return;
    if (document.visibilityState === 'visible' && !running) {
      running = true;
      try { await fn(); } catch (err) { console.error(err); }
      running = false;
    }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  const onVisible = () => {
    if (document.visibilityState === 'visible' && !stopped && timer !== null) {
      clearTimeout(timer);
      tick();
    }
  };
  document.addEventListener('visibilitychange', onVisible);
  tick();
  return () => {
    stopped = true;
    if (timer !== null) clearTimeout(timer);
    document.removeEventListener('visibilitychange', onVisible);
  };
}

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, qs] = raw.split('?');
  return {parts: path.split('/').filter(Boolean), params: new URLSearchParams(qs || '')};
}

function route() {
  stopPage();
  stopPage = () => {};
  const {parts, params} = parseHash();
  const page = parts[0] || 'jobs';
  if (!session && page !== 'login') {
    location.replace('#/login');
    return;
  }
  for (const a of document.querySelectorAll('[data-nav]')) {
    if (a.dataset.nav === page) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const ctx = {session, poll, params, navigate: (hash) => { location.hash = hash; }, onLogin};
  replace(main);
  let stop;
  if (page === 'login') stop = login.render(main, ctx);
  else if (page === 'jobs' && parts[1]) stop = job.render(main, ctx, parts[1]);
  else if (page === 'jobs') stop = jobs.render(main, ctx);
  else if (page === 'submit') stop = submit.render(main, ctx);
  else if (page === 'nodes') stop = nodes.render(main, ctx);
  else if (page === 'files') stop = files.render(main, ctx);
  else if (page === 'admin' && session.user.role === 'admin') stop = admin.render(main, ctx);
  else {
    document.title = 'Not found · Ringmaster';
    main.appendChild(h('h1', {}, 'Not found'));
    main.appendChild(h('p', {}, 'There is no such page. ', h('a', {href: '#/jobs'}, 'Go to the jobs.')));
  }
  if (typeof stop === 'function') stopPage = stop;
}

function onLogin(s) {
  setSession(s);
  const back = sessionStorage.getItem('rm-after-login');
  sessionStorage.removeItem('rm-after-login');
  location.hash = back && !back.startsWith('#/login') ? back : '#/jobs';
}

setUnauthenticatedHandler(() => {
  if (!session) return;
  setSession(null);
  sessionStorage.setItem('rm-after-login', location.hash);
  location.hash = '#/login';
});

document.getElementById('logout').addEventListener('click', async () => {
  try { await del('/api/v1/session'); } catch (_) { /* ended already */ }
  setSession(null);
  location.hash = '#/login';
});

// The skip link focuses <main> without touching the hash the router reads.
document.getElementById('skip').addEventListener('click', (ev) => {
  ev.preventDefault();
  main.focus();
});

window.addEventListener('hashchange', route);

(async () => {
  try {
    setSession(await get('/api/v1/session', {quiet401: true}));
  } catch (_) {
    setSession(null);
    if (!location.hash.startsWith('#/login')) sessionStorage.setItem('rm-after-login', location.hash);
  }
  route();
})();
