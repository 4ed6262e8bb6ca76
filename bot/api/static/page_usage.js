// Usage: LLM calls and tokens per day, stacked by purpose, and the memory tokens injected per
// turn, for the key's space.
import {get} from './api.js';
import {legend, stackedBars} from './charts.js';
import {clear, field, h} from './dom.js';
import {t} from './i18n.js';

const DAY = 86400000;

export async function usagePage(root) {
  const days = h('select', {id: 'usage-days'}, [7, 30, 90].map((d) => h('option', {value: d, selected: d === 30}, t('pulse.last_days', {n: d}))));
  const box = h('div', {id: 'usage-box'});

  async function load() {
    const n = Number(days.value), until = new Date(), since = new Date(until.getTime() - n * DAY);
    const u = await get('/api/v1/usage', {since: since.toISOString(), until: until.toISOString()});
    const byDay = new Map();
    for (let d = 0; d < n; d++) {
      const key = new Date(since.getTime() + (d + 1) * DAY).toISOString().slice(0, 10);
      byDay.set(key, {calls: {}, tokens: {}});
    }
    for (const r of u.usage) {
      const slot = byDay.get(r.day) || {calls: {}, tokens: {}};
      byDay.set(r.day, slot);
      slot.calls[r.purpose] = (slot.calls[r.purpose] || 0) + r.calls;
      slot.tokens[r.purpose] = (slot.tokens[r.purpose] || 0) + r.prompt_tokens + r.completion_tokens;
    }
    const daysSorted = [...byDay.keys()].sort();
    const mk = (what) => daysSorted.map((d) => ({label: d, short: d.slice(5), parts: byDay.get(d)[what]}));
    const calls = stackedBars(mk('calls'), {title: t('usage.calls_chart'), describe: (it, tot) => `${it.label}: ${tot} ${t('usage.calls')}`});
    const tokens = stackedBars(mk('tokens'), {title: t('usage.tokens_chart'), describe: (it, tot) => `${it.label}: ${tot} ${t('usage.tokens')}`});
    const cost = u.usage.reduce((a, r) => a + (r.cost || 0), 0);
    const turnsByDay = new Map((u.turns || []).map((r) => [r.day, r]));
    const injected = stackedBars(daysSorted.map((d) => ({label: d, short: d.slice(5),
      parts: turnsByDay.has(d) ? {[t('usage.per_turn')]: turnsByDay.get(d).injected_per_turn} : {}})),
    {title: t('usage.injected_chart'), describe: (it, tot) => `${it.label}: ${tot} ${t('usage.tokens')}`});
    clear(box).append(
      h('p', {class: 'hint'}, t('usage.scope')),
      h('section', {class: 'card'}, h('h2', {}, t('usage.calls_chart')), calls.svg, legend(calls.series)),
      h('section', {class: 'card'}, h('h2', {}, t('usage.tokens_chart')), tokens.svg, legend(tokens.series)),
      h('section', {class: 'card'}, h('h2', {}, t('usage.table')),
        u.usage.length ? h('div', {class: 'scroll'}, h('table', {},
          h('thead', {}, h('tr', {}, ['usage.day', 'usage.purpose', 'usage.model', 'usage.calls', 'usage.prompt', 'usage.completion', 'usage.cost']
            .map((k) => h('th', {scope: 'col'}, t(k))))),
          h('tbody', {}, u.usage.map((r) => h('tr', {}, h('td', {}, r.day), h('td', {}, r.purpose), h('td', {}, r.model || ''),
            h('td', {}, String(r.calls)), h('td', {}, String(r.prompt_tokens)), h('td', {}, String(r.completion_tokens)),
            h('td', {}, r.cost === null ? '—' : `$${r.cost.toFixed(4)}`))))))
          : h('p', {class: 'empty'}, t('usage.none')),
        cost ? h('p', {}, t('usage.total_cost', {cost: cost.toFixed(4)})) : null),
      h('section', {class: 'card', id: 'usage-injected'}, h('h2', {}, t('usage.injected_chart')),
        h('p', {class: 'hint'}, t('usage.injected_hint')), injected.svg,
        (u.turns || []).length ? h('div', {class: 'scroll'}, h('table', {},
          h('thead', {}, h('tr', {}, ['usage.day', 'usage.turns', 'usage.per_turn', 'usage.p95', 'usage.max', 'usage.injected_total']
            .map((k) => h('th', {scope: 'col'}, t(k))))),
          h('tbody', {}, u.turns.map((r) => h('tr', {}, h('td', {}, r.day), h('td', {}, String(r.turns)),
            h('td', {}, String(r.injected_per_turn)), h('td', {}, String(r.injected_p95)), h('td', {}, String(r.injected_max)),
            h('td', {}, String(r.injected_tokens)))))))
          : h('p', {class: 'empty'}, t('usage.no_turns'))));
  }

  days.addEventListener('change', load);
  root.append(h('div', {class: 'filters'}, field(t('pulse.window'), days)), box);
  await load();
}
