// Insight: the entity graph of the space (computed on the server), drawn at the width it is shown
// with labels that never overlap, the kinds' colours, and every entity as a list (the phone's
// easier target); an entity lists its memories.
import {get} from './api.js';
import {KIND_COLOR, entityGraph, responsive} from './charts.js';
import {fill, field, h, loadInto, s} from './dom.js';
import {fixed, num} from './format.js';
import {t} from './i18n.js';
import {memoriesById} from './page_memories.js';

const KINDS = ['person', 'place', 'organisation', 'name'];
// A colour as SVG (the page's CSP allows no inline style attribute).
const swatch = (colour) => s('svg', {width: 12, height: 12, 'aria-hidden': 'true', class: 'swatch'},
  s('circle', {cx: 6, cy: 6, r: 6, fill: colour || '#718096'}));

export async function insightPage(root, ctx) {
  const limit = h('select', {id: 'insight-limit'}, [15, 30, 60].map((n) => h('option', {value: n, selected: n === 30}, num(n))));
  const graphBox = h('div', {class: 'card', id: 'insight-graph'});
  const listBox = h('div', {id: 'insight-list', 'aria-live': 'polite'});
  const kindName = (k) => t(`ent.${k}`, {}, k);
  const describe = (n) => t('insight.node', {label: n.label, kind: kindName(n.kind), n: num(n.count)});

  const pick = (node) => loadInto(listBox, async () => {
    const ul = await memoriesById(node.evidence || [], ctx);
    fill(listBox, h('h2', {tabindex: '-1'}, t('insight.entity', {label: node.label, n: num(node.count)})), ul);
    listBox.querySelector('h2').focus();
  });

  const load = () => loadInto(graphBox, async () => {
    const g = await get('/api/v1/insight', {limit: limit.value});
    fill(listBox);
    if (!g.nodes.length) { fill(graphBox, h('p', {class: 'empty'}, t('insight.none'))); return; }
    const labels = new Map(g.nodes.map((n) => [n.id, n.label]));
    const plot = h('div', {class: 'graph-box'});
    const kinds = KINDS.filter((k) => g.nodes.some((n) => n.kind === k));
    fill(graphBox, plot,
      h('ul', {class: 'legend', 'aria-label': t('insight.kinds')}, kinds.map((k) => h('li', {'data-kind': k},
        swatch(KIND_COLOR[k]), ' ', kindName(k)))),
      h('p', {class: 'hint'}, t('insight.hint')),
      h('details', {class: 'entities', open: true}, h('summary', {}, t('insight.all', {n: num(g.nodes.length)})),
        h('ul', {class: 'chips'}, g.nodes.map((n) => h('li', {}, h('button', {type: 'button', class: `chip kind-${n.kind}`,
          'data-id': n.id, 'aria-label': describe(n), onclick: () => pick(n)}, swatch(KIND_COLOR[n.kind]), n.label,
          h('span', {class: 'count'}, num(n.count))))))),
      h('details', {}, h('summary', {}, t('insight.edges', {n: num(g.edges.length)})),
        h('div', {class: 'scroll'}, h('table', {class: 'data'}, h('thead', {}, h('tr', {}, h('th', {scope: 'col'}, t('insight.pair')),
          h('th', {scope: 'col', class: 'num'}, t('insight.weight')), h('th', {scope: 'col', class: 'num'}, t('insight.lift')))),
        h('tbody', {}, g.edges.map((e) => h('tr', {}, h('td', {}, `${labels.get(e.source)} — ${labels.get(e.target)}`),
          h('td', {class: 'num'}, num(e.weight)), h('td', {class: 'num'}, fixed(e.lift, 2)))))))));
    responsive(plot, (width) => {
      const w = Math.min(width, 720), height = Math.round(Math.max(320, Math.min(560, w * 0.85)));
      fill(plot, entityGraph(g.nodes, g.edges, {title: t('insight.chart'), onPick: pick, describe, width: w, height}));
    });
  });

  limit.addEventListener('change', load);
  root.append(h('div', {class: 'filters'}, field(t('insight.limit'), limit)), graphBox, listBox);
  await load();
}
