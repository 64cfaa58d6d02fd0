// Admin: users (create, disable, enable), tokens (create with a scope, revoke;
// the secret shown once) and the audit log.
import {get, post, del, query} from './api.js';
import {h, replace, table, alertBox, showAlert, fmtTime} from './dom.js';

function field(id, label, input) {
  input.id = id;
  return h('div', {class: 'field'}, h('label', {for: id}, label), input);
}

export function render(main) {
  document.title = 'Admin · Ringmaster';
  const box = alertBox();
  box.id = 'admin-alert';
  const users = h('div', {id: 'admin-users'});
  const tokens = h('div', {id: 'admin-tokens'});
  const audit = h('div', {id: 'admin-audit'});
  const secret = h('output', {id: 'token-secret', class: 'secret'});

  const uName = h('input', {name: 'name', autocomplete: 'off'});
  const uRole = h('select', {name: 'role'}, h('option', {value: 'user'}, 'user'), h('option', {value: 'admin'}, 'admin'));
  const uPass = h('input', {name: 'password', type: 'password', autocomplete: 'new-password', minlength: 8});
  const userForm = h('form', {class: 'filters', 'aria-label': 'Create a user'}, field('u-name', 'Name', uName),
    field('u-role', 'Role', uRole), field('u-pass', 'Password', uPass), h('button', {type: 'submit', id: 'u-create'}, 'Create user'));

  const tName = h('input', {name: 'name', autocomplete: 'off'});
  const tUser = h('input', {name: 'user', autocomplete: 'off'});
  const tScope = h('select', {name: 'scope'}, ['submit', 'read', 'admin', 'metrics'].map((s) => h('option', {value: s}, s)));
  const tokenForm = h('form', {class: 'filters', 'aria-label': 'Create a token'}, field('t-name', 'Name', tName),
    field('t-user', 'For user (empty: you)', tUser), field('t-scope', 'Scope', tScope), h('button', {type: 'submit', id: 't-create'}, 'Create token'));

  const aUser = h('input', {name: 'user'});
  const aAction = h('input', {name: 'action'});
  const auditForm = h('form', {class: 'filters', role: 'search', 'aria-label': 'Filter the audit log'},
    field('a-user', 'User', aUser), field('a-action', 'Action', aAction), h('button', {type: 'submit', id: 'a-apply'}, 'Filter'));

  main.append(h('h1', {}, 'Admin'), box,
    h('section', {'aria-labelledby': 'users-h'}, h('h2', {id: 'users-h'}, 'Users'), userForm, users),
    h('section', {'aria-labelledby': 'tokens-h'}, h('h2', {id: 'tokens-h'}, 'Tokens'), tokenForm, secret, tokens),
    h('section', {'aria-labelledby': 'audit-h'}, h('h2', {id: 'audit-h'}, 'Audit log'), auditForm, audit));

  const act = async (fn, ok) => {
    try { await fn(); showAlert(box, ok, true); } catch (err) { showAlert(box, err.message); }
    await Promise.all([loadUsers(), loadTokens(), loadAudit()]);
  };
  const loadUsers = async () => {
    const body = await get('/api/v1/users').catch((err) => ({users: [], error: err}));
    replace(users, table('', ['Name', 'Role', 'State', 'Created', 'Action'], body.users.map((u) => [u.name, u.role,
      u.disabled ? 'disabled' : 'active', fmtTime(u.created_at),
      h('button', {type: 'button', 'aria-label': (u.disabled ? 'Enable ' : 'Disable ') + u.name,
        on: {click: () => act(() => post(`/api/v1/users/${encodeURIComponent(u.name)}/${u.disabled ? 'enable' : 'disable'}`),
          `${u.name} ${u.disabled ? 'enabled' : 'disabled'}.`)}}, u.disabled ? 'Enable' : 'Disable')])));
  };
  const loadTokens = async () => {
    const body = await get('/api/v1/tokens?all=1').catch(() => ({tokens: []}));
    replace(tokens, table('', ['ID', 'User', 'Name', 'Scope', 'Node', 'Created', 'Action'], body.tokens.map((t) => [String(t.id), t.user,
      t.name || '', t.scope, t.node || '', fmtTime(t.created_at),
      h('button', {type: 'button', class: 'danger', 'aria-label': `Revoke token ${t.id}`, on: {click: () => {
        if (confirm(`Revoke token ${t.id} of ${t.user}?`)) act(() => del(`/api/v1/tokens/${t.id}`), `Token ${t.id} revoked.`);
      }}}, 'Revoke')])));
  };
  const loadAudit = async () => {
    const body = await get('/api/v1/audit' + query({limit: 200, user: aUser.value.trim(), action: aAction.value.trim()}))
      .catch(() => ({entries: []}));
    replace(audit, table('', ['Time', 'User', 'Address', 'Action', 'Target', 'Outcome', 'Detail'], body.entries.map((e) =>
      [fmtTime(e.time), e.user || '', e.address || '', e.action, e.target || '', e.outcome || '', e.detail || ''])));
  };
  userForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const body = {name: uName.value.trim(), role: uRole.value};
    if (uPass.value) body.password = uPass.value;
    act(() => post('/api/v1/users', body), `User ${body.name} created.`).then(() => { uName.value = ''; uPass.value = ''; });
  });
  tokenForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const body = {scope: tScope.value};
    if (tName.value.trim()) body.name = tName.value.trim();
    if (tUser.value.trim()) body.user = tUser.value.trim();
    act(async () => {
      const t = await post('/api/v1/tokens', body);
      secret.textContent = `New token for ${t.user} (shown once): ${t.token}`;
    }, 'Token created: copy it now, it is not shown again.');
  });
  auditForm.addEventListener('submit', (ev) => { ev.preventDefault(); loadAudit(); });
  loadUsers();
  loadTokens();
  loadAudit();
}
