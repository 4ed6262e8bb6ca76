// Memories: add one, search with the production recall (scores shown), filters, edit, pin, forget
// (one or many, confirmed), and a fact's provenance (its source messages). A read key sees no
// write controls.
import {api, get} from './api.js';
import {clear, field, fill, h, loadInto} from './dom.js';
import {dateField, dateTime, fixed, num} from './format.js';
import {t} from './i18n.js';

const PAGE = 20;
// The fact extractor's categories (memory/ingest/facts.py), shown by their translated names.
export const CATEGORIES = ['about_you', 'preferences', 'people', 'experiences', 'plans', 'routines', 'constraints'];
const canWrite = (ctx) => ctx.who?.scope !== 'read';

/** Ask in a modal <dialog>; resolves true on Confirm. */
export function confirmDialog(text) {
  const dlg = document.getElementById('confirm');
  document.getElementById('confirm-text').textContent = text;
  return new Promise((resolve) => {
    dlg.addEventListener('close', () => resolve(dlg.returnValue === 'ok'), {once: true});
    dlg.returnValue = 'cancel';
    dlg.showModal();
    document.getElementById('confirm-no').focus();
  });
}

async function provenance(m, box) {
  await loadInto(box, async () => {
    const rows = [];
    for (const id of m.sources) {
      try { rows.push(await api('GET', `/api/v1/memories/${encodeURIComponent(id)}`)); }
      catch { rows.push({id, text: t('mem.source_gone'), created_at: null}); }
    }
    fill(box, h('h3', {}, t('mem.sources')),
      h('ol', {class: 'sources'}, rows.map((r) => h('li', {}, h('blockquote', {}, r.text),
        h('small', {}, r.created_at ? `${r.id} · ${dateTime(r.created_at)}` : r.id)))));
  });
}

function editor(m, onSaved, ctx) {
  const text = h('textarea', {rows: 4, required: true}, m.text);
  const tags = h('input', {type: 'text', value: m.tags.join(', ')});
  return h('form', {class: 'edit', onsubmit: async (e) => {
    e.preventDefault();
    const body = {text: text.value, tags: tags.value.split(/[,，]/).map((x) => x.trim()).filter(Boolean)};
    try {
      const saved = await api('PATCH', `/api/v1/memories/${encodeURIComponent(m.id)}`, body, {'If-Match': `"${m.version}"`});
      ctx.say(t('mem.saved'));
      onSaved(saved);
    } catch (err) {
      ctx.say(err.status === 412 ? t('mem.stale') : `${t('error')}: ${err.message}`, true);
    }
  }},
  field(t('mem.text'), text), field(t('mem.tags'), tags),
  h('button', {type: 'submit', class: 'save'}, t('save')));
}

/** One memory as a list item with its actions; `selected` holds the ids ticked for bulk forget. */
export function memoryItem(m, ctx, selected, onChange) {
  const li = h('li', {class: 'memory', 'data-id': m.id});
  const render = (m) => {
    const extra = h('div', {class: 'extra'});
    const tick = selected ? h('input', {type: 'checkbox', 'aria-label': t('mem.select'), checked: selected.has(m.id),
      onchange: (e) => (e.target.checked ? selected.add(m.id) : selected.delete(m.id))}) : null;
    const write = canWrite(ctx);
    fill(li,
      h('div', {class: 'mhead'}, write ? tick : null,
        h('span', {class: `badge kind-${m.kind}`}, t(`kind.${m.kind}`, {}, m.kind)),
        m.category ? h('span', {class: 'badge', 'data-category': m.category}, t(`cat.${m.category}`, {}, m.category)) : null,
        m.pinned ? h('span', {class: 'badge pinned'}, t('mem.pinned')) : null,
        m.score !== undefined ? h('span', {class: 'score', title: t('mem.score')}, `${t('mem.score')} ${fixed(m.score, 3)}`) : null,
        h('small', {class: 'when'}, dateTime(m.created_at))),
      m.title && m.title !== m.text ? h('strong', {}, m.title) : null,
      h('p', {class: 'mtext'}, m.text),
      m.tags.length ? h('p', {class: 'tags'}, m.tags.map((x) => h('span', {class: 'tag'}, `#${x}`))) : null,
      !write ? (m.sources.length ? h('div', {class: 'actions'}, h('button', {type: 'button', class: 'src-btn',
        onclick: () => provenance(m, extra)}, `${t('mem.sources')} (${num(m.sources.length)})`)) : null) :
      h('div', {class: 'actions'},
        h('button', {type: 'button', class: 'edit-btn', onclick: () => clear(extra).append(editor(m, render, ctx))}, t('edit')),
        h('button', {type: 'button', class: 'pin-btn', 'aria-pressed': String(m.pinned), onclick: async () => {
          try {
            render(await api('PATCH', `/api/v1/memories/${encodeURIComponent(m.id)}`, {pinned: !m.pinned},
              {'If-Match': `"${m.version}"`}));
            ctx.say(m.pinned ? t('mem.unpinned') : t('mem.pinned_ok'));
          } catch (err) { ctx.say(err.status === 412 ? t('mem.stale') : err.message, true); }
        }}, m.pinned ? t('mem.unpin') : t('mem.pin')),
        m.sources.length ? h('button', {type: 'button', class: 'src-btn', onclick: () => provenance(m, extra)},
          `${t('mem.sources')} (${num(m.sources.length)})`) : null,
        h('button', {type: 'button', class: 'danger forget-btn', onclick: async () => {
          if (!(await confirmDialog(t('mem.forget_q', {text: m.text.slice(0, 80)})))) return;
          try {
            await api('DELETE', `/api/v1/memories/${encodeURIComponent(m.id)}`);
            ctx.say(t('mem.forgotten', {n: num(1)}));
            li.remove();
            onChange?.();
          } catch (err) { ctx.say(err.message, true); }
        }}, t('mem.forget'))),
      extra);
  };
  render(m);
  return li;
}

/** A list of memories fetched by id (Insight's entities); the ids that are gone are skipped. */
export async function memoriesById(ids, ctx) {
  const found = await Promise.allSettled(ids.map((id) => api('GET', `/api/v1/memories/${encodeURIComponent(id)}`)));
  // The rejected ones were forgotten since the graph was drawn.
  return h('ul', {class: 'memories'}, found.filter((r) => r.status === 'fulfilled').map((r) => memoryItem(r.value, ctx, null)));
}

/** The form that stores a memory in the key's own space (as /remember does). */
function addForm(ctx, onAdded) {
  const text = h('textarea', {rows: 3, required: true, id: 'add-text', maxlength: 20000});
  const tags = h('input', {type: 'text', id: 'add-tags'});
  const pin = h('input', {type: 'checkbox', id: 'add-pin'});
  const error = h('p', {class: 'field-error', id: 'add-error', role: 'alert'});
  const details = h('details', {class: 'card add', id: 'mem-add'}, h('summary', {}, t('mem.add')),
    h('form', {class: 'edit', onsubmit: async (e) => {
      e.preventDefault();
      error.textContent = '';
      const body = {content: text.value, pinned: pin.checked,
        tags: tags.value.split(/[,，]/).map((x) => x.trim()).filter(Boolean)};
      try {
        await api('POST', '/api/v1/memories', body);
        text.value = ''; tags.value = ''; pin.checked = false;
        ctx.say(t('mem.added'));
        await onAdded();
      } catch (err) {
        error.textContent = `${t('error')}: ${err.message}`;
      }
    }},
    field(t('mem.add_text'), text), field(t('mem.tags'), tags),
    h('div', {class: 'check'}, pin, h('label', {for: 'add-pin'}, t('mem.add_pin'))), error,
    h('button', {type: 'submit', id: 'add-save'}, t('save'))));
  return details;
}

/** Erase everything of this key's space: the plan and a code first (DELETE /api/v1/me answers 409
 * with them), then the code typed back, as /forget everything asks in chat. */
function eraseCard(ctx) {
  const out = h('div', {id: 'erase-step'});
  const start = async () => {
    let shown;
    try { await api('DELETE', '/api/v1/me'); return; } catch (err) {
      if (err.status !== 409 || !err.data?.confirm) { ctx.say(`${t('error')}: ${err.message}`, true); return; }
      shown = err.data;
    }
    const e = shown.erase;
    const code = h('input', {type: 'text', id: 'erase-code', autocomplete: 'off', spellcheck: 'false', required: true});
    fill(out, h('form', {class: 'edit', onsubmit: async (ev) => {
      ev.preventDefault();
      try {
        await api('DELETE', `/api/v1/me?confirm=${encodeURIComponent(code.value.trim())}`);
        await ctx.logout(t('erase.done'));
      } catch (err) { ctx.say(`${t('error')}: ${err.message}`, true); }
    }},
    h('p', {id: 'erase-plan'}, t('erase.plan', {facts: num(e.facts), messages: num(e.messages), tasks: num(e.tasks),
      skills: num(e.skills), reminders: num(e.reminders)})),
    h('p', {}, t('erase.type_code', {code: shown.confirm, minutes: num(Math.round(shown.expires_in_s / 60))})),
    field(t('erase.code'), code),
    h('button', {type: 'submit', class: 'danger', id: 'erase-confirm'}, t('erase.confirm'))));
    code.focus();
  };
  return h('details', {class: 'card erase', id: 'erase-all'}, h('summary', {}, t('erase.title')),
    h('p', {class: 'hint'}, t('erase.help')),
    h('button', {type: 'button', class: 'danger', id: 'erase-start', onclick: start}, t('erase.start')), out);
}

export async function memoriesPage(root, ctx, preset = {}) {
  const q = h('input', {type: 'search', id: 'mem-q', value: preset.q || ''});
  const kind = h('select', {id: 'mem-kind'}, ['', 'fact', 'chunk', 'task', 'skill'].map((k) =>
    h('option', {value: k}, k ? t(`kind.${k}`) : t('any'))));
  const category = h('select', {id: 'mem-category'}, h('option', {value: ''}, t('any')),
    CATEGORIES.map((c) => h('option', {value: c}, t(`cat.${c}`))));
  const tag = h('input', {type: 'text', id: 'mem-tag'});
  const pinned = h('select', {id: 'mem-pinned'}, h('option', {value: ''}, t('any')),
    h('option', {value: 'true'}, t('mem.pinned')), h('option', {value: 'false'}, t('mem.not_pinned')));
  const since = dateField(t('since'), 'mem-since');
  const until = dateField(t('until'), 'mem-until');
  const results = h('div', {id: 'mem-results'});
  const selected = new Set();
  let offset = 0;

  const load = () => loadInto(results, async () => {
    selected.clear();
    const from = since.value(), to = until.value();
    if (from === null || to === null) { fill(results); return; }   // the field says what is wrong
    const params = {q: q.value.trim(), kind: kind.value, category: category.value, tag: tag.value.trim(),
      pinned: pinned.value, limit: PAGE, offset,
      since: from ? `${from}T00:00:00` : '', until: to ? `${to}T23:59:59` : ''};
    const page = await get('/api/v1/memories', params);
    const ul = h('ul', {class: 'memories', 'aria-label': t('page.memories')},
      page.memories.map((m) => memoryItem(m, ctx, selected, null)));
    const last = Math.min(page.total, offset + page.memories.length);
    // A search ranks only a page ahead: "21+" until the last page is reached.
    const more = page.total_exact === false;
    fill(results,
      h('p', {class: 'count', role: 'status'}, t('mem.count', {from: num(page.total ? offset + 1 : 0), to: num(last),
        total: more ? `${num(last)}+` : num(page.total)})),
      canWrite(ctx) ? h('div', {class: 'bulk'}, h('button', {type: 'button', class: 'danger', id: 'bulk-forget', onclick: bulkForget},
        t('mem.bulk_forget'))) : null,
      page.memories.length ? ul : h('p', {class: 'empty'}, t('mem.none')),
      h('div', {class: 'pager'},
        h('button', {type: 'button', disabled: offset === 0, onclick: () => { offset = Math.max(0, offset - PAGE); load(); }}, t('prev')),
        h('button', {type: 'button', disabled: !more && last >= page.total, onclick: () => { offset += PAGE; load(); }}, t('next'))));
  });

  async function bulkForget() {
    if (!selected.size) { ctx.say(t('mem.select_some'), true); return; }
    if (!(await confirmDialog(t('mem.bulk_q', {n: num(selected.size)})))) return;
    let n = 0;
    for (const id of [...selected]) {
      try { await api('DELETE', `/api/v1/memories/${encodeURIComponent(id)}`); n++; } catch { /* counted below */ }
    }
    ctx.say(t('mem.forgotten', {n: num(n)}));
    await load();
  }

  const form = h('form', {class: 'filters', role: 'search', onsubmit: (e) => { e.preventDefault(); offset = 0; load(); }},
    field(t('mem.search'), q), field(t('mem.kind'), kind), field(t('mem.category'), category), field(t('mem.tag'), tag),
    field(t('mem.pinned'), pinned), since.box, until.box,
    h('button', {type: 'submit', id: 'mem-go'}, t('mem.go')));
  root.append(canWrite(ctx) ? addForm(ctx, () => { offset = 0; return load(); }) : h('p', {class: 'hint'}, t('mem.read_only')),
    form, results, ...(canWrite(ctx) ? [eraseCard(ctx)] : []));
  if (preset.since) since.set(preset.since);
  if (preset.until) until.set(preset.until);
  await load();
}
