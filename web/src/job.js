// One job: state and why it waits (node by node), tasks, events, live logs,
// curves from its metrics, per-task use, its timeline and its files.
import {get, post, del, query, fileUrl, errorOf} from './api.js';
import {h, replace, table, alertBox, showAlert, fmtTime, fmtBytes, fmtNum} from './dom.js';
import {lineChart, downsample} from './charts.js';
import {LogView} from './logview.js';

const ENDED = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED', 'LOST']);

// "needs ...; 0 of 3 nodes fit: node a has ..., node b ..., and 2 more" ->
// {head: "needs ...; 0 of 3 nodes fit", nodes: ["node a has ...", ...]}.
export function splitReason(reason) {
  const at = reason.search(/: node /);
  if (at < 0) return {head: reason, nodes: []};
  const list = reason.slice(at + 2);
  return {head: reason.slice(0, at), nodes: list.split(/, (?=node |and \d+ more$)/)};
}

function section(id, title, ...body) {
  return h('section', {id, 'aria-labelledby': id + '-h'}, h('h2', {id: id + '-h'}, title), ...body);
}

export function render(main, ctx, idText) {
  const id = Number(idText);
  document.title = `Job ${id} · Ringmaster`;
  const stops = [];
  const box = alertBox();
  const title = h('h1', {id: 'job-title'}, `Job ${id}`);
  const summary = h('dl', {class: 'summary', id: 'job-summary'});
  const reason = h('div', {id: 'job-reason', class: 'reason'});
  const actions = h('div', {class: 'actions'});
  const cancel = h('button', {type: 'button', id: 'job-cancel'}, 'Cancel');
  const remove = h('button', {type: 'button', id: 'job-delete', class: 'danger'}, 'Delete');
  const open = h('a', {class: 'button', id: 'job-open', hidden: true, target: '_blank', rel: 'noopener'}, 'Open notebook');
  actions.append(cancel, remove, open);
  const tasks = h('div', {id: 'job-tasks'});
  const events = h('div', {id: 'job-events'});
  const usage = h('div', {id: 'job-usage'});
  const timeline = h('div', {id: 'job-timeline-bars', class: 'timeline'});
  const timelineSection = section('job-timeline', 'Timeline', timeline);
  const charts = h('div', {class: 'charts', id: 'job-charts'});
  const filesBox = h('div', {id: 'job-files'});
  const rankSel = h('select', {id: 'log-rank'}, h('option', {value: ''}, 'all ranks'));
  const search = h('input', {id: 'log-search', type: 'search'});
  const matchInfo = h('span', {id: 'log-matches', 'aria-live': 'polite'});
  const nextMatch = h('button', {type: 'button', id: 'log-next'}, 'Next match');
  const logs = new LogView('Logs');
  logs.el.id = 'log-view';
  const logStatus = h('p', {id: 'log-status', class: 'hint'});

  main.append(title, box, actions, summary, reason,
    section('job-curves', 'Curves', charts),
    section('job-logs', 'Logs', h('div', {class: 'filters'},
      h('div', {class: 'field'}, h('label', {for: 'log-rank'}, 'Rank'), rankSel),
      h('div', {class: 'field'}, h('label', {for: 'log-search'}, 'Search'), search), nextMatch, matchInfo),
    logs.el, logStatus),
    section('job-tasks-s', 'Tasks', tasks),
    section('job-usage-s', 'Use per task', usage),
    timelineSection,
    section('job-events-s', 'Events', events),
    section('job-files-s', 'Files', filesBox));

  let job = null;
  let ranks = 0;

  // ---- state, tasks, events
  const showJob = (j) => {
    job = j;
    title.textContent = `Job ${j.id}: ${j.name || ''}`;
    replace(summary, ...[['State', j.state + (j.stopping ? ` (${j.stopping})` : '')], ['Kind', j.kind], ['User', j.user],
      ['Replicas', typeof j.replicas === 'object' && j.replicas ? JSON.stringify(j.replicas) : String(j.replicas ?? '')], ['Restarts', `${j.restarts ?? 0} of ${j.max_restarts ?? 0}`],
      ['Created', fmtTime(j.created_at)], ['Started', fmtTime(j.started_at)], ['Finished', fmtTime(j.finished_at)]]
      .flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v || '')]));
    const r = splitReason(j.reason || '');
    replace(reason, h('p', {}, h('strong', {}, 'Reason: '), r.head),
      r.nodes.length ? h('ul', {id: 'job-reason-nodes', 'aria-label': 'Why each node does not fit'},
        r.nodes.map((n) => h('li', {}, n))) : null);
    cancel.disabled = ENDED.has(j.state) || !!j.stopping;
    remove.disabled = !ENDED.has(j.state);
    // A notebook opens for its owner alone (admins get 404: it would run the owner's code in their session).
    if (j.lab_url && j.user === ctx.session.user.name) { open.href = j.lab_url; open.hidden = false; } else open.hidden = true;
    replace(tasks, table('', ['Rank', 'State', 'Reason', 'Node', 'Attempt', 'Exit', 'Started', 'Finished'],
      (j.tasks || []).map((t) => [String(t.rank), t.state, t.reason || '', t.node || '', String(t.attempt ?? ''),
        t.exit_code === null || t.exit_code === undefined ? '' : String(t.exit_code), fmtTime(t.started_at), fmtTime(t.finished_at)])));
    replace(events, table('', ['Time', 'Rank', 'From', 'To', 'Reason'],
      (j.events || []).slice().reverse().map((e) => [fmtTime(e.time), e.rank === undefined ? '' : String(e.rank), e.from || '', e.to || '', e.reason || ''])));
    const n = Math.max(Number(j.replicas) || 1, (j.tasks || []).reduce((m, t) => Math.max(m, t.rank + 1), 0));
    if (n !== ranks) {
      ranks = n;
      replace(rankSel, h('option', {value: ''}, 'all ranks'), Array.from({length: n}, (_, i) => h('option', {value: String(i)}, `rank ${i}`)));
    }
  };
  const loadJob = async () => {
    try {
      showJob(await get(`/api/v1/jobs/${id}`));
    } catch (err) {
      if (err.status === 404) {
        replace(main, h('h1', {}, 'Not found'), h('p', {id: 'not-found'}, `Job ${id} was not found.`));
        stopAll();
        throw err;
      }
      showAlert(box, err.message);
    }
  };

  cancel.addEventListener('click', async () => {
    if (!confirm(`Cancel job ${id}?`)) return;
    try { await post(`/api/v1/jobs/${id}/cancel`); showAlert(box, 'Cancelling.', true); await loadJob(); } catch (err) { showAlert(box, err.message); }
  });
  remove.addEventListener('click', async () => {
    if (!confirm(`Delete job ${id} and its logs?`)) return;
    try { await del(`/api/v1/jobs/${id}`); ctx.navigate('#/jobs'); } catch (err) { showAlert(box, err.message); }
  });

  // ---- logs (ndjson follow stream)
  const abort = new AbortController();
  const follow = async () => {
    logStatus.textContent = 'Following the logs…';
    try {
      const resp = await fetch(`/api/v1/jobs/${id}/logs?follow=1`, {credentials: 'same-origin', signal: abort.signal});
      if (!resp.ok) throw await errorOf(resp);
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      let partial = {};
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buf += value;
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const rec = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (!rec) continue;
          let r;
          try { r = JSON.parse(rec); } catch (_) { continue; }
          if (r.end) { performance.mark('rm-job-logs-end'); logStatus.textContent = `The job ended: ${r.state}${r.reason ? ' (' + r.reason + ')' : ''}.`; continue; }
          if (r.line === undefined) continue;
          const key = r.rank;
          if (r.partial) { partial[key] = (partial[key] || '') + r.line; continue; }
          logs.append(r.rank, (partial[key] || '') + r.line);
          delete partial[key];
        }
      }
      if (!logStatus.textContent.startsWith('The job ended')) logStatus.textContent = 'The log stream ended.';
    } catch (err) {
      if (err.name !== 'AbortError') logStatus.textContent = 'Logs: ' + err.message;
    }
  };
  rankSel.addEventListener('change', () => logs.setRank(rankSel.value));
  let matchAt = -1;
  const updateMatches = () => {
    logs.setSearch(search.value);
    const m = logs.matches();
    matchInfo.textContent = search.value ? `${m.length} matching lines` : '';
    return m;
  };
  search.addEventListener('input', () => { matchAt = -1; updateMatches(); });
  nextMatch.addEventListener('click', () => {
    const m = updateMatches();
    if (!m.length) return;
    matchAt = (matchAt + 1) % m.length;
    logs.scrollToRow(m[matchAt]);
  });

  // ---- curves from metrics (rank 0)
  let chartObjs = null;
  const loadMetrics = async () => {
    const body = await get(`/api/v1/jobs/${id}/metrics${query({rank: 0, limit: 100000})}`);
    const series = body.series || [];
    const want = [['loss', 'Loss'], ['accuracy', 'Accuracy'], ['samples_per_s', 'Samples/s']];
    const xs = [];
    const cols = want.map(() => []);
    series.forEach((r, i) => {
      if (!want.some(([k]) => typeof r[k] === 'number')) return;
      xs.push(typeof r.step === 'number' ? r.step : i);
      want.forEach(([k], c) => cols[c].push(typeof r[k] === 'number' ? r[k] : null));
    });
    if (!xs.length) {
      if (!chartObjs) replace(charts, h('p', {class: 'hint'}, 'No metrics yet.'));
      return;
    }
    // Steps restart per epoch in some trainers: plot against the record's index then.
    const monotone = xs.every((x, i) => i === 0 || x >= xs[i - 1]);
    const x = monotone ? xs : xs.map((_, i) => i);
    if (!chartObjs) {
      replace(charts);
      chartObjs = [];
      // Every box first, so that each chart is sized to its place in the grid.
      const boxes = want.map(([k, label]) => charts.appendChild(
        h('div', {class: 'chart', id: 'chart-' + k, role: 'img', 'aria-label': label + ' curve'})));
      for (let c = 0; c < want.length; c++) {
        chartObjs.push(await lineChart(boxes[c], want[c][1], monotone ? 'step' : 'record', [want[c][1]]));
      }
    }
    let drawn = 0;
    want.forEach((_, c) => {
      const [dx, dy] = downsample(x, cols[c]);
      chartObjs[c].set(dx, [dy]);
      drawn = Math.max(drawn, dx.length);
    });
    charts.dataset.drawn = String(drawn);
    if (!charts.dataset.points) performance.mark('rm-job-charts');
    charts.dataset.points = String(xs.length);
  };

  // ---- per-task use (latest of each series)
  const loadUsage = async () => {
    let body;
    try { body = await get(`/api/v1/jobs/${id}/usage`); } catch (err) { replace(usage, h('p', {class: 'hint'}, err.message)); return; }
    const last = (s) => (s && s.length ? s[s.length - 1][1] : null);
    replace(usage, table('', ['Rank', 'Node', 'State', 'CPU cores', 'Memory', 'GPU util', 'Samples/s'],
      (body.tasks || []).map((t) => [String(t.rank), t.node || '', t.state || '', fmtNum(last(t.series.cpu_cores)),
        fmtBytes(last(t.series.memory_bytes)), fmtNum(last(t.series.gpu_util), 0), fmtNum(last(t.series.samples_per_s), 1)])));
  };

  // ---- timeline: a bar per phase, a row per rank
  const loadTimeline = async () => {
    let body;
    try { body = await get(`/api/v1/jobs/${id}/timeline`); } catch (err) {
      if (err.status === 404) timelineSection.hidden = true;
      return;
    }
    const phases = body.phases || [];
    if (!phases.length) { replace(timeline, h('p', {class: 'hint'}, 'Nothing yet.')); return; }
    const now = Date.now();
    const t0 = Math.min(...phases.map((p) => Date.parse(p.start)));
    const t1 = Math.max(...phases.map((p) => (p.end ? Date.parse(p.end) : now)));
    const span = Math.max(1, t1 - t0);
    const byRank = new Map();
    for (const p of phases) {
      const k = p.rank === undefined ? 'job' : `rank ${p.rank}`;
      if (!byRank.has(k)) byRank.set(k, []);
      byRank.get(k).push(p);
    }
    replace(timeline, [...byRank.entries()].map(([k, ps]) => h('div', {class: 'tl-row'},
      h('span', {class: 'tl-label'}, k),
      h('div', {class: 'tl-track'}, ps.map((p) => {
        const s = Date.parse(p.start);
        const e = p.end ? Date.parse(p.end) : now;
        const secs = ((e - s) / 1000).toFixed(1);
        const bar = h('span', {class: 'tl-bar tl-' + p.phase, title: `${p.phase}${p.attempt ? ' (attempt ' + p.attempt + ')' : ''}: ${secs}s`},
          h('span', {class: 'sr-only'}, `${p.phase} ${secs}s`));
        bar.style.left = ((s - t0) / span * 100) + '%';
        bar.style.width = Math.max(0.5, (e - s) / span * 100) + '%';
        return bar;
      })))),
    h('p', {class: 'tl-legend'}, ['queued', 'staging', 'pulling', 'starting', 'running', 'checkpoint', 'uploading']
      .map((p) => h('span', {class: 'tl-key'}, h('span', {class: 'tl-swatch tl-' + p}), p))));
  };

  // ---- files of the job
  const loadFiles = async () => {
    let body;
    try { body = await get('/api/v1/files' + query({prefix: `jobs/${id}/`})); } catch (err) { replace(filesBox, h('p', {class: 'hint'}, err.message)); return; }
    const list = body.files || [];
    replace(filesBox, list.length ? table('', ['File', 'Size', 'Modified'], list.map((f) => [
      h('a', {href: fileUrl(f.path), download: f.path.split('/').pop()}, f.path.slice(`jobs/${id}/`.length)),
      fmtBytes(f.size), fmtTime(f.mtime)])) : h('p', {class: 'hint'}, 'No files yet.'));
  };

  const stopAll = () => { abort.abort(); stops.forEach((s) => s()); stops.length = 0; if (chartObjs) chartObjs.forEach((c) => c.destroy()); };
  (async () => {
    try { await loadJob(); } catch (_) { return; }
    follow();
    let ended = false;
    stops.push(ctx.poll(async () => {
      if (ended) return;
      await loadJob();
      await Promise.all([loadUsage(), loadTimeline()]);
      if (job && ENDED.has(job.state)) ended = true;
    }, 2000));
    let metricsDone = false;
    stops.push(ctx.poll(async () => {
      if (metricsDone) return;
      const wasEnded = job && ENDED.has(job.state);
      await Promise.all([loadMetrics().catch((err) => replace(charts, h('p', {class: 'hint'}, err.message))), loadFiles()]);
      if (wasEnded) metricsDone = true;
    }, 5000));
  })();
  return stopAll;
}
