// Files: browse by prefix, upload with a progress bar (a dry run first, then
// the File streamed by XMLHttpRequest), download, delete.
import {get, del, query, fileUrl, changeHeaders, errorOf} from './api.js';
import {h, replace, table, alertBox, showAlert, fmtBytes, fmtTime} from './dom.js';

let prefix = null;

export function render(main, ctx) {
  document.title = 'Files · Ringmaster';
  const me = ctx.session.user.name;
  if (prefix === null) prefix = `users/${me}/`;
  const box = alertBox();
  box.id = 'files-alert';
  const prefixIn = h('input', {id: 'files-prefix', value: prefix});
  const browse = h('form', {class: 'filters', role: 'search', 'aria-label': 'Browse files'},
    h('div', {class: 'field'}, h('label', {for: 'files-prefix'}, 'Prefix'), prefixIn),
    h('button', {type: 'submit', id: 'files-go'}, 'List'),
    h('button', {type: 'button', id: 'files-mine', on: {click: () => go(`users/${me}/`)}}, 'My files'),
    h('button', {type: 'button', id: 'files-datasets', on: {click: () => go('datasets/')}}, 'Datasets'));
  const fileIn = h('input', {id: 'upload-file', type: 'file'});
  const pathIn = h('input', {id: 'upload-path', placeholder: `users/${me}/name`});
  const progress = h('progress', {id: 'upload-progress', max: 100, value: 0, hidden: true, 'aria-label': 'Upload progress'});
  const progressText = h('span', {id: 'upload-status', 'aria-live': 'polite'});
  const upload = h('form', {class: 'filters', 'aria-labelledby': 'upload-h'},
    h('h2', {id: 'upload-h'}, 'Upload'),
    h('div', {class: 'field'}, h('label', {for: 'upload-file'}, 'File'), fileIn),
    h('div', {class: 'field'}, h('label', {for: 'upload-path'}, 'Store as'), pathIn),
    h('button', {type: 'submit', id: 'upload-button'}, 'Upload'), progress, progressText);
  const list = h('div', {id: 'files-list'});
  const more = h('button', {type: 'button', id: 'files-more', hidden: true}, 'More');
  main.append(h('h1', {}, 'Files'), box, browse, list, more, upload);

  let after = '';
  const row = (f) => [
    h('a', {href: fileUrl(f.path), download: f.path.split('/').pop(), class: 'file-link'}, f.path.startsWith(prefix) ? f.path.slice(prefix.length) : f.path),
    fmtBytes(f.size), fmtTime(f.mtime),
    h('button', {type: 'button', class: 'danger', 'aria-label': 'Delete ' + f.path, on: {click: () => remove(f.path)}}, 'Delete')];
  const load = async (append) => {
    let body;
    try {
      body = await get('/api/v1/files' + query({prefix, after: append ? after : '', limit: 200}));
    } catch (err) {
      replace(list);
      more.hidden = true;
      showAlert(box, err.status === 404 ? 'Not found: ' + err.message : err.message);
      return;
    }
    const files = body.files || [];
    after = body.next_after || '';
    more.hidden = !after;
    if (append && list.querySelector('tbody')) {
      const tb = list.querySelector('tbody');
      files.forEach((f) => tb.appendChild(h('tr', {}, row(f).map((c) => h('td', {}, c)))));
    } else {
      replace(list, files.length ? table(`Files under ${prefix}`, ['Name', 'Size', 'Modified', 'Action'], files.map(row), 'files')
        : h('p', {id: 'files-empty'}, `No files under ${prefix}`));
    }
  };
  const go = (p) => { prefix = p; prefixIn.value = p; showAlert(box, ''); load(false); };
  const remove = async (path) => {
    if (!confirm(`Delete ${path}?`)) return;
    try { await del(fileUrl(path)); showAlert(box, `Deleted ${path}.`, true); load(false); } catch (err) { showAlert(box, err.message); }
  };
  browse.addEventListener('submit', (ev) => { ev.preventDefault(); go(prefixIn.value.trim()); });
  more.addEventListener('click', () => load(true));
  fileIn.addEventListener('change', () => {
    if (fileIn.files[0] && !pathIn.value) pathIn.value = (prefix.endsWith('/') ? prefix : prefix + '/') + fileIn.files[0].name;
  });
  upload.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const file = fileIn.files[0];
    const path = pathIn.value.trim();
    if (!file || !path) { showAlert(box, 'Choose a file and where to store it.'); return; }
    showAlert(box, '');
    // Ask first: the server refuses (quota, size, access) before any byte is sent.
    const dry = await fetch(fileUrl(path) + '?dry_run=1', {method: 'PUT', credentials: 'same-origin',
      headers: {...changeHeaders('PUT'), 'X-Ringmaster-Size': String(file.size)}});
    if (!dry.ok) { showAlert(box, (await errorOf(dry)).message); return; }
    progress.hidden = false;
    progress.value = 0;
    const xhr = new XMLHttpRequest();
    xhr.open('PUT', fileUrl(path));
    for (const [k, v] of Object.entries(changeHeaders('PUT'))) xhr.setRequestHeader(k, v);
    xhr.upload.onprogress = (e) => {
      if (!e.lengthComputable) return;
      progress.value = Math.round(e.loaded / e.total * 100);
      progressText.textContent = `${fmtBytes(e.loaded)} of ${fmtBytes(e.total)}`;
    };
    xhr.onload = () => {
      if (xhr.status >= 200 && xhr.status < 300) {
        progress.value = 100;
        progressText.textContent = `Uploaded ${path} (${fmtBytes(file.size)}).`;
        load(false);
      } else {
        let msg = `${xhr.status} ${xhr.statusText}`;
        try { msg = JSON.parse(xhr.responseText).error.message; } catch (_) { /* keep the status */ }
        progressText.textContent = '';
        showAlert(box, msg);
      }
    };
    xhr.onerror = () => showAlert(box, 'The upload failed: the connection broke.');
    xhr.send(file);
  });
  load(false);
}
