// Building the page from data without ever parsing data as HTML: text goes in as text nodes.
import {t} from './i18n.js';

const SVG_NS = 'http://www.w3.org/2000/svg';

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** An HTML element: h('button', {onclick: f, class: 'x'}, 'text', child...). */
export const h = (tag, attrs, ...children) => build(document.createElement(tag), attrs, children);
/** An SVG element, same calling shape. */
export const s = (tag, attrs, ...children) => build(document.createElementNS(SVG_NS, tag), attrs, children);

export function clear(el) { el.replaceChildren(); return el; }
/** Replace el's children, skipping null/false like h() does (native append would print "null"). */
export const fill = (el, ...children) => build(clear(el), {}, children);

/** Enter and Space activate an element that is not a native button (SVG bars, graph nodes). */
export function pressable(el, action) {
  el.setAttribute('tabindex', '0');
  el.setAttribute('role', 'button');
  el.addEventListener('click', action);
  el.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); action(e); }
  });
  return el;
}

let seq = 0;
/** A labelled form control: the label is tied to the control by id. */
export function field(label, control) {
  control.id = control.id || `f${++seq}`;
  return h('div', {class: 'field'}, h('label', {for: control.id}, label), control);
}

/**
 * Fill `box` by `work(box)`: a loading line at once (never an empty card while the data comes),
 * and, if the work fails, what went wrong with a button to try again (which clears it): `retry`,
 * by default this same load (cards fed by one request retry them all). A 401 is passed on: the
 * shell logs out.
 */
export async function loadInto(box, work, retry = () => loadInto(box, work, retry)) {
  box.setAttribute('aria-busy', 'true');
  fill(box, h('p', {class: 'loading', role: 'status'}, h('span', {class: 'spinner', 'aria-hidden': 'true'}), t('loading')));
  try {
    await work(box);
  } catch (err) {
    if (err.status === 401) throw err;
    fill(box, h('div', {class: 'load-error', role: 'alert'}, h('p', {}, t('load.failed', {msg: err.message || String(err)})),
      h('button', {type: 'button', class: 'retry', onclick: () => retry()}, t('retry'))));
  } finally {
    box.removeAttribute('aria-busy');
  }
}
