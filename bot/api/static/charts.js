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
 * to centre), then the drawing stretched to fill the box `margin` px from its sides (clamping to
 * the box instead piled the nodes along its walls). Deterministic: the same graph always lands the same way.
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
      const f = (d / k) * Math.min(3, 0.5 + e.weight * 0.25) * 0.05;
      force.get(e.source).x += dx * f; force.get(e.source).y += dy * f;
      force.get(e.target).x -= dx * f; force.get(e.target).y -= dy * f;
    }
    const cool = 1 - step / 300;
    for (const nd of nodes) {
      const p = pos.get(nd.id), f = force.get(nd.id);
      f.x += (cx - p.x) * 0.5; f.y += (cy - p.y) * 0.5;
      const len = Math.sqrt(f.x * f.x + f.y * f.y) || 1, move = Math.min(len, 10 * cool + 0.5);
      p.x += (f.x / len) * move;
      p.y += (f.y / len) * move;
    }
  }
  const xs = [...pos.values()].map((p) => p.x), ys = [...pos.values()].map((p) => p.y);
  const fit = (v, lo, hi, size) => (hi - lo < 1 ? size / 2 : margin + ((v - lo) / (hi - lo)) * (size - 2 * margin));
  const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  for (const p of pos.values()) { p.x = fit(p.x, x0, x1, width); p.y = fit(p.y, y0, y1, height); }
  return pos;
}

const overlaps = (a, b) => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
const hitsCircle = (box, c) => {
  const nx = Math.max(box.x, Math.min(c.x, box.x + box.w)), ny = Math.max(box.y, Math.min(c.y, box.y + box.h));
  return (nx - c.x) ** 2 + (ny - c.y) ** 2 < c.r * c.r;
};

/**
 * Where each node's label goes so that no two labels overlap, none touches its own circle or
 * leaves the box, and (wherever there is room) none covers the middle (3/4 of the radius) of another circle: items
 * [{id, x, y, r, w, h, shortW}] in priority order (most mentioned first) -> Map id -> {x, y, short}
 * (the label's top left; short: only its shortened form, shortW wide, found room) for the labels
 * that found room; the rest are left out (the node still names itself on hover, to screen readers,
 * and in the entity list beside the graph).
 */
export function placeLabels(items, width, height) {
  const placed = new Map(), boxes = [];
  const cores = items.map((it) => ({id: it.id, x: it.x, y: it.y, r: it.r * 0.75}));
  const fits = (it, box, strict) => box.x >= 0 && box.y >= 0 && box.x + box.w <= width && box.y + box.h <= height
    && !hitsCircle(box, {x: it.x, y: it.y, r: it.r + 1}) && !boxes.some((b) => overlaps(box, b))
    && (!strict || !cores.some((c) => c.id !== it.id && hitsCircle(box, c)));
  // Whole, then shortened; only where neither finds a clear spot may a label lie over another's
  // circle (its halo keeps it readable, and clicks pass through it to the circle).
  const tries = (it) => [[it.w, false, true], ...(it.shortW ? [[it.shortW, true, true]] : []), [it.w, false, false],
    ...(it.shortW ? [[it.shortW, true, false]] : [])];
  for (const it of items) {
    for (const [w, short, strict] of tries(it)) {
      const box = labelSpots({...it, w}).map(([x, y]) => ({x, y, w, h: it.h})).find((bx) => fits(it, bx, strict));
      if (box) {
        boxes.push(box);
        placed.set(it.id, {x: box.x, y: box.y, short});
        break;
      }
    }
  }
  return placed;
}

/** Where a w x h label may sit around its circle: beside it (below, above, right, left, the
 * corners), then shifted along it, then the same a line further out. */
function labelSpots({x, y, r, w, h}) {
  const spots = [];
  for (const gap of [3, 3 + h]) {
    const below = y + r + gap, above = y - r - gap - h, mid = y - h / 2, d = r * 0.71 + gap;
    spots.push([x - w / 2, below], [x - w / 2, above], [x + r + gap, mid], [x - r - gap - w, mid],
      [x + d, y + d], [x - d - w, y + d], [x + d, y - d - h], [x - d - w, y - d - h],
      [x - r, below], [x + r - w, below], [x - r, above], [x + r - w, above]);
  }
  return spots;
}

const SHORT = 10;
/** A long label cut to SHORT characters and an ellipsis (tried when the whole one finds no room). */
export const shortLabel = (label) => (label.length > SHORT + 1 ? `${label.slice(0, SHORT).trimEnd()}…` : null);

export const KIND_COLOR = {person: '#2b6cb0', place: '#38a169', organisation: '#805ad5', name: '#dd6b20'};

/**
 * The entity graph at `width` x `height` CSS pixels: node radius by mention count, edge width by
 * co-occurrence weight, labels placed so they never overlap (placeLabels).
 */
export function entityGraph(nodes, edges, {title, onPick, describe, width = 480, height = 400} = {}) {
  const pos = layout(nodes, edges, width, height, Math.min(40, width / 8));
  const maxCount = Math.max(1, ...nodes.map((n) => n.count));
  const maxW = Math.max(1, ...edges.map((e) => e.weight));
  // The biggest circle shrinks with the room each node has: a quarter of its share of the picture.
  const biggest = Math.max(8, Math.min(20, Math.sqrt((width * height) / Math.max(1, nodes.length)) / 4));
  const radius = (nd) => 4 + (biggest - 4) * Math.sqrt(nd.count / maxCount);
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
    w: textWidth(nd.label, LABEL_PX) + 2, h: LABEL_PX + 3,
    shortW: shortLabel(nd.label) && textWidth(shortLabel(nd.label), LABEL_PX) + 2})), width, height);
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
      labels.append(s('text', {x: spot.x + 1, y: spot.y + LABEL_PX, class: 'nlabel', 'data-for': nd.id},
        spot.short ? shortLabel(nd.label) : nd.label));
    }
  }
  svg.append(labels);   // above every circle and edge
  return svg;
}
