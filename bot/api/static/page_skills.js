// Tasks and skills: task summaries; a skill's SKILL.md rendered, its versions with changelog and a diff.
import {get} from './api.js';
import {clear, field, fill, h, loadInto} from './dom.js';
import {dateTime, num} from './format.js';
import {t} from './i18n.js';
import {renderDiff, renderMarkdown} from './markdown.js';

function skillView(sk) {
  const versions = [...sk.versions].sort((a, b) => a.version - b.version);
  const opts = () => versions.map((v) => h('option', {value: v.version}, `v${v.version}`));
  const from = h('select', {id: 'diff-from'}, opts()), to = h('select', {id: 'diff-to'}, opts());
  const diffBox = h('div', {id: 'skill-diff'});
  const showDiff = () => {
    const a = versions.find((v) => String(v.version) === from.value), b = versions.find((v) => String(v.version) === to.value);
    clear(diffBox).append(a && b ? renderDiff(a.content, b.content) : '');
  };
  if (versions.length) {
    from.value = String(versions[Math.max(0, versions.length - 2)].version);
    to.value = String(versions[versions.length - 1].version);
  }
  from.addEventListener('change', showDiff);
  to.addEventListener('change', showDiff);
  showDiff();
  return h('article', {class: 'card skill', 'aria-labelledby': 'skill-title'},
    h('h2', {id: 'skill-title', class: 'userdata'}, `${sk.name} · v${sk.version}`),
    h('p', {}, sk.description || ''),
    renderMarkdown(sk.content),
    h('h3', {}, t('skills.versions')),
    h('ol', {class: 'versions'}, versions.map((v) => h('li', {}, h('strong', {}, `v${v.version}`), ` ${dateTime(v.created_at)} — `,
      v.changelog || t('skills.no_changelog')))),
    versions.length > 1 ? h('div', {}, h('h3', {}, t('skills.diff')),
      h('div', {class: 'filters'}, field(t('skills.from'), from), field(t('skills.to'), to)), diffBox) : null);
}

export async function skillsPage(root) {
  const tasksBox = h('section', {class: 'card', 'aria-labelledby': 'tasks-h'});
  const skillsBox = h('section', {class: 'card', 'aria-labelledby': 'skills-h'});
  const detail = h('div', {id: 'skill-detail'});
  const openSkill = (sk) => loadInto(detail, async () => {
    fill(detail, skillView(await get(`/api/v1/skills/${encodeURIComponent(sk.name)}`)));
    detail.querySelector('h2').setAttribute('tabindex', '-1');
    detail.querySelector('h2').focus();
  });
  root.append(tasksBox, skillsBox, detail);
  await Promise.all([loadInto(tasksBox, async () => {
    const tasks = await get('/api/v1/tasks');
    fill(tasksBox, h('h2', {id: 'tasks-h'}, t('tasks.title')),
      tasks.tasks.length ? h('ul', {class: 'tasks'}, tasks.tasks.map((x) => h('li', {},
        h('span', {class: `badge st-${x.status}`}, t(`task.${x.status}`, {}, x.status)), ' ', h('strong', {}, x.title || x.id),
        h('p', {}, x.summary || t('tasks.no_summary')),
        h('small', {}, `${t('tasks.chunks', {n: num(x.chunk_count)})} · ${dateTime(x.started_at)} → ${dateTime(x.last_at)}`))))
        : h('p', {class: 'empty'}, t('tasks.none')));
  }), loadInto(skillsBox, async () => {
    const skills = await get('/api/v1/skills');
    fill(skillsBox, h('h2', {id: 'skills-h'}, t('skills.title')),
      skills.skills.length ? h('ul', {class: 'skills'}, skills.skills.map((sk) => h('li', {},
        h('button', {type: 'button', class: 'linkish userdata', onclick: () => openSkill(sk)}, sk.name),
        ` v${sk.version} · ${t('skills.used', {n: num(sk.usage_count)})}${sk.description ? ` — ${sk.description}` : ''}`)))
        : h('p', {class: 'empty'}, t('skills.none')));
  })]);
}
