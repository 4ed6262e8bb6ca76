// Memories: search with the production recall (scores shown), filters, edit, pin, forget (one or
// many, confirmed), and a fact's provenance (its source messages).
import {api, get} from './api.js';
import {clear, field, fill, fmtTime, h} from './dom.js';
import {t} from './i18n.js';

const PAGE = 20;

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
  clear(box).append(h('p', {}, t('loading')));
  const rows = [];
  for (const id of m.sources) {
    try { rows.push(await api('GET', `/api/v1/memories/${encodeURIComponent(id)}`)); }
    catch { rows.push({id, text: t('mem.source_gone'), created_at: null}); }
  }
  clear(box).append(h('h3', {}, t('mem.sources')),
    h('ol', {class: 'sources'}, rows.map((r) => h('li', {}, h('blockquote', {}, r.text),
      h('small', {}, `${r.id} · ${fmtTime(r.created_at)}`)))));
}

function editor(m, onSaved, ctx) {
  const text = h('textarea', {rows: 4, required: true}, m.text);
  const tags = h('input', {type: 'text', value: m.tags.join(', ')});
  return h('form', {class: 'edit', onsubmit: async (e) => {
    e.preventDefault();
    const body = {text: text.value, tags: tags.value.split(',').map((x) => x.trim()).filter(Boolean)};
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
    fill(li,
      h('div', {class: 'mhead'}, tick,
        h('span', {class: `badge kind-${m.kind}`}, t(`kind.${m.kind}`)),
        m.category ? h('span', {class: 'badge'}, m.category) : null,
        m.pinned ? h('span', {class: 'badge pinned'}, t('mem.pinned')) : null,
        m.score !== undefined ? h('span', {class: 'score', title: t('mem.score')}, `${t('mem.score')} ${m.score.toFixed(3)}`) : null,
        h('small', {class: 'when'}, fmtTime(m.created_at))),
      m.title && m.title !== m.text ? h('strong', {}, m.title) : null,
      h('p', {class: 'mtext'}, m.text),
      m.tags.length ? h('p', {class: 'tags'}, m.tags.map((x) => h('span', {class: 'tag'}, `#${x}`))) : null,
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
          `${t('mem.sources')} (${m.sources.length})`) : null,
        h('button', {type: 'button', class: 'danger forget-btn', onclick: async () => {
          if (!(await confirmDialog(t('mem.forget_q', {text: m.text.slice(0, 80)})))) return;
          try {
            await api('DELETE', `/api/v1/memories/${encodeURIComponent(m.id)}`);
            ctx.say(t('mem.forgotten', {n: 1}));
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
  const ul = h('ul', {class: 'memories'});
  for (const id of ids) {
    try { ul.append(memoryItem(await api('GET', `/api/v1/memories/${encodeURIComponent(id)}`), ctx, null)); }
    catch { /* forgotten since the graph was drawn */ }
  }
  return ul;
}

export async function memoriesPage(root, ctx, preset = {}) {
  const q = h('input', {type: 'search', id: 'mem-q', value: preset.q || ''});
  const kind = h('select', {id: 'mem-kind'}, ['', 'fact', 'chunk', 'task', 'skill'].map((k) =>
    h('option', {value: k}, k ? t(`kind.${k}`) : t('any'))));
  const category = h('input', {type: 'text', id: 'mem-category'});
  const tag = h('input', {type: 'text', id: 'mem-tag'});
  const pinned = h('select', {id: 'mem-pinned'}, h('option', {value: ''}, t('any')),
    h('option', {value: 'true'}, t('mem.pinned')), h('option', {value: 'false'}, t('mem.not_pinned')));
  const since = h('input', {type: 'date', id: 'mem-since'});
  const until = h('input', {type: 'date', id: 'mem-until'});
  const results = h('div', {id: 'mem-results'});
  const selected = new Set();
  let offset = 0;

  async function load() {
    selected.clear();
    const params = {q: q.value.trim(), kind: kind.value, category: category.value.trim(), tag: tag.value.trim(),
      pinned: pinned.value, limit: PAGE, offset,
      since: since.value ? `${since.value}T00:00:00` : '', until: until.value ? `${until.value}T23:59:59` : ''};
    const page = await get('/api/v1/memories', params);
    const ul = h('ul', {class: 'memories', 'aria-label': t('page.memories')},
      page.memories.map((m) => memoryItem(m, ctx, selected, null)));
    const last = Math.min(page.total, offset + page.memories.length);
    // A search ranks only a page ahead: "21+" until the last page is reached.
    const more = page.total_exact === false;
    clear(results).append(
      h('p', {class: 'count', role: 'status'}, t('mem.count', {from: page.total ? offset + 1 : 0, to: last,
        total: more ? `${last}+` : page.total})),
      h('div', {class: 'bulk'}, h('button', {type: 'button', class: 'danger', id: 'bulk-forget', onclick: bulkForget},
        t('mem.bulk_forget'))),
      page.memories.length ? ul : h('p', {class: 'empty'}, t('mem.none')),
      h('div', {class: 'pager'},
        h('button', {type: 'button', disabled: offset === 0, onclick: () => { offset = Math.max(0, offset - PAGE); load(); }}, t('prev')),
        h('button', {type: 'button', disabled: !more && last >= page.total, onclick: () => { offset += PAGE; load(); }}, t('next'))));
  }

  async function bulkForget() {
    if (!selected.size) { ctx.say(t('mem.select_some'), true); return; }
    if (!(await confirmDialog(t('mem.bulk_q', {n: selected.size})))) return;
    let n = 0;
    for (const id of [...selected]) {
      try { await api('DELETE', `/api/v1/memories/${encodeURIComponent(id)}`); n++; } catch { /* counted below */ }
    }
    ctx.say(t('mem.forgotten', {n}));
    await load();
  }

  const form = h('form', {class: 'filters', role: 'search', onsubmit: (e) => { e.preventDefault(); offset = 0; load(); }},
    field(t('mem.search'), q), field(t('mem.kind'), kind), field(t('mem.category'), category), field(t('mem.tag'), tag),
    field(t('mem.pinned'), pinned), field(t('since'), since), field(t('until'), until),
    h('button', {type: 'submit', id: 'mem-go'}, t('mem.go')));
  root.append(form, results);
  if (preset.since) since.value = preset.since;
  if (preset.until) until.value = preset.until;
  await load();
}
