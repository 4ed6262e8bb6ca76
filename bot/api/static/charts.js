// Charts as inline SVG, drawn by hand: stacked bars (Pulse, Usage) and an entity graph (Insight).
import {s, pressable} from './dom.js';

const PALETTE = ['#2b6cb0', '#d69e2e', '#38a169', '#c53030', '#805ad5', '#dd6b20', '#319795', '#b83280',
  '#718096', '#975a16'];
export const color = (i) => PALETTE[i % PALETTE.length];

/** The union of the series names across items, most total first (a stable color per name). */
export function seriesOf(items, parts) {
  const totals = new Map();
  for (const it of items) for (const [k, v] of Object.entries(parts(it))) totals.set(k, (totals.get(k) || 0) + v);
  return [...totals.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).map(([k]) => k);
}

/**
 * Stacked bars. items: [{label, parts: {series: value}}]; onPick(item) on click or Enter.
 * Returns an <svg> with role=img and a <title>; each bar group is focusable.
 */
export function stackedBars(items, {title, onPick, describe, height = 220} = {}) {
  const series = seriesOf(items, (it) => it.parts);
  const width = Math.max(400, items.length * 18 + 60);
  const top = 10, bottom = 30, left = 44, plotH = height - top - bottom;
  const max = Math.max(1, ...items.map((it) => Object.values(it.parts).reduce((a, b) => a + b, 0)));
  const bw = (width - left - 10) / Math.max(1, items.length);
  const svg = s('svg', {viewBox: `0 0 ${width} ${height}`, class: 'chart', role: 'group', 'aria-label': title},
    s('title', {}, title));
  // y axis: 0 and max
  svg.append(s('line', {x1: left, y1: top, x2: left, y2: top + plotH, class: 'axis'}),
    s('line', {x1: left, y1: top + plotH, x2: width - 10, y2: top + plotH, class: 'axis'}),
    s('text', {x: left - 4, y: top + 12, class: 'tick', 'text-anchor': 'end'}, String(max)),
    s('text', {x: left - 4, y: top + plotH, class: 'tick', 'text-anchor': 'end'}, '0'));
  const every = Math.ceil(items.length / 5);
  items.forEach((it, i) => {
    const x = left + i * bw;
    const total = Object.values(it.parts).reduce((a, b) => a + b, 0);
    const g = s('g', {class: 'bar', 'aria-label': describe ? describe(it, total) : `${it.label}: ${total}`},
      s('title', {}, describe ? describe(it, total) : `${it.label}: ${total}`));
    // a full-height transparent target so a thin or empty bar is still easy to hit
    g.append(s('rect', {x: x + 1, y: top, width: Math.max(1, bw - 2), height: plotH, class: 'hit'}));
    let y = top + plotH;
    series.forEach((name, si) => {
      const v = it.parts[name] || 0;
      if (!v) return;
      const hgt = (v / max) * plotH;
      y -= hgt;
      g.append(s('rect', {x: x + 1, y, width: Math.max(1, bw - 2), height: hgt, fill: color(si),
        class: 'seg', 'data-series': name}));
    });
    if (onPick) pressable(g, () => onPick(it));
    svg.append(g);
    if (i % every === 0) {
      svg.append(s('text', {x: x + bw / 2, y: height - 8, class: 'tick', 'text-anchor': 'middle'}, it.short || it.label));
    }
  });
  return {svg, series};
}

/** A legend for a chart's series, as a list (readable by screen readers, wraps on a phone). */
export function legend(series) {
  const ul = document.createElement('ul');
  ul.className = 'legend';
  series.forEach((name, i) => {
    const li = document.createElement('li');
    li.append(s('svg', {width: 12, height: 12, 'aria-hidden': 'true'}, s('rect', {width: 12, height: 12, fill: color(i)})),
      document.createTextNode(' ' + name));
    ul.append(li);
  });
  return ul;
}

/**
 * Node positions: a circle to start, then a few hundred steps of a small force layout
 * (repulsion between all nodes, springs along edges weighted by co-occurrence, pull to centre).
 * Deterministic: the same graph always lands the same way.
 */
export function layout(nodes, edges, size) {
  const n = nodes.length, c = size / 2, pos = new Map();
  nodes.forEach((nd, i) => {
    const a = (2 * Math.PI * i) / Math.max(1, n);
    pos.set(nd.id, {x: c + (size * 0.35) * Math.cos(a), y: c + (size * 0.35) * Math.sin(a)});
  });
  const k = size / Math.sqrt(Math.max(1, n)) * 0.35;
  for (let step = 0; step < 300; step++) {
    const force = new Map(nodes.map((nd) => [nd.id, {x: 0, y: 0}]));
    for (let i = 0; i < n; i++) {
      for (let j = i + 1; j < n; j++) {
        const a = pos.get(nodes[i].id), b = pos.get(nodes[j].id);
        let dx = a.x - b.x, dy = a.y - b.y;
        const d2 = Math.max(dx * dx + dy * dy, 1), f = (k * k) / d2;
        dx *= f; dy *= f;
        force.get(nodes[i].id).x += dx; force.get(nodes[i].id).y += dy;
        force.get(nodes[j].id).x -= dx; force.get(nodes[j].id).y -= dy;
      }
    }
    for (const e of edges) {
      const a = pos.get(e.source), b = pos.get(e.target);
      if (!a || !b) continue;
      const dx = b.x - a.x, dy = b.y - a.y, d = Math.sqrt(dx * dx + dy * dy) || 1;
      const f = (d / k) * Math.min(3, 0.5 + e.weight * 0.25) * 0.1;
      force.get(e.source).x += dx * f; force.get(e.source).y += dy * f;
      force.get(e.target).x -= dx * f; force.get(e.target).y -= dy * f;
    }
    const cool = 1 - step / 300;
    for (const nd of nodes) {
      const p = pos.get(nd.id), f = force.get(nd.id);
      f.x += (c - p.x) * 0.08; f.y += (c - p.y) * 0.08;
      const len = Math.sqrt(f.x * f.x + f.y * f.y) || 1, move = Math.min(len, 10 * cool + 0.5);
      p.x = Math.min(size - 50, Math.max(50, p.x + (f.x / len) * move));
      p.y = Math.min(size - 40, Math.max(30, p.y + (f.y / len) * move));
    }
  }
  return pos;
}

const KIND_COLOR = {person: '#2b6cb0', place: '#38a169', org: '#805ad5', organisation: '#805ad5',
  product: '#dd6b20', date: '#d69e2e', name: '#2b6cb0'};

/** The entity graph: node radius by mention count, edge width by co-occurrence weight. */
export function entityGraph(nodes, edges, {title, onPick, describe, size = 480} = {}) {
  const pos = layout(nodes, edges, size);
  const maxCount = Math.max(1, ...nodes.map((n) => n.count));
  const maxW = Math.max(1, ...edges.map((e) => e.weight));
  const svg = s('svg', {viewBox: `0 0 ${size} ${size}`, class: 'graph', role: 'group', 'aria-label': title},
    s('title', {}, title));
  const eg = s('g', {class: 'edges', 'aria-hidden': 'true'});
  for (const e of edges) {
    const a = pos.get(e.source), b = pos.get(e.target);
    if (!a || !b) continue;
    eg.append(s('line', {x1: a.x, y1: a.y, x2: b.x, y2: b.y, class: 'edge',
      'stroke-width': (1 + 5 * (e.weight / maxW)).toFixed(2)}, s('title', {}, `${e.source} — ${e.target}: ${e.weight}`)));
  }
  svg.append(eg);
  for (const nd of nodes) {
    const p = pos.get(nd.id), r = 6 + 18 * Math.sqrt(nd.count / maxCount);
    const label = describe ? describe(nd) : `${nd.label} (${nd.count})`;
    const g = s('g', {class: 'node', 'aria-label': label, 'data-id': nd.id},
      s('title', {}, label),
      s('circle', {cx: p.x, cy: p.y, r: r.toFixed(1), fill: KIND_COLOR[nd.kind] || '#718096'}),
      s('text', {x: p.x, y: p.y + r + 16, 'text-anchor': 'middle', class: 'nlabel'}, nd.label));
    if (onPick) pressable(g, () => onPick(nd));
    svg.append(g);
  }
  return svg;
}
