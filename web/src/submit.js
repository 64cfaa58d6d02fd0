// Submit: a YAML editor with line numbers, starting from an example that the
// server serves as an asset. A 400's message names a field ("resources.gpu:
// ..."): it is shown at that field's line and in the alert region.
import {get, request} from './api.js';
import {h, replace, alertBox, showAlert} from './dom.js';

const EXAMPLES = ['hello.yaml', 'fmnist.yaml', 'ddp_fmnist.yaml', 'fmnist-torch.yaml', 'gpu_smoke.yaml'];
let draft = null;  // the text being edited survives leaving the page

// The 0-based line of a dotted field path ("resources.gpu", "inputs[0].from")
// in YAML text, found by indentation; -1 if not found.
export function fieldLine(text, path) {
  const keys = path.replace(/\[\d+\]/g, '').split('.').filter(Boolean);
  if (!keys.length) return -1;
  const lines = text.split('\n');
  let depth = 0;
  let indent = -1;
  let best = -1;
  for (let i = 0; i < lines.length && depth < keys.length; i++) {
    const m = /^(\s*)(?:-\s+)?([A-Za-z0-9_.-]+)\s*:/.exec(lines[i]);
    if (!m) continue;
    const ind = m[1].length;
    if (depth > 0 && ind <= indent) break;  // left the parent's block
    if (m[2] === keys[depth]) {
      best = i;
      indent = ind;
      depth++;
    }
  }
  return best;
}

export function render(main, ctx) {
  document.title = 'Submit · Ringmaster';
  const box = alertBox();
  box.id = 'submit-error';
  const pick = h('select', {id: 'submit-example'}, h('option', {value: ''}, 'choose an example'),
    EXAMPLES.map((e) => h('option', {value: e}, e)));
  const gutter = h('div', {class: 'gutter', 'aria-hidden': 'true'});
  const editor = h('textarea', {id: 'submit-yaml', spellcheck: 'false', wrap: 'off', 'aria-describedby': 'submit-error',
    autocapitalize: 'off', autocomplete: 'off'});
  const fieldMsg = h('div', {class: 'field-error', id: 'submit-field-error', hidden: true});
  const button = h('button', {type: 'submit', id: 'submit-button'}, 'Submit');
  const form = h('form', {class: 'submit', 'aria-labelledby': 'submit-title'},
    h('h1', {id: 'submit-title'}, 'Submit a job'),
    h('div', {class: 'field'}, h('label', {for: 'submit-example'}, 'Start from'), pick),
    h('label', {for: 'submit-yaml'}, 'Job spec (YAML)'),
    h('div', {class: 'editor'}, gutter, editor), fieldMsg, box, button);
  main.appendChild(form);

  let errLine = -1;
  const numbers = () => {
    const n = editor.value.split('\n').length;
    if (gutter.childElementCount !== n || gutter.dataset.err !== String(errLine)) {
      replace(gutter, Array.from({length: n}, (_, i) => h('div', {class: i === errLine ? 'ln err' : 'ln'}, String(i + 1))));
      gutter.dataset.err = String(errLine);
    }
    gutter.scrollTop = editor.scrollTop;
  };
  const markError = (message) => {
    const m = /^([A-Za-z_][\w.[\]-]*): /.exec(message);
    errLine = m ? fieldLine(editor.value, m[1]) : -1;
    if (errLine >= 0) {
      fieldMsg.hidden = false;
      fieldMsg.textContent = `Line ${errLine + 1}: ${message}`;
      const lineHeight = parseFloat(getComputedStyle(editor).lineHeight) || 18;
      editor.scrollTop = Math.max(0, errLine * lineHeight - editor.clientHeight / 2);
      const start = editor.value.split('\n').slice(0, errLine).join('\n').length + (errLine ? 1 : 0);
      editor.setSelectionRange(start, start);
    } else {
      fieldMsg.hidden = true;
    }
    numbers();
  };
  editor.addEventListener('input', () => { draft = editor.value; numbers(); });
  editor.addEventListener('scroll', () => { gutter.scrollTop = editor.scrollTop; });
  pick.addEventListener('change', async () => {
    if (!pick.value) return;
    try {
      editor.value = await get('/assets/' + pick.value);
      draft = editor.value;
      errLine = -1;
      fieldMsg.hidden = true;
      showAlert(box, '');
      numbers();
    } catch (err) { showAlert(box, err.message); }
  });
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    showAlert(box, '');
    button.disabled = true;
    try {
      const r = await request('POST', '/api/v1/jobs', editor.value, {contentType: 'application/yaml'});
      draft = null;
      ctx.navigate('#/jobs/' + r.id);
    } catch (err) {
      showAlert(box, err.message);
      markError(err.message);
    } finally {
      button.disabled = false;
    }
  });
  editor.value = draft || '';
  numbers();
}
