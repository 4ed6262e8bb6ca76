// The dashboard shell: login (key -> session cookie), the page menu, hash routing, language.
import {api, setCsrf} from './api.js';
import {clear, field, h} from './dom.js';
import {applyStatic, lang, setLang, t} from './i18n.js';
import {memoriesPage} from './page_memories.js';
import {pulsePage} from './page_pulse.js';
import {insightPage} from './page_insight.js';
import {skillsPage} from './page_skills.js';
import {remindersPage} from './page_reminders.js';
import {usagePage} from './page_usage.js';
import {adminPage} from './page_admin.js';

const SPACE_PAGES = [['memories', memoriesPage], ['pulse', pulsePage], ['insight', insightPage],
  ['skills', skillsPage], ['reminders', remindersPage], ['usage', usagePage]];
const ADMIN_PAGES = [['admin', adminPage]];
let who = null;

const main = () => document.getElementById('main');

let sayTimer = null;
/** A short message at the bottom: confirmations fade; errors stay until the next message or page. */
export function say(text, isError = false) {
  const el = document.getElementById('status');
  el.textContent = text;
  el.classList.toggle('error', isError);
  el.setAttribute('role', isError ? 'alert' : 'status');
  clearTimeout(sayTimer);
  if (!isError) sayTimer = setTimeout(() => { el.textContent = ''; }, 4000);
}

/** An error belongs to what the person was doing: a new page, a login or a logout clears it. */
function clearSay() {
  clearTimeout(sayTimer);
  const el = document.getElementById('status');
  el.textContent = '';
  el.classList.remove('error');
}

function pages() { return who?.scope === 'admin' ? ADMIN_PAGES : SPACE_PAGES; }

function renderNav(current) {
  const nav = document.getElementById('nav');
  nav.hidden = !who;
  clear(nav);
  if (!who) return;
  const ul = h('ul', {});
  for (const [name] of pages()) {
    ul.append(h('li', {}, h('a', {href: `#/${name}`, 'aria-current': name === current ? 'page' : null,
      id: `nav-${name}`}, t(`page.${name}`))));
  }
  nav.append(ul);
}

function loginForm() {
  // The error sits under the field it is about (and is read out); a later success removes it with the form.
  const error = h('p', {class: 'field-error', id: 'login-error', role: 'alert'});
  const key = h('input', {type: 'password', autocomplete: 'current-password', required: true, id: 'login-key',
    placeholder: 'mg_…', spellcheck: 'false', 'aria-describedby': 'login-error'});
  const submit = h('button', {type: 'submit', id: 'login-submit'}, t('login.submit'));
  const form = h('form', {class: 'card login', 'aria-labelledby': 'login-title', onsubmit: async (e) => {
    e.preventDefault();
    submit.disabled = true;
    error.textContent = '';
    key.removeAttribute('aria-invalid');
    try {
      who = await api('POST', '/api/v1/session', {key: key.value});
      setCsrf(who.csrf);
      key.value = '';
      clearSay();
      await go(`#/${pages()[0][0]}`);
    } catch (err) {
      error.textContent = err.status === 401 ? t('login.failed') : `${t('error')}: ${err.message}`;
      key.setAttribute('aria-invalid', 'true');
      key.focus();
    } finally {
      submit.disabled = false;
    }
  }},
  h('h1', {id: 'login-title'}, t('login.title')),
  h('p', {}, t('login.help')),
  field(t('login.key'), key), error, submit);
  return form;
}

let routing = 0;
async function route() {
  const mine = ++routing;
  clearSay();
  document.getElementById('logout').hidden = !who;
  if (!who) {
    renderNav(null);
    clear(main()).append(loginForm());
    document.getElementById('login-key').focus();
    return;
  }
  const name = (location.hash.match(/^#\/(\w+)/) || [])[1];
  const found = pages().find(([n]) => n === name) || pages()[0];
  renderNav(found[0]);
  document.title = `${t(`page.${found[0]}`)} · memgate`;
  const root = clear(main());
  root.append(h('h1', {}, t(`page.${found[0]}`)));
  try {
    await found[1](root, {who, say, logout});
  } catch (err) {
    if (err.status === 401) { who = null; setCsrf(null); return route(); }
    if (mine === routing) say(`${t('error')}: ${err.message}`, true);
  }
}

/** Back to the login form (after a logout, or when the session's own key was revoked). */
async function logout(message) {
  who = null; setCsrf(null);
  await go('');
  if (message) say(message);
}

/** Show the page of `hash` (a changed hash routes through the hashchange event, once). */
async function go(hash) {
  if ((location.hash || '') === hash || (hash === '' && location.hash === '#')) return route();
  const done = new Promise((resolve) => window.addEventListener('routed', resolve, {once: true}));
  location.hash = hash;
  await done;
}

async function start() {
  const picker = document.getElementById('lang');
  picker.value = lang();
  picker.addEventListener('change', async () => { setLang(picker.value); applyStatic(); await route(); });
  applyStatic();
  document.getElementById('logout').addEventListener('click', async () => {
    try { await api('DELETE', '/api/v1/session'); } catch { /* already gone: logged out either way */ }
    await logout(t('logged_out'));
  });
  const s = await api('GET', '/api/v1/session');
  if (s.logged_in) { who = s; setCsrf(s.csrf); }
  window.addEventListener('hashchange', async () => { await route(); window.dispatchEvent(new Event('routed')); });
  await route();
}

start();
