// A small, safe Markdown renderer for SKILL.md (front matter skipped, headings, lists, code, quotes,
// emphasis, links as text) and a line diff between two versions. Everything becomes DOM nodes; no HTML is parsed.
import {h} from './dom.js';

function inline(text) {
  const out = [];
  const re = /(`[^`]+`|\*\*[^*]+\*\*|\*[^*]+\*|\[[^\]]+\]\([^)\s]+\))/g;
  let last = 0, m;
  while ((m = re.exec(text))) {
    if (m.index > last) out.push(text.slice(last, m.index));
    const t = m[0];
    if (t.startsWith('`')) out.push(h('code', {}, t.slice(1, -1)));
    else if (t.startsWith('**')) out.push(h('strong', {}, t.slice(2, -2)));
    else if (t.startsWith('*')) out.push(h('em', {}, t.slice(1, -1)));
    else {
      // Links are shown, not followed: a skill's text is model-written and could point anywhere.
      const [, label, url] = t.match(/\[([^\]]+)\]\(([^)\s]+)\)/);
      out.push(h('span', {class: 'link', title: url}, label));
    }
    last = m.index + t.length;
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}

export function renderMarkdown(src) {
  const root = h('div', {class: 'md'});
  const lines = (src || '').replace(/\r\n/g, '\n').split('\n');
  let list = null, para = [];
  // A SKILL.md opens with YAML front matter (name, description): shown above the text already.
  if (lines[0]?.trim() === '---') {
    const end = lines.indexOf('---', 1);
    if (end > 0) lines.splice(0, end + 1);
  }
  const flush = () => {
    if (para.length) root.append(h('p', {}, inline(para.join(' '))));
    para = [];
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (line.startsWith('```')) {
      flush(); list = null;
      const code = [];
      for (i++; i < lines.length && !lines[i].startsWith('```'); i++) code.push(lines[i]);
      root.append(h('pre', {}, h('code', {}, code.join('\n'))));
      continue;
    }
    const head = line.match(/^(#{1,6})\s+(.*)$/);
    const item = line.match(/^\s*(?:[-*+]|(\d+)\.)\s+(.*)$/);
    if (head) {
      flush(); list = null;
      root.append(h(`h${Math.min(6, head[1].length + 2)}`, {}, inline(head[2])));
    } else if (item) {
      flush();
      const tag = item[1] ? 'ol' : 'ul';
      if (!list || list.tagName.toLowerCase() !== tag) { list = h(tag, {}); root.append(list); }
      list.append(h('li', {}, inline(item[2])));
    } else if (line.startsWith('>')) {
      flush(); list = null;
      root.append(h('blockquote', {}, inline(line.replace(/^>\s?/, ''))));
    } else if (!line.trim()) {
      flush(); list = null;
    } else {
      list = null;
      para.push(line.trim());
    }
  }
  flush();
  return root;
}

/** Line diff (longest common subsequence): [{op: ' '|'+'|'-', line}]. */
export function diffLines(a, b) {
  const x = (a || '').split('\n'), y = (b || '').split('\n');
  const n = x.length, m = y.length;
  const L = Array.from({length: n + 1}, () => new Int32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) {
    L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  }
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) { out.push({op: ' ', line: x[i]}); i++; j++; }
    else if (L[i + 1][j] >= L[i][j + 1]) out.push({op: '-', line: x[i++]});
    else out.push({op: '+', line: y[j++]});
  }
  while (i < n) out.push({op: '-', line: x[i++]});
  while (j < m) out.push({op: '+', line: y[j++]});
  return out;
}

export function renderDiff(a, b) {
  return h('pre', {class: 'diff'}, diffLines(a, b).map((d) =>
    h('span', {class: d.op === '+' ? 'add' : d.op === '-' ? 'del' : 'same'}, `${d.op} ${d.line}\n`)));
}
