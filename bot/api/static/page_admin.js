// Admin (admin keys only): pairing requests, people and roles with their linked identities, the
// public space, jobs and health.
import {api, get} from './api.js';
import {clear, fmtTime, h} from './dom.js';
import {t} from './i18n.js';
import {confirmDialog} from './page_memories.js';

const table = (heads, rows) => h('div', {class: 'scroll'}, h('table', {},
  h('thead', {}, h('tr', {}, heads.map((x) => h('th', {scope: 'col'}, t(x))))), h('tbody', {}, rows)));

function section(id, title, ...body) {
  return h('section', {class: 'card', id, 'aria-labelledby': `${id}-h`}, h('h2', {id: `${id}-h`}, title), ...body);
}

async function pairing(box, ctx, reload) {
  const p = await get('/api/v1/admin/pairing');
  const act = (code, verb) => async () => {
    try {
      await api('POST', `/api/v1/admin/pairing/${encodeURIComponent(code)}/${verb}`);
      ctx.say(t(verb === 'approve' ? 'admin.approved' : 'admin.denied', {code}));
      await reload();
    } catch (err) { ctx.say(err.message, true); }
  };
  clear(box).append(section('pairing', t('admin.pairing'), p.requests.length ? table(
    ['admin.code', 'admin.who', 'admin.requested', 'admin.expires', 'admin.actions'],
    p.requests.map((r) => h('tr', {'data-code': r.code}, h('td', {}, h('code', {}, r.code)),
      h('td', {}, `${r.display_name || ''} (${r.identity})`), h('td', {}, fmtTime(r.created_at)), h('td', {}, fmtTime(r.expires_at)),
      h('td', {}, h('button', {type: 'button', class: 'approve', onclick: act(r.code, 'approve')}, t('admin.approve')), ' ',
        h('button', {type: 'button', class: 'danger deny', onclick: act(r.code, 'deny')}, t('admin.deny'))))))
    : h('p', {class: 'empty'}, t('admin.no_pairing'))));
}

async function people(box, ctx, reload) {
  const u = await get('/api/v1/admin/users');
  // Identities that share a space are one person reached on several channels.
  const bySpace = new Map();
  for (const i of u.users) bySpace.set(i.space_id, [...(bySpace.get(i.space_id) || []), i]);
  const roleSelect = (i) => {
    if (i.role === 'owner') return h('span', {class: 'badge'}, t('role.owner'));
    const sel = h('select', {'aria-label': t('admin.role_of', {who: i.identity})},
      ['user', 'admin', 'blocked'].map((r) => h('option', {value: r, selected: r === i.role}, t(`role.${r}`))));
    sel.addEventListener('change', async () => {
      try {
        await api('PATCH', `/api/v1/admin/users/${encodeURIComponent(i.identity)}`, {role: sel.value});
        ctx.say(t('admin.role_set', {who: i.identity, role: t(`role.${sel.value}`)}));
      } catch (err) { ctx.say(err.message, true); await reload(); }
    });
    return sel;
  };
  clear(box).append(section('people', t('admin.people'), u.users.length ? table(
    ['admin.space', 'admin.identities', 'admin.role'],
    [...bySpace.entries()].map(([space, ids]) => h('tr', {}, h('td', {}, h('code', {}, space)),
      h('td', {}, h('ul', {class: 'plain'}, ids.map((i) => h('li', {}, `${i.display_name || ''} · ${i.channel}:${i.external_id}`)))),
      h('td', {}, h('ul', {class: 'plain'}, ids.map((i) => h('li', {}, roleSelect(i))))))))
    : h('p', {class: 'empty'}, t('admin.no_people'))));
}

async function publicSpace(box, ctx) {
  const p = await get('/api/v1/admin/public/memories', {limit: 50});
  clear(box).append(section('public', t('admin.public', {n: p.total}), p.memories.length
    ? h('ul', {class: 'memories'}, p.memories.map((m) => {
      const li = h('li', {class: 'memory'}, h('p', {class: 'mtext'}, m.text), h('small', {}, fmtTime(m.created_at)), ' ',
        h('button', {type: 'button', class: 'danger', onclick: async () => {
          if (!(await confirmDialog(t('mem.forget_q', {text: m.text.slice(0, 80)})))) return;
          try { await api('DELETE', `/api/v1/admin/public/memories/${encodeURIComponent(m.id)}`); li.remove(); ctx.say(t('mem.forgotten', {n: 1})); }
          catch (err) { ctx.say(err.message, true); }
        }}, t('mem.forget')));
      return li;
    })) : h('p', {class: 'empty'}, t('mem.none'))));
}

async function jobsAndHealth(box) {
  const [jobs, stats, health] = await Promise.all([get('/api/v1/admin/jobs', {limit: 20}), get('/api/v1/admin/stats'),
    fetch('/healthz').then((r) => r.json())]);
  clear(box).append(
    section('health', t('admin.health'), h('p', {}, h('span', {class: `badge health-${health.status}`}, t(`health.${health.status}`, {}, health.status))),
      h('dl', {class: 'kv'},
        h('dt', {}, t('admin.database')), h('dd', {}, health.database),
        h('dt', {}, t('admin.queue')), h('dd', {}, String(health.ingest_queue)),
        h('dt', {}, t('admin.channels')), h('dd', {}, Object.entries(health.channels).map(([c, up]) => `${c} ${up ? '✓' : '✗'}`).join(', ') || '—'),
        h('dt', {}, t('admin.memories')), h('dd', {}, Object.entries(stats.memories).map(([k, n]) => `${t(`kind.${k}`, {}, k)} ${n}`).join(', ') || '0'),
        h('dt', {}, t('admin.spaces')), h('dd', {}, String(stats.spaces)),
        h('dt', {}, t('admin.keys')), h('dd', {}, String(stats.live_keys)))),
    section('jobs', t('admin.jobs'),
      jobs.scheduled.length ? table(['admin.job', 'admin.runs', 'admin.failures', 'admin.last_run', 'admin.last_error'],
        jobs.scheduled.map((j) => h('tr', {}, h('td', {}, j.name), h('td', {}, String(j.runs)), h('td', {}, String(j.failures)),
          h('td', {}, fmtTime(j.last_run)), h('td', {}, j.last_error || '')))) : h('p', {class: 'empty'}, t('admin.no_scheduled')),
      jobs.jobs.length ? table(['admin.job', 'admin.kind', 'admin.status', 'admin.space'],
        jobs.jobs.map((j) => h('tr', {}, h('td', {}, h('code', {}, j.job_id || j.id || '')), h('td', {}, j.kind || ''),
          h('td', {}, j.status || ''), h('td', {}, j.space_id || '')))) : null));
}

export async function adminPage(root, ctx) {
  const boxes = [h('div', {}), h('div', {}), h('div', {}), h('div', {})];
  const reload = () => Promise.all([pairing(boxes[0], ctx, reload), people(boxes[1], ctx, reload)]);
  root.append(...boxes);
  await Promise.all([reload(), publicSpace(boxes[2], ctx), jobsAndHealth(boxes[3])]);
}
