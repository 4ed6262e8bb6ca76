// Reminders: the person's active ones (next local time, repeats), cancel one, set one in words.
import {api, get} from './api.js';
import {field, fill, h, loadInto} from './dom.js';
import {t} from './i18n.js';
import {confirmDialog} from './page_memories.js';

/** The rows of a reminder list (shared with the Admin page's list per person). */
export function reminderRows(items, onCancel) {
  return h('ul', {class: 'reminders'}, items.map((r) => h('li', {},
    h('strong', {}, `#${r.id} ${r.local}`), r.repeats ? ` (${r.repeats})` : '', ' — ', h('span', {class: 'userdata'}, r.what),
    onCancel ? [' ', h('button', {type: 'button', class: 'danger', onclick: () => onCancel(r)}, t('rem.cancel'))] : null)));
}

export async function remindersPage(root, ctx) {
  const box = h('section', {class: 'card', id: 'reminders', 'aria-labelledby': 'reminders-h'});
  const canWrite = ctx.who?.scope !== 'read';
  const reload = () => loadInto(box, async () => {
    const data = await get('/api/v1/reminders');
    const cancel = canWrite ? async (r) => {
      if (!await confirmDialog(t('rem.cancel_q', {what: r.what}))) return;
      await api('DELETE', `/api/v1/reminders/${r.id}`);
      ctx.say(t('rem.cancelled', {id: r.id}));
      await reload();
    } : null;
    fill(box, h('h2', {id: 'reminders-h'}, t('rem.title', {zone: data.zone})),
      data.reminders.length ? reminderRows(data.reminders, cancel) : h('p', {class: 'empty'}, t('rem.none')));
  });
  root.append(box);
  if (canWrite) {
    const when = h('input', {type: 'text', id: 'rem-when', placeholder: t('rem.when_eg'), required: true});
    const what = h('input', {type: 'text', id: 'rem-what', required: true});
    root.append(h('form', {class: 'card', id: 'rem-form', onsubmit: async (e) => {
      e.preventDefault();
      try {
        const r = await api('POST', '/api/v1/reminders', {when: when.value, what: what.value});
        ctx.say(r.confirmation);
        when.value = ''; what.value = '';
        await reload();
      } catch (err) {
        if (err.status === 401) throw err;
        ctx.say(err.message, true);
      }
    }}, h('h2', {}, t('rem.set')), h('div', {class: 'filters'}, field(t('rem.when'), when), field(t('rem.what'), what)),
    h('button', {type: 'submit'}, t('rem.set'))));
  }
  await reload();
}
