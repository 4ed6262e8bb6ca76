// Pulse: memories made per day or week, stacked by category; top tags; a bar lists its period.
import {get} from './api.js';
import {legend, responsive, stackedBars} from './charts.js';
import {fill, field, h, loadInto} from './dom.js';
import {asDate, compact, day, num, shortDay} from './format.js';
import {t} from './i18n.js';
import {memoryItem} from './page_memories.js';

const DAY = 86400000;

export async function pulsePage(root, ctx) {
  const bucket = h('select', {id: 'pulse-bucket'}, h('option', {value: 'day'}, t('pulse.day')),
    h('option', {value: 'week'}, t('pulse.week')));
  const days = h('select', {id: 'pulse-days'}, [7, 30, 90, 365].map((d) =>
    h('option', {value: d, selected: d === 30}, t('pulse.last_days', {n: num(d)}))));
  const chartBox = h('div', {class: 'card', id: 'pulse-chart'});
  const tagsBox = h('div', {class: 'card', id: 'pulse-tags'});
  const listBox = h('div', {id: 'pulse-list', 'aria-live': 'polite'});

  async function showPeriod(b, step) {
    const since = asDate(b.start), until = new Date(since.getTime() + step);
    await loadInto(listBox, async () => {
      const page = await get('/api/v1/memories', {since: since.toISOString(), until: until.toISOString(), limit: 50});
      fill(listBox, h('h2', {tabindex: '-1'}, t('pulse.period', {from: day(b.start), n: num(page.total)})),
        page.memories.length ? h('ul', {class: 'memories'}, page.memories.map((m) => memoryItem(m, ctx, null)))
          : h('p', {class: 'empty'}, t('mem.none')));
      listBox.querySelector('h2').focus();
    });
  }

  // One request feeds both cards; a failed one is asked again by either card's retry.
  let pending = null;
  const pulse = () => (pending ||= (() => {
    const until = new Date(), since = new Date(until.getTime() - Number(days.value) * DAY);
    return get('/api/v1/pulse', {bucket: bucket.value, since: since.toISOString(), until: until.toISOString()});
  })().catch((err) => { pending = null; throw err; }));

  const load = () => {
    pending = null;
    return Promise.all([loadInto(chartBox, async () => {
      const p = await pulse();
      const step = (bucket.value === 'week' ? 7 : 1) * DAY;
      const items = p.buckets.map((b) => ({label: day(b.start), short: shortDay(b.start), parts: b.by_category, bucket: b}));
      const plot = h('div', {class: 'chart-box'});
      const catName = (c) => t(`cat.${c}`, {}, c);
      let series = [];
      fill(chartBox, h('h2', {}, t('pulse.total', {n: num(p.total)})), plot);
      responsive(plot, (width) => {
        const chart = stackedBars(items, {title: t('pulse.chart'), width, fmt: compact,
          onPick: (it) => showPeriod(it.bucket, step), describe: (it, total) => t('pulse.bar', {date: it.label, n: num(total)})});
        series = chart.series;
        fill(plot, chart.svg);
      });
      chartBox.append(legend(series, catName), h('p', {class: 'hint'}, t('pulse.hint')));
    }, load), loadInto(tagsBox, async () => {
      const p = await pulse();
      fill(tagsBox, h('h2', {}, t('pulse.top_tags')), p.top_tags.length
        ? h('ol', {class: 'toptags'}, p.top_tags.map((x) => h('li', {}, h('span', {class: 'tag'}, `#${x.tag}`), ` ${num(x.count)}`)))
        : h('p', {class: 'empty'}, t('pulse.no_tags')));
    }, load)]).then(() => fill(listBox));
  };

  bucket.addEventListener('change', load);
  days.addEventListener('change', load);
  root.append(h('div', {class: 'filters'}, field(t('pulse.bucket'), bucket), field(t('pulse.window'), days)),
    h('div', {class: 'cols'}, chartBox, tagsBox), listBox);
  await load();
}
