// The dashboard shell: login (key -> session cookie), the page menu, hash routing, language.
import {api, setCsrf} from './api.js';
import {clear, field, h} from './dom.js';
import {applyStatic, lang, setLang, t} from './i18n.js';
import {memoriesPage} from './page_memories.js';
import {pulsePage} from './page_pulse.js';
import {insightPage} from './page_insight.js';
import {skillsPage} from './page_skills.js';
import {usagePage} from './page_usage.js';
import {adminPage} from './page_admin.js';

const SPACE_PAGES = [['memories', memoriesPage], ['pulse', pulsePage], ['insight', insightPage],
  ['skills', skillsPage], ['usage', usagePage]];
const ADMIN_PAGES = [['admin', adminPage]];
let who = null;

const main = () => document.getElementById('main');

let sayTimer = null;
export function say(text, isError = false) {
  const el = document.getElementById('status');
  el.textContent = text;
  el.classList.toggle('error', isError);
  clearTimeout(sayTimer);
  // Errors stay until the next message; confirmations fade so they never cover the page for long.
  if (!isError) sayTimer = setTimeout(() => { el.textContent = ''; }, 4000);
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
  const key = h('input', {type: 'password', autocomplete: 'current-password', required: true, id: 'login-key',
    placeholder: 'mg_…', spellcheck: 'false'});
  const form = h('form', {class: 'card login', 'aria-labelledby': 'login-title', onsubmit: async (e) => {
    e.preventDefault();
    try {
      who = await api('POST', '/api/v1/session', {key: key.value});
      setCsrf(who.csrf);
      key.value = '';
      location.hash = `#/${pages()[0][0]}`;
      await route();
    } catch (err) {
      say(t('login.failed'), true);
      key.focus();
    }
  }},
  h('h1', {id: 'login-title'}, t('login.title')),
  h('p', {}, t('login.help')),
  field(t('login.key'), key),
  h('button', {type: 'submit', id: 'login-submit'}, t('login.submit')));
  return form;
}

async function route() {
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
    await found[1](root, {who, say});
  } catch (err) {
    if (err.status === 401) { who = null; setCsrf(null); return route(); }
    say(`${t('error')}: ${err.message}`, true);
  }
}

async function start() {
  const picker = document.getElementById('lang');
  picker.value = lang();
  picker.addEventListener('change', async () => { setLang(picker.value); applyStatic(); await route(); });
  applyStatic();
  document.getElementById('logout').addEventListener('click', async () => {
    try { await api('DELETE', '/api/v1/session'); } catch { /* already gone: logged out either way */ }
    who = null; setCsrf(null);
    location.hash = '';
    say(t('logged_out'));
    await route();
  });
  const s = await api('GET', '/api/v1/session');
  if (s.logged_in) { who = s; setCsrf(s.csrf); }
  window.addEventListener('hashchange', route);
  await route();
}

start();
