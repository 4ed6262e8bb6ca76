// Admin (admin keys only): pairing requests, people and roles with their linked identities, API
// keys (created here and shown once, revoked here), the public space (add, forget), jobs and health.
import {reminderRows} from './page_reminders.js';
import {api, get} from './api.js';
import {fill, field, h, loadInto} from './dom.js';
import {asDate, dateTime, num} from './format.js';
import {t} from './i18n.js';
import {confirmDialog} from './page_memories.js';

const table = (heads, rows) => h('div', {class: 'scroll'}, h('table', {class: 'data'},
  h('thead', {}, h('tr', {}, heads.map((x) => h('th', {scope: 'col'}, t(x))))), h('tbody', {}, rows)));
const channel = (c) => t(`channel.${c}`, {}, c);

function section(id, title, ...body) {
  return [h('h2', {id: `${id}-h`}, title), ...body];
}

/** A card that loads itself (and reloads on `box.reload()`). */
function card(id, work) {
  const box = h('section', {class: 'card', id, 'aria-labelledby': `${id}-h`});
  box.reload = () => loadInto(box, work);
  return box;
}

function pairing(ctx, reloadPeople) {
  const box = card('pairing', async () => {
    const p = await get('/api/v1/admin/pairing');
    const act = (code, verb) => async () => {
      try {
        await api('POST', `/api/v1/admin/pairing/${encodeURIComponent(code)}/${verb}`);
        ctx.say(t(verb === 'approve' ? 'admin.approved' : 'admin.denied', {code}));
        await Promise.all([box.reload(), reloadPeople()]);
      } catch (err) { ctx.say(err.message, true); }
    };
    fill(box, section('pairing', t('admin.pairing'), p.requests.length ? table(
      ['admin.code', 'admin.who', 'admin.requested', 'admin.expires', 'admin.actions'],
      p.requests.map((r) => h('tr', {'data-code': r.code}, h('td', {}, h('code', {}, r.code)),
        h('td', {}, `${r.display_name || ''} (${r.identity})`), h('td', {}, dateTime(r.created_at)), h('td', {}, dateTime(r.expires_at)),
        h('td', {}, h('button', {type: 'button', class: 'approve', onclick: act(r.code, 'approve')}, t('admin.approve')), ' ',
          h('button', {type: 'button', class: 'danger deny', onclick: act(r.code, 'deny')}, t('admin.deny'))))))
      : h('p', {class: 'empty'}, t('admin.no_pairing'))));
  });
  return box;
}

function people(ctx) {
  const box = card('people', async () => {
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
        } catch (err) { ctx.say(err.message, true); await box.reload(); }
      });
      return sel;
    };
    fill(box, section('people', t('admin.people'), u.users.length ? table(
      ['admin.space', 'admin.identities', 'admin.role'],
      [...bySpace.entries()].map(([space, ids]) => h('tr', {}, h('td', {}, h('code', {}, space)),
        h('td', {}, h('ul', {class: 'plain'}, ids.map((i) => h('li', {},
          `${i.display_name ? `${i.display_name} · ` : ''}${channel(i.channel)}:${i.external_id}`)))),
        h('td', {}, h('ul', {class: 'plain'}, ids.map((i) => h('li', {}, roleSelect(i))))))))
      : h('p', {class: 'empty'}, t('admin.no_people'))));
  });
  return box;
}

const LIFETIMES = [0, 1, 7, 30, 90, 365];

/** API keys: the list (prefixes, never keys), revoke with a confirmation, and a form whose new key is shown once. */
function keys(ctx) {
  const shown = h('div', {id: 'new-key', 'aria-live': 'polite'});
  const box = card('keys', async () => {
    const [list, users] = await Promise.all([get('/api/v1/admin/keys'), get('/api/v1/admin/users')]);
    const now = Date.now();
    const state = (k) => (k.revoked_at ? 'revoked' : k.expires_at && asDate(k.expires_at) <= now ? 'expired' : 'live');
    const mine = ctx.who?.prefix;
    const revoke = (k) => async () => {
      const self = k.prefix === mine;
      const q = t('admin.revoke_q', {prefix: k.prefix}) + (self ? ` ${t('admin.revoke_self')}` : '');
      if (!(await confirmDialog(q))) return;
      try {
        await api('POST', '/api/v1/admin/keys/revoke', {prefix: k.prefix});
        if (self) { await ctx.logout(t('admin.revoked', {prefix: k.prefix})); return; }
        ctx.say(t('admin.revoked', {prefix: k.prefix}));
        await box.reload();
      } catch (err) { ctx.say(err.message, true); }
    };
    // Whose memories a new key reaches: a person's space (several identities may share one).
    const spaces = new Map();
    for (const i of users.users) if (!spaces.has(i.space_id)) spaces.set(i.space_id, i);
    const scope = h('select', {id: 'key-scope'}, ['write', 'read', 'admin'].map((s) => h('option', {value: s}, t(`scope.${s}`))));
    const person = h('select', {id: 'key-space'}, h('option', {value: ''}, t('admin.choose_person')),
      [...spaces.entries()].map(([space, i]) => h('option', {value: space},
        `${i.display_name || i.identity} (${channel(i.channel)}:${i.external_id})`)));
    const name = h('input', {type: 'text', id: 'key-name', maxlength: 100});
    const life = h('select', {id: 'key-life'}, LIFETIMES.map((d) => h('option', {value: d, selected: d === 90},
      d ? t('admin.days', {n: num(d)}) : t('admin.never'))));
    const error = h('p', {class: 'field-error', id: 'key-error', role: 'alert'});
    const personField = field(t('admin.for'), person);
    scope.addEventListener('change', () => { personField.hidden = scope.value === 'admin'; });
    const form = h('form', {class: 'filters', id: 'key-form', onsubmit: async (e) => {
      e.preventDefault();
      error.textContent = '';
      if (scope.value !== 'admin' && !person.value) { error.textContent = t('admin.need_person'); person.focus(); return; }
      const body = {scope: scope.value, name: name.value.trim() || null,
        ...(scope.value === 'admin' ? {} : {space_id: person.value}),
        ...(Number(life.value) ? {expires_s: Number(life.value) * 86400} : {})};
      try {
        const made = await api('POST', '/api/v1/admin/keys', body);
        showOnce(made.key, made.record.prefix);
        name.value = '';
        await box.reload();
      } catch (err) { error.textContent = `${t('error')}: ${err.message}`; }
    }}, field(t('admin.scope'), scope), personField, field(t('admin.key_name'), name), field(t('admin.lifetime'), life),
    h('button', {type: 'submit', id: 'key-create'}, t('admin.create')));
    fill(box, section('keys', t('admin.keys_title'),
      list.keys.length ? table(['admin.key', 'admin.key_name', 'admin.scope', 'admin.space', 'admin.created', 'admin.expires',
        'admin.state', 'admin.actions'],
      list.keys.map((k) => {
        const st = state(k);
        return h('tr', {'data-prefix': k.prefix, class: `key-${st}`},
          h('td', {}, h('code', {}, `${k.prefix}…`), k.prefix === mine ? ` ${t('admin.this_session')}` : ''),
          h('td', {}, k.name || ''), h('td', {}, t(`scope.${k.scope}`, {}, k.scope)), h('td', {}, k.space_id ? h('code', {}, k.space_id) : '—'),
          h('td', {}, dateTime(k.created_at)), h('td', {}, k.expires_at ? dateTime(k.expires_at) : t('admin.never')),
          h('td', {}, h('span', {class: `badge key-state-${st}`}, t(`key.${st}`))),
          h('td', {}, st === 'live' ? h('button', {type: 'button', class: 'danger revoke', onclick: revoke(k)}, t('admin.revoke')) : ''));
      })) : h('p', {class: 'empty'}, t('admin.no_keys')),
      shown, h('h3', {}, t('admin.new_key')), form, error));
  });

  /** The key in a read-only field with Copy, until "I have saved it": it is never fetched or shown again. */
  function showOnce(key, prefix) {
    const out = h('input', {type: 'text', readonly: true, value: key, id: 'new-key-value', class: 'secret',
      'aria-label': t('admin.key'), spellcheck: 'false'});
    fill(shown, h('div', {class: 'once', role: 'alert'}, h('p', {}, h('strong', {}, t('admin.key_made', {prefix}))), h('p', {}, t('admin.key_once')),
      out, h('div', {class: 'actions'},
        h('button', {type: 'button', id: 'new-key-copy', onclick: async () => {
          out.select();
          try { await navigator.clipboard.writeText(key); ctx.say(t('admin.copied')); }
          catch { document.execCommand?.('copy'); ctx.say(t('admin.copied')); }
        }}, t('admin.copy')),
        h('button', {type: 'button', id: 'new-key-done', onclick: () => fill(shown)}, t('admin.key_saved')))));
    out.focus();
    out.select();
  }
  // The shown key lives only in `shown`: the list's reload puts the same element back; leaving the page drops it.
  return box;
}

function publicSpace(ctx) {
  const box = card('public', async () => {
    const p = await get('/api/v1/admin/public/memories', {limit: 50});
    const text = h('textarea', {rows: 2, id: 'public-text', required: true, maxlength: 20000});
    const tags = h('input', {type: 'text', id: 'public-tags'});
    const error = h('p', {class: 'field-error', role: 'alert'});
    const form = h('form', {class: 'edit', id: 'public-form', onsubmit: async (e) => {
      e.preventDefault();
      error.textContent = '';
      try {
        await api('POST', '/api/v1/admin/public/memories', {content: text.value,
          tags: tags.value.split(/[,，]/).map((x) => x.trim()).filter(Boolean)});
        ctx.say(t('admin.public_added'));
        await box.reload();
      } catch (err) { error.textContent = `${t('error')}: ${err.message}`; }
    }}, field(t('admin.public_text'), text), field(t('admin.tags'), tags), error,
    h('button', {type: 'submit', id: 'public-add'}, t('admin.public_add')));
    fill(box, section('public', t('admin.public', {n: num(p.total)}),
      h('details', {class: 'add'}, h('summary', {}, t('admin.public_add')), form),
      p.memories.length ? h('ul', {class: 'memories'}, p.memories.map((m) => {
        const li = h('li', {class: 'memory', 'data-id': m.id}, h('p', {class: 'mtext'}, m.text), h('small', {}, dateTime(m.created_at)), ' ',
          h('button', {type: 'button', class: 'danger', onclick: async () => {
            if (!(await confirmDialog(t('mem.forget_q', {text: m.text.slice(0, 80)})))) return;
            try {
              await api('DELETE', `/api/v1/admin/public/memories/${encodeURIComponent(m.id)}`);
              ctx.say(t('mem.forgotten', {n: num(1)}));
              await box.reload();
            } catch (err) { ctx.say(err.message, true); }
          }}, t('mem.forget')));
        return li;
      })) : h('p', {class: 'empty'}, t('mem.none'))));
  });
  return box;
}

function health() {
  return card('health', async (box) => {
    const [stats, hz] = await Promise.all([get('/api/v1/admin/stats'), fetch('/healthz').then((r) => r.json())]);
    fill(box, section('health', t('admin.health'), h('p', {}, h('span', {class: `badge health-${hz.status}`}, t(`health.${hz.status}`, {}, hz.status))),
      h('dl', {class: 'kv'},
        h('dt', {}, t('admin.database')), h('dd', {}, t(`health.${hz.database}`, {}, hz.database)),
        h('dt', {}, t('admin.queue')), h('dd', {}, num(hz.ingest_queue)),
        h('dt', {}, t('admin.channels')), h('dd', {}, Object.entries(hz.channels).map(([c, up]) => `${channel(c)} ${up ? '✓' : '✗'}`).join(t('sep')) || '—'),
        h('dt', {}, t('admin.memories')), h('dd', {}, Object.entries(stats.memories).map(([k, n]) => `${t(`kind.${k}`, {}, k)} ${num(n)}`).join(t('sep')) || num(0)),
        h('dt', {}, t('admin.spaces')), h('dd', {}, num(stats.spaces)),
        h('dt', {}, t('admin.keys')), h('dd', {}, num(stats.live_keys)))));
  });
}

function jobs() {
  return card('jobs', async (box) => {
    const j = await get('/api/v1/admin/jobs', {limit: 20});
    fill(box, section('jobs', t('admin.jobs'),
      j.scheduled.length ? table(['admin.job', 'admin.runs', 'admin.failures', 'admin.last_run', 'admin.last_error'],
        j.scheduled.map((x) => h('tr', {}, h('td', {}, t(`job.${x.name}`, {}, x.name)), h('td', {class: 'num'}, num(x.runs)),
          h('td', {class: 'num'}, num(x.failures)), h('td', {}, x.last_run ? dateTime(x.last_run) : '—'),
          h('td', {class: 'wrap'}, x.last_error || '')))) : h('p', {class: 'empty'}, t('admin.no_scheduled')),
      j.jobs.length ? table(['admin.job', 'admin.kind', 'admin.status', 'admin.space'],
        j.jobs.map((x) => h('tr', {}, h('td', {}, h('code', {}, x.job_id || x.id || '')), h('td', {}, t(`jobkind.${x.kind}`, {}, x.kind || '')),
          h('td', {}, t(`jobstatus.${x.status}`, {}, x.status || '')), h('td', {}, x.space_id ? h('code', {}, x.space_id) : '')))) : null));
  });
}

function reminders() {
  return card('admin-reminders', async (box) => {
    const r = await get('/api/v1/admin/reminders');
    fill(box, section('admin-reminders', t('admin.reminders'),
      r.people.length ? r.people.map((p) => h('div', {class: 'person'}, h('h3', {class: 'userdata'}, `${p.name} `,
        h('code', {}, p.space_id)), reminderRows(p.reminders))) : h('p', {class: 'empty'}, t('admin.no_reminders'))));
  });
}

export async function adminPage(root, ctx) {
  const peopleBox = people(ctx);
  const boxes = [pairing(ctx, () => peopleBox.reload()), peopleBox, keys(ctx), publicSpace(ctx), reminders(), health(), jobs()];
  root.append(...boxes);
  await Promise.all(boxes.map((b) => b.reload()));
}
