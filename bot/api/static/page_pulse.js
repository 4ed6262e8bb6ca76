// Pulse: memories made per day or week, stacked by category; top tags; a bar lists its period.
import {get} from './api.js';
import {legend, stackedBars} from './charts.js';
import {clear, field, h} from './dom.js';
import {t} from './i18n.js';
import {memoryItem} from './page_memories.js';

const DAY = 86400000;
const asUtc = (iso) => new Date(iso.endsWith('Z') || iso.includes('+') ? iso : iso + 'Z');

export async function pulsePage(root, ctx) {
  const bucket = h('select', {id: 'pulse-bucket'}, h('option', {value: 'day'}, t('pulse.day')),
    h('option', {value: 'week'}, t('pulse.week')));
  const days = h('select', {id: 'pulse-days'}, [7, 30, 90, 365].map((d) =>
    h('option', {value: d, selected: d === 30}, t('pulse.last_days', {n: d}))));
  const chartBox = h('div', {class: 'card', id: 'pulse-chart'});
  const tagsBox = h('div', {class: 'card', id: 'pulse-tags'});
  const listBox = h('div', {id: 'pulse-list', 'aria-live': 'polite'});

  async function showPeriod(b, step) {
    const since = asUtc(b.start), until = new Date(since.getTime() + step);
    const page = await get('/api/v1/memories', {since: since.toISOString(), until: until.toISOString(), limit: 50});
    clear(listBox).append(h('h2', {}, t('pulse.period', {from: since.toLocaleDateString(), n: page.total})),
      page.memories.length ? h('ul', {class: 'memories'}, page.memories.map((m) => memoryItem(m, ctx, null)))
        : h('p', {class: 'empty'}, t('mem.none')));
    listBox.querySelector('h2').setAttribute('tabindex', '-1');
    listBox.querySelector('h2').focus();
  }

  async function load() {
    const n = Number(days.value), week = bucket.value === 'week';
    const until = new Date(), since = new Date(until.getTime() - n * DAY);
    const p = await get('/api/v1/pulse', {bucket: bucket.value, since: since.toISOString(), until: until.toISOString()});
    const step = (week ? 7 : 1) * DAY;
    const items = p.buckets.map((b) => {
      const d = asUtc(b.start);
      return {label: d.toLocaleDateString(), short: `${d.getUTCMonth() + 1}/${d.getUTCDate()}`, parts: b.by_category, bucket: b};
    });
    const {svg, series} = stackedBars(items, {title: t('pulse.chart'), onPick: (it) => showPeriod(it.bucket, step),
      describe: (it, total) => t('pulse.bar', {date: it.label, n: total})});
    clear(chartBox).append(h('h2', {}, t('pulse.total', {n: p.total})), svg, legend(series.map((c) => t(`cat.${c}`, {}, c))),
      h('p', {class: 'hint'}, t('pulse.hint')));
    clear(tagsBox).append(h('h2', {}, t('pulse.top_tags')), p.top_tags.length
      ? h('ol', {class: 'toptags'}, p.top_tags.map((x) => h('li', {}, h('span', {class: 'tag'}, `#${x.tag}`), ` ${x.count}`)))
      : h('p', {class: 'empty'}, t('pulse.no_tags')));
    clear(listBox);
  }

  bucket.addEventListener('change', load);
  days.addEventListener('change', load);
  root.append(h('div', {class: 'filters'}, field(t('pulse.bucket'), bucket), field(t('pulse.window'), days)),
    h('div', {class: 'cols'}, chartBox, tagsBox), listBox);
  await load();
}
