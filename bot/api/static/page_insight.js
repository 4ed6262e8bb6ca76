// Insight: the entity graph of the space (computed on the server); an entity lists its memories.
import {get} from './api.js';
import {entityGraph} from './charts.js';
import {clear, field, h} from './dom.js';
import {t} from './i18n.js';
import {memoriesById} from './page_memories.js';

export async function insightPage(root, ctx) {
  const limit = h('select', {id: 'insight-limit'}, [15, 30, 60].map((n) => h('option', {value: n, selected: n === 30}, String(n))));
  const graphBox = h('div', {class: 'card', id: 'insight-graph'});
  const listBox = h('div', {id: 'insight-list', 'aria-live': 'polite'});

  async function pick(node) {
    clear(listBox).append(h('h2', {tabindex: '-1'}, t('insight.entity', {label: node.label, n: node.count})));
    listBox.querySelector('h2').focus();
    listBox.append(await memoriesById(node.evidence || [], ctx));
  }

  async function load() {
    const g = await get('/api/v1/insight', {limit: limit.value});
    clear(listBox);
    if (!g.nodes.length) { clear(graphBox).append(h('p', {class: 'empty'}, t('insight.none'))); return; }
    const svg = entityGraph(g.nodes, g.edges, {title: t('insight.chart'), onPick: pick,
      describe: (n) => t('insight.node', {label: n.label, kind: t(`ent.${n.kind}`, {}, n.kind), n: n.count})});
    const labels = new Map(g.nodes.map((n) => [n.id, n.label]));
    clear(graphBox).append(svg, h('p', {class: 'hint'}, t('insight.hint')),
      h('details', {}, h('summary', {}, t('insight.edges', {n: g.edges.length})),
        h('table', {}, h('thead', {}, h('tr', {}, h('th', {scope: 'col'}, t('insight.pair')), h('th', {scope: 'col'}, t('insight.weight')),
          h('th', {scope: 'col'}, t('insight.lift')))),
        h('tbody', {}, g.edges.map((e) => h('tr', {}, h('td', {}, `${labels.get(e.source)} — ${labels.get(e.target)}`),
          h('td', {}, String(e.weight)), h('td', {}, String(e.lift))))))));
  }

  limit.addEventListener('change', load);
  root.append(h('div', {class: 'filters'}, field(t('insight.limit'), limit)), graphBox, listBox);
  await load();
}
