// Charts as inline SVG, drawn by hand at the size they are shown (text never shrinks below its CSS
// size): stacked bars (Pulse, Usage) and an entity graph (Insight) whose labels never overlap.
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

const TICK_PX = 12;   // chart text, in CSS pixels: charts are drawn 1:1, never scaled down
const LABEL_PX = 13;

let measureCtx = null;
/** The width in CSS pixels of `text` at `px` in the page's font (for axis and label layout). */
export function textWidth(text, px) {
  measureCtx = measureCtx || document.createElement('canvas').getContext('2d');
  measureCtx.font = `${px}px ${getComputedStyle(document.body).fontFamily}`;
  return measureCtx.measureText(String(text)).width;
}

/** Round axis ticks: 0 .. a 1/2/5 x 10^k step past max, about `count` of them. */
export function niceTicks(max, count = 4) {
  if (!(max > 0)) return [0, 1];
  const raw = max / count, mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((x) => x >= raw);
  const out = [];
  for (let v = 0; v < max + step / 2; v += step) out.push(Math.round(v * 1e9) / 1e9);
  if (out[out.length - 1] < max) out.push(out[out.length - 1] + step);
  return out;
}

/**
 * Draw `draw(width)` into `box` at the box's own width, and again when that width changes
 * (a phone turned sideways): charts are laid out in real pixels, so their text keeps its size.
 */
export function responsive(box, draw) {
  let last = -1;
  const render = () => {
    const w = Math.floor(box.clientWidth);
    if (w > 0 && w !== last) { last = w; draw(w); }
  };
  new ResizeObserver(render).observe(box);
  render();
}

/**
 * Stacked bars at `width` CSS pixels. items: [{label, short, parts: {series: value}}];
 * onPick(item) on click or Enter; `fmt` writes the axis numbers. Returns {svg, series}.
 * Bars are at least 3 px wide: past that the chart grows wider than `width` (its box scrolls).
 */
export function stackedBars(items, {title, onPick, describe, width = 600, height = 220, fmt = String} = {}) {
  const series = seriesOf(items, (it) => it.parts);
  const max = Math.max(0, ...items.map((it) => Object.values(it.parts).reduce((a, b) => a + b, 0)));
  const ticks = niceTicks(max), top = 8, bottom = TICK_PX + 14;
  const left = Math.ceil(Math.max(...ticks.map((v) => textWidth(fmt(v), TICK_PX)))) + 10, right = 8;
  const w = Math.max(width, left + right + items.length * 3), plotW = w - left - right, plotH = height - top - bottom;
  const yMax = ticks[ticks.length - 1] || 1;
  const bw = plotW / Math.max(1, items.length);
  const svg = s('svg', {width: w, height, viewBox: `0 0 ${w} ${height}`, class: 'chart', role: 'group', 'aria-label': title},
    s('title', {}, title));
  const y = (v) => top + plotH - (v / yMax) * plotH;
  for (const v of ticks) {
    svg.append(s('line', {x1: left, y1: y(v), x2: w - right, y2: y(v), class: v ? 'grid' : 'axis'}),
      s('text', {x: left - 6, y: y(v) + TICK_PX / 3, class: 'tick', 'text-anchor': 'end'}, fmt(v)));
  }
  svg.append(s('line', {x1: left, y1: top, x2: left, y2: top + plotH, class: 'axis'}));
  // As many x labels as fit side by side, evenly spaced.
  const widest = Math.max(1, ...items.map((it) => textWidth(it.short || it.label, TICK_PX)));
  const every = Math.max(1, Math.ceil((widest + 10) / bw));
  items.forEach((it, i) => {
    const x = left + i * bw;
    const total = Object.values(it.parts).reduce((a, b) => a + b, 0);
    const said = describe ? describe(it, total) : `${it.label}: ${total}`;
    const g = s('g', {class: 'bar', 'aria-label': said}, s('title', {}, said));
    // a full-height transparent target so a thin or empty bar is still easy to hit
    g.append(s('rect', {x: x + 0.5, y: top, width: Math.max(1, bw - 1), height: plotH, class: 'hit'}));
    let yy = top + plotH;
    series.forEach((name, si) => {
      const v = it.parts[name] || 0;
      if (!v) return;
      const hgt = (v / yMax) * plotH;
      yy -= hgt;
      g.append(s('rect', {x: x + 0.5, y: yy, width: Math.max(1, bw - 1), height: hgt, fill: color(si),
        class: 'seg', 'data-series': name}));
    });
    if (onPick) pressable(g, () => onPick(it));
    svg.append(g);
    const text = it.short || it.label, tw = textWidth(text, TICK_PX), cx = x + bw / 2;
    if (i % every === 0 && cx - tw / 2 >= 0 && cx + tw / 2 <= w) {
      svg.append(s('text', {x: cx, y: height - 6, class: 'tick', 'text-anchor': 'middle'}, text));
    }
  });
  return {svg, series};
}

/** A legend for a chart's series (ids), shown by `name(id)`: a list that wraps on a phone. */
export function legend(series, name = (x) => x) {
  const ul = document.createElement('ul');
  ul.className = 'legend';
  series.forEach((id, i) => {
    const li = document.createElement('li');
    li.dataset.series = id;
    li.append(s('svg', {width: 12, height: 12, 'aria-hidden': 'true'}, s('rect', {width: 12, height: 12, fill: color(i)})),
      document.createTextNode(' ' + name(id)));
    ul.append(li);
  });
  return ul;
}

/**
 * Node positions in a width x height box: a circle to start, then a few hundred steps of a small
 * force layout (repulsion between all nodes, springs along edges weighted by co-occurrence, pull
 * to centre), kept `margin` px from the sides. Deterministic: the same graph always lands the same way.
 */
export function layout(nodes, edges, width, height, margin = 30) {
  const n = nodes.length, cx = width / 2, cy = height / 2, pos = new Map();
  nodes.forEach((nd, i) => {
    const a = (2 * Math.PI * i) / Math.max(1, n);
    pos.set(nd.id, {x: cx + (width * 0.35) * Math.cos(a), y: cy + (height * 0.35) * Math.sin(a)});
  });
  const k = Math.sqrt((width * height) / Math.max(1, n)) * 0.5;
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
      f.x += (cx - p.x) * 0.08; f.y += (cy - p.y) * 0.08;
      const len = Math.sqrt(f.x * f.x + f.y * f.y) || 1, move = Math.min(len, 10 * cool + 0.5);
      p.x = Math.min(width - margin, Math.max(margin, p.x + (f.x / len) * move));
      p.y = Math.min(height - margin, Math.max(margin, p.y + (f.y / len) * move));
    }
  }
  return pos;
}

const overlaps = (a, b) => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
const hitsCircle = (box, c) => {
  const nx = Math.max(box.x, Math.min(c.x, box.x + box.w)), ny = Math.max(box.y, Math.min(c.y, box.y + box.h));
  return (nx - c.x) ** 2 + (ny - c.y) ** 2 < c.r * c.r;
};

/**
 * Where each node's label goes so that no two labels overlap and none covers a circle or leaves
 * the box: items [{id, x, y, r, w, h}] in priority order (most mentioned first) -> Map id ->
 * {x, y} (the label's top left) for the labels that found room; the rest are left out (the
 * node still names itself on hover, to screen readers, and in the list beside the graph).
 */
export function placeLabels(items, width, height) {
  const placed = new Map(), boxes = [];
  const circles = items.map((it) => ({x: it.x, y: it.y, r: it.r + 1}));
  for (const it of items) {
    const gap = 3;
    const spots = [[it.x - it.w / 2, it.y + it.r + gap], [it.x - it.w / 2, it.y - it.r - gap - it.h],
      [it.x + it.r + gap, it.y - it.h / 2], [it.x - it.r - gap - it.w, it.y - it.h / 2],
      [it.x + it.r * 0.7, it.y + it.r * 0.7], [it.x - it.r * 0.7 - it.w, it.y + it.r * 0.7],
      [it.x + it.r * 0.7, it.y - it.r * 0.7 - it.h], [it.x - it.r * 0.7 - it.w, it.y - it.r * 0.7 - it.h]];
    for (const [x, y] of spots) {
      const box = {x, y, w: it.w, h: it.h};
      if (x < 0 || y < 0 || x + it.w > width || y + it.h > height) continue;
      if (boxes.some((b) => overlaps(box, b)) || circles.some((c) => hitsCircle(box, c))) continue;
      boxes.push(box);
      placed.set(it.id, {x, y});
      break;
    }
  }
  return placed;
}

export const KIND_COLOR = {person: '#2b6cb0', place: '#38a169', organisation: '#805ad5', name: '#dd6b20'};

/**
 * The entity graph at `width` x `height` CSS pixels: node radius by mention count, edge width by
 * co-occurrence weight, labels placed so they never overlap (placeLabels).
 */
export function entityGraph(nodes, edges, {title, onPick, describe, width = 480, height = 400} = {}) {
  const pos = layout(nodes, edges, width, height, Math.min(40, width / 8));
  const maxCount = Math.max(1, ...nodes.map((n) => n.count));
  const maxW = Math.max(1, ...edges.map((e) => e.weight));
  const scale = Math.min(1, width / 480);
  const radius = (nd) => (5 + 15 * Math.sqrt(nd.count / maxCount)) * Math.max(0.7, scale);
  const svg = s('svg', {width, height, viewBox: `0 0 ${width} ${height}`, class: 'graph', role: 'group', 'aria-label': title},
    s('title', {}, title));
  const eg = s('g', {class: 'edges', 'aria-hidden': 'true'});
  for (const e of edges) {
    const a = pos.get(e.source), b = pos.get(e.target);
    if (!a || !b) continue;
    eg.append(s('line', {x1: a.x, y1: a.y, x2: b.x, y2: b.y, class: 'edge',
      'stroke-width': (1 + 4 * (e.weight / maxW)).toFixed(2)}));
  }
  svg.append(eg);
  const order = [...nodes].sort((a, b) => b.count - a.count || (a.label < b.label ? -1 : 1));
  const spots = placeLabels(order.map((nd) => ({id: nd.id, x: pos.get(nd.id).x, y: pos.get(nd.id).y, r: radius(nd),
    w: textWidth(nd.label, LABEL_PX) + 2, h: LABEL_PX + 3})), width, height);
  const labels = s('g', {class: 'labels', 'aria-hidden': 'true'});
  for (const nd of nodes) {
    const p = pos.get(nd.id), r = radius(nd);
    const label = describe ? describe(nd) : `${nd.label} (${nd.count})`;
    const g = s('g', {class: 'node', 'aria-label': label, 'data-id': nd.id},
      s('title', {}, label),
      s('circle', {cx: p.x, cy: p.y, r: r.toFixed(1), fill: KIND_COLOR[nd.kind] || '#718096'}));
    if (onPick) pressable(g, () => onPick(nd));
    svg.append(g);
    const spot = spots.get(nd.id);
    if (spot) {
      labels.append(s('text', {x: spot.x + 1, y: spot.y + LABEL_PX, class: 'nlabel', 'data-for': nd.id}, nd.label));
    }
  }
  svg.append(labels);   // above every circle and edge
  return svg;
}
