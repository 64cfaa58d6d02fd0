// Nodes: capacity, allocation, live use, GPUs, labels, executors, network and
// state, refreshed every 2 s.
import {get} from './api.js';
import {h, replace, table, alertBox, showAlert, fmtBytes, fmtNum} from './dom.js';

const pct = (v) => (v === null || v === undefined ? '' : fmtNum(v * (v <= 1 ? 100 : 1), 0) + '%');

export function render(main, ctx) {
  document.title = 'Nodes · Ringmaster';
  const box = alertBox();
  const list = h('div', {id: 'nodes-list'});
  main.append(h('h1', {}, 'Nodes'), box, list);
  const load = async () => {
    let body;
    try { body = await get('/api/v1/nodes'); showAlert(box, ''); } catch (err) { showAlert(box, err.message); return; }
    const nodes = body.nodes || [];
    replace(list, nodes.length ? table('Nodes', ['Name', 'State', 'CPU (alloc/total)', 'Memory (alloc/total)', 'GPUs', 'Use',
      'Labels', 'Executors', 'Network', 'Agent'], nodes.map((n) => {
      const a = n.allocated || {};
      const u = n.usage || {};
      return [n.name, n.state + (n.cordon ? ` (${n.cordon})` : '') + (n.schedulable === false && !n.cordon ? ' (not schedulable)' : ''),
        `${fmtNum(a.cpu, 1)} / ${fmtNum(n.cpu, 1)}`, `${fmtBytes(a.memory_bytes || 0)} / ${fmtBytes(n.memory_bytes)}`,
        (n.gpus || []).length ? `${a.gpus || 0} / ${n.gpus.length}: ` + n.gpus.map((g) => `${g.index} ${g.model || ''}`).join(', ') : '—',
        [`cpu ${pct(u.cpu_util)}`, `mem ${fmtBytes(u.memory_used_bytes)}`, u.gpu_util !== undefined ? `gpu ${pct(u.gpu_util)}` : '',
          `net ${fmtBytes(u.net_rx_bps)}/s in, ${fmtBytes(u.net_tx_bps)}/s out`, `${a.tasks || 0} tasks`].filter(Boolean).join(' · '),
        Object.entries(n.labels || {}).map(([k, v]) => `${k}=${v}`).join(', '),
        [].concat(n.executors || []).join(', '), n.network + (n.overlay_block ? ` ${n.overlay_block}` : '') + (n.address ? ` · ${n.address}` : ''),
        `${n.agent_version || ''} · ${n.last_heartbeat_age_ms !== undefined ? Math.round(n.last_heartbeat_age_ms / 1000) + 's ago' : ''}`];
    }), 'nodes') : h('p', {}, 'No nodes have registered.'));
  };
  return ctx.poll(load, 2000);
}
