// Numbers and dates through Intl in the chosen language (never the browser's), and the
// localised date field that replaces <input type=date> (whose mm/dd/yyyy follows the browser).
import {h} from './dom.js';
import {locale, t} from './i18n.js';

const formats = new Map();
/** One Intl formatter per locale and options (building them is not free). */
function intl(Ctor, opts) {
  const key = `${Ctor.name}|${locale()}|${JSON.stringify(opts)}`;
  if (!formats.has(key)) formats.set(key, new Ctor(locale(), opts));
  return formats.get(key);
}

export const num = (n) => intl(Intl.NumberFormat, {}).format(n);
export const fixed = (n, digits) => intl(Intl.NumberFormat, {minimumFractionDigits: digits, maximumFractionDigits: digits}).format(n);
/** 1.2K / 1.2万: axis ticks. */
export const compact = (n) => intl(Intl.NumberFormat, {notation: 'compact', maximumFractionDigits: 1}).format(n);
export const usd = (n) => intl(Intl.NumberFormat, {style: 'currency', currency: 'USD', minimumFractionDigits: 2,
  maximumFractionDigits: 4}).format(n);

/** The server's timestamps are UTC; a naive one (no offset) is UTC too. */
export function asDate(iso) {
  if (iso instanceof Date) return iso;
  return new Date(/[zZ]|[+-]\d\d:?\d\d$/.test(iso) ? iso : `${iso}Z`);
}

/** A moment, in the reader's time zone: "Dec 2, 2026, 7:56 AM" / "2026年12月2日 07:56". */
export const dateTime = (iso) => (iso ? intl(Intl.DateTimeFormat, {dateStyle: 'medium', timeStyle: 'short'}).format(asDate(iso)) : '');
/** A date in the reader's time zone. */
export const dateOnly = (d) => intl(Intl.DateTimeFormat, {dateStyle: 'medium'}).format(asDate(d));

const YMD = /^(\d{4})-(\d{2})-(\d{2})/;
const utcDay = (ymd) => { const [, y, m, d] = ymd.match(YMD); return new Date(Date.UTC(+y, +m - 1, +d)); };
/** A calendar day the server counted in UTC ("2026-12-02" or a bucket's start): "Dec 2, 2026" / "2026年12月2日". */
export const day = (ymd) => intl(Intl.DateTimeFormat, {dateStyle: 'medium', timeZone: 'UTC'}).format(utcDay(ymd));
/** The same day, short, for a chart's axis: "Dec 2" / "12月2日". */
export const shortDay = (ymd) => intl(Intl.DateTimeFormat, {month: 'short', day: 'numeric', timeZone: 'UTC'}).format(utcDay(ymd));

// --- the date field ---------------------------------------------------------------------------

const pad = (n) => String(n).padStart(2, '0');
const isoOf = (y, m, d) => {
  const dt = new Date(Date.UTC(y, m - 1, d));
  // Date.UTC rolls 2026-02-31 over into March: a day that does not exist is no date.
  return dt.getUTCFullYear() === y && dt.getUTCMonth() === m - 1 && dt.getUTCDate() === d && y >= 1000 && y <= 9999
    ? `${y}-${pad(m)}-${pad(d)}` : null;
};

let monthNames = null;
/** Month names and abbreviations of both languages' Intl, lower case -> month number. */
function months() {
  if (!monthNames) {
    monthNames = new Map();
    for (const loc of ['en', 'zh-CN']) {
      for (const style of ['long', 'short']) {
        const f = new Intl.DateTimeFormat(loc, {month: style, timeZone: 'UTC'});
        for (let m = 1; m <= 12; m++) monthNames.set(f.format(new Date(Date.UTC(2000, m - 1, 1))).toLowerCase().replace('.', ''), m);
      }
    }
    monthNames.set('sept', 9);
  }
  return monthNames;
}

/**
 * A typed date -> "YYYY-MM-DD", "" for an empty field, or null for what is not a date.
 * Takes ISO (2026-12-02, 2026/12/2, 2026.12.2), Chinese (2026年12月2日), month names in either
 * order (Dec 2, 2026; 2 December 2026), and, in English, the US order 12/2/2026; whatever
 * dateOnly() writes in either language reads back as the same day.
 */
export function parseDate(text, language) {
  const s = String(text ?? '').trim().toLowerCase().replace(/[,，]/g, ' ').replace(/\s+/g, ' ');
  if (!s) return '';
  let m = s.match(/^(\d{4})\s*[-/.年\s]\s*(\d{1,2})\s*[-/.月\s]\s*(\d{1,2})\s*日?$/);
  if (m) return isoOf(+m[1], +m[2], +m[3]);
  m = s.match(/^(\d{1,2})\s*[/.-]\s*(\d{1,2})\s*[/.-]\s*(\d{4})$/);
  if (m) return language === 'zh' ? isoOf(+m[3], +m[2], +m[1]) : isoOf(+m[3], +m[1], +m[2]);
  const words = s.replace(/\./g, '').split(' ');
  const named = words.map((w) => months().get(w));
  const at = named.findIndex((x) => x !== undefined);
  if (at >= 0 && words.length === 3) {
    const rest = words.filter((_, i) => i !== at).map((w) => Number(w.replace(/(st|nd|rd|th)$/, '')));
    const [a, b] = rest;
    if (Number.isInteger(a) && Number.isInteger(b)) return a > 31 ? isoOf(a, named[at], b) : isoOf(b, named[at], a);
  }
  return null;
}

/** "YYYY-MM-DD" as the chosen language writes a date. */
export const showDate = (ymd) => (ymd ? day(ymd) : '');

/**
 * A labelled text field for a date in the chosen language: it shows and accepts dates as that
 * language writes them (and ISO), marks what it cannot read, and gives its value as "YYYY-MM-DD".
 */
export function dateField(label, id) {
  const today = new Date().toISOString().slice(0, 10);
  // The example is the placeholder (and the field's description); the line under it speaks only of a mistake.
  const example = t('date.example', {a: showDate(today), b: today});
  const hint = h('small', {class: 'hint invalid', id: `${id}-hint`, role: 'alert'});
  const input = h('input', {type: 'text', id, inputmode: 'text', autocomplete: 'off', spellcheck: 'false',
    placeholder: showDate(today), title: example, 'aria-describedby': `${id}-hint`});
  const check = () => {
    const v = parseDate(input.value, document.documentElement.lang.startsWith('zh') ? 'zh' : 'en');
    const bad = v === null;
    input.setAttribute('aria-invalid', String(bad));
    hint.textContent = bad ? t('date.invalid', {a: showDate(today)}) : '';
    if (v) input.value = showDate(v);
    return v;
  };
  input.addEventListener('change', check);
  const box = h('div', {class: 'field'}, h('label', {for: id}, label), input, hint);
  return {
    box, input,
    /** "YYYY-MM-DD", "" (empty) or null (not a date; the field says so). */
    value: check,
    set(ymd) { input.value = showDate(ymd); check(); },
  };
}
