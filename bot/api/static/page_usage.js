// Usage: LLM calls and tokens per day, stacked by purpose, and the memory tokens injected per
// turn, for the key's space. Days are the server's UTC days, written in the chosen language.
import {get} from './api.js';
import {legend, responsive, stackedBars} from './charts.js';
import {fill, field, h, loadInto} from './dom.js';
import {compact, day, num, shortDay, usd} from './format.js';
import {t} from './i18n.js';

const DAY = 86400000;

const table = (heads, rows) => h('div', {class: 'scroll'}, h('table', {class: 'data'},
  h('thead', {}, h('tr', {}, heads.map(([k, cls]) => h('th', {scope: 'col', class: cls}, t(k))))), h('tbody', {}, rows)));
const cell = (v, cls) => h('td', {class: cls}, v);
// A model id can be a GGUF's path (llama.cpp) or a long Hugging Face id (vLLM): shown cut, with an
// ellipsis, so the numbers beside it stay in view; the whole id on hover (and to screen readers).
// A path shows its file name, the part that tells models apart.
const isPath = (id) => /^(\/|~|[A-Za-z]:[\\/])/.test(id);
const modelCell = (id) => h('td', {class: 'model', title: id, 'aria-label': id},
  h('span', {class: 'clip'}, isPath(id) ? `…/${id.split(/[\\/]/).pop()}` : id));

/** A card with a chart drawn at the card's width (and redrawn when it changes). */
function chartCard(title, items, {seriesName, id, unit} = {}, ...after) {
  const plot = h('div', {class: 'chart-box'});
  const card = h('section', {class: 'card', id}, h('h2', {}, title), plot);
  let series = [];
  const draw = (width) => {
    const chart = stackedBars(items, {title, width, fmt: compact,
      describe: (it, total) => `${it.label}: ${num(total)} ${unit || ''}`.trim()});
    series = chart.series;
    fill(plot, chart.svg);
  };
  card.draw = () => { responsive(plot, draw); if (seriesName) plot.after(legend(series, seriesName)); };
  card.append(...after);
  return card;
}

export async function usagePage(root) {
  const days = h('select', {id: 'usage-days'}, [7, 30, 90].map((d) => h('option', {value: d, selected: d === 30},
    t('pulse.last_days', {n: num(d)}))));
  const box = h('div', {id: 'usage-box'});
  const purpose = (p) => t(`purpose.${p}`, {}, p);

  const load = () => loadInto(box, async () => {
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
    const mk = (what) => daysSorted.map((d) => ({label: day(d), short: shortDay(d), parts: byDay.get(d)[what]}));
    const cost = u.usage.reduce((a, r) => a + (r.cost || 0), 0);
    const turnsByDay = new Map((u.turns || []).map((r) => [r.day, r]));
    const calls = chartCard(t('usage.calls_chart'), mk('calls'), {seriesName: purpose, unit: t('usage.calls')});
    const tokens = chartCard(t('usage.tokens_chart'), mk('tokens'), {seriesName: purpose, unit: t('usage.tokens')});
    const injected = chartCard(t('usage.injected_chart'), daysSorted.map((d) => ({label: day(d), short: shortDay(d),
      parts: turnsByDay.has(d) ? {per_turn: turnsByDay.get(d).injected_per_turn} : {}})),
    {id: 'usage-injected', unit: t('usage.tokens')},
    (u.turns || []).length ? table([['usage.day'], ['usage.turns', 'num'], ['usage.per_turn', 'num'], ['usage.p95', 'num'],
      ['usage.max', 'num'], ['usage.injected_total', 'num']],
    u.turns.map((r) => h('tr', {}, cell(day(r.day)), cell(num(r.turns), 'num'), cell(num(r.injected_per_turn), 'num'),
      cell(num(r.injected_p95), 'num'), cell(num(r.injected_max), 'num'), cell(num(r.injected_tokens), 'num'))))
      : h('p', {class: 'empty'}, t('usage.no_turns')));
    injected.querySelector('h2').after(h('p', {class: 'hint'}, t('usage.injected_hint')));
    fill(box,
      h('p', {class: 'hint'}, t('usage.scope')), calls, tokens,
      h('section', {class: 'card', id: 'usage-table'}, h('h2', {}, t('usage.table')),
        u.usage.length ? table([['usage.day'], ['usage.purpose'], ['usage.model'], ['usage.calls', 'num'], ['usage.prompt', 'num'],
          ['usage.completion', 'num'], ['usage.cost', 'num']],
        u.usage.map((r) => h('tr', {}, cell(day(r.day)), cell(purpose(r.purpose)), modelCell(r.model || ''), cell(num(r.calls), 'num'),
          cell(num(r.prompt_tokens), 'num'), cell(num(r.completion_tokens), 'num'), cell(r.cost === null ? '—' : usd(r.cost), 'num'))))
          : h('p', {class: 'empty'}, t('usage.none')),
        cost ? h('p', {}, t('usage.total_cost', {cost: usd(cost)})) : null),
      injected);
    for (const card of [calls, tokens, injected]) card.draw();
  });

  days.addEventListener('change', load);
  root.append(h('div', {class: 'filters'}, field(t('pulse.window'), days)), box);
  await load();
}
