// Login: a user name and password, or an API token, exchanged for a session cookie.
import {post} from './api.js';
import {h, alertBox, showAlert} from './dom.js';

export function render(main, ctx) {
  document.title = 'Log in · Ringmaster';
  const user = h('input', {id: 'login-user', name: 'user', autocomplete: 'username'});
  const password = h('input', {id: 'login-password', name: 'password', type: 'password', autocomplete: 'current-password'});
  const token = h('input', {id: 'login-token', name: 'token', type: 'password', autocomplete: 'off'});
  const box = alertBox();
  box.id = 'login-error';
  const button = h('button', {type: 'submit', id: 'login-submit'}, 'Log in');
  const form = h('form', {class: 'login', 'aria-labelledby': 'login-title'},
    h('h1', {id: 'login-title'}, 'Log in to Ringmaster'),
    h('div', {class: 'field'}, h('label', {for: 'login-user'}, 'User'), user),
    h('div', {class: 'field'}, h('label', {for: 'login-password'}, 'Password'), password),
    h('p', {class: 'hint'}, 'or'),
    h('div', {class: 'field'}, h('label', {for: 'login-token'}, 'API token'), token),
    button, box);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    showAlert(box, '');
    const body = token.value ? {token: token.value} : {user: user.value, password: password.value};
    button.disabled = true;
    try {
      ctx.onLogin(await post('/api/v1/session', body, {quiet401: true}));
    } catch (err) {
      showAlert(box, err.message);
      password.value = '';
    } finally {
      button.disabled = false;
    }
  });
  main.appendChild(form);
  user.focus();
}
