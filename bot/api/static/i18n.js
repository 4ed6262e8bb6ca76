// Every string of the dashboard, in English and Chinese; the language follows the browser
// (navigator.language) until the picker chooses one, which is remembered.
const STRINGS = {
  en: {
    skip: 'Skip to content', language: 'Language', logout: 'Log out', cancel: 'Cancel', confirm: 'Confirm',
    logged_out: 'Logged out.', error: 'Error', loading: 'Loading…', save: 'Save', edit: 'Edit', any: 'Any',
    prev: 'Previous', next: 'Next', since: 'From', until: 'To',
    'login.title': 'Log in to memgate', 'login.help': 'Paste an API key (memgate keys create …). It is exchanged for a session cookie and not kept in the browser.',
    'login.key': 'API key', 'login.submit': 'Log in', 'login.failed': 'That key was not accepted (unknown, revoked or expired).',
    'page.memories': 'Memories', 'page.pulse': 'Pulse', 'page.insight': 'Insight', 'page.skills': 'Tasks & skills',
    'page.usage': 'Usage', 'page.admin': 'Admin',
    'kind.fact': 'fact', 'kind.chunk': 'message', 'kind.task': 'task', 'kind.skill': 'skill',
    'mem.search': 'Search', 'mem.kind': 'Kind', 'mem.category': 'Category', 'mem.tag': 'Tag', 'mem.pinned': 'Pinned',
    'mem.not_pinned': 'Not pinned', 'mem.go': 'Search', 'mem.score': 'score', 'mem.text': 'Text', 'mem.tags': 'Tags (comma separated)',
    'mem.saved': 'Saved.', 'mem.stale': 'Someone changed this memory meanwhile: reload and try again.',
    'mem.pin': 'Pin', 'mem.unpin': 'Unpin', 'mem.pinned_ok': 'Pinned.', 'mem.unpinned': 'Unpinned.',
    'mem.forget': 'Forget', 'mem.forget_q': 'Forget this memory for good? “{text}”', 'mem.forgotten': 'Forgot {n}.',
    'mem.bulk_forget': 'Forget selected', 'mem.bulk_q': 'Forget the {n} selected memories for good?',
    'mem.select': 'Select', 'mem.select_some': 'Tick the memories to forget first.', 'mem.sources': 'Sources',
    'mem.source_gone': '(this source message is gone)', 'mem.none': 'No memories here.',
    'mem.count': '{from}–{to} of {total}',
    'pulse.day': 'Day', 'pulse.week': 'Week', 'pulse.bucket': 'Bucket', 'pulse.window': 'Period',
    'pulse.last_days': 'Last {n} days', 'pulse.chart': 'Memories over time, by category', 'pulse.total': '{n} memories',
    'pulse.bar': '{date}: {n} memories', 'pulse.hint': 'Choose a bar to list that period’s memories.',
    'pulse.top_tags': 'Top tags', 'pulse.no_tags': 'No tags yet.', 'pulse.period': 'From {from}: {n} memories',
    'cat.none': 'no category', 'cat.about_you': 'about you',
    'insight.limit': 'Entities', 'insight.chart': 'Entities and how often they appear together',
    'insight.node': '{label} ({kind}), in {n} memories', 'insight.hint': 'Choose an entity to list its memories.',
    'insight.none': 'No entities yet: the graph grows as memories name people, places and things.',
    'insight.entity': '{label}: {n} memories', 'insight.edges': '{n} links', 'insight.pair': 'Pair',
    'insight.weight': 'Together', 'insight.lift': 'Lift',
    'ent.person': 'person', 'ent.place': 'place', 'ent.org': 'organisation', 'ent.product': 'product', 'ent.date': 'date', 'ent.name': 'other name',
    'tasks.title': 'Tasks', 'tasks.none': 'No tasks yet.', 'tasks.no_summary': '(no summary yet)', 'tasks.chunks': '{n} messages',
    'task.active': 'active', 'task.completed': 'completed', 'task.closed': 'closed', 'task.open': 'open', 'task.skipped': 'skipped',
    'skills.title': 'Skills', 'skills.none': 'No skills yet.', 'skills.used': 'used {n}×', 'skills.versions': 'Versions',
    'skills.no_changelog': '(no changelog)', 'skills.diff': 'Diff between versions', 'skills.from': 'From', 'skills.to': 'To',
    'usage.calls_chart': 'LLM calls per day, by purpose', 'usage.tokens_chart': 'Tokens per day, by purpose', 'usage.calls': 'calls',
    'usage.tokens': 'tokens', 'usage.table': 'Details', 'usage.day': 'Day', 'usage.purpose': 'Purpose', 'usage.model': 'Model',
    'usage.prompt': 'Prompt tokens', 'usage.completion': 'Completion tokens', 'usage.cost': 'Cost', 'usage.none': 'No LLM calls in this period.',
    'usage.total_cost': 'Known cost: {cost}', 'usage.scope': 'These are the calls made for this space: its replies and their memory work (counts only, never text).',
    'usage.injected_chart': 'Memory tokens injected per turn (daily mean)', 'usage.per_turn': 'Per turn (mean)',
    'usage.injected_hint': 'The memory block recall adds to each reply\'s prompt, in estimated tokens.',
    'usage.turns': 'Turns', 'usage.p95': 'p95', 'usage.max': 'Max', 'usage.injected_total': 'Total injected',
    'usage.no_turns': 'No turns in this period.',
    'admin.pairing': 'Pairing requests', 'admin.code': 'Code', 'admin.who': 'Who', 'admin.requested': 'Requested',
    'admin.expires': 'Expires', 'admin.actions': 'Actions', 'admin.approve': 'Approve', 'admin.deny': 'Deny',
    'admin.approved': 'Approved {code}.', 'admin.denied': 'Denied {code}.', 'admin.no_pairing': 'No one is waiting.',
    'admin.people': 'People and roles', 'admin.space': 'Space', 'admin.identities': 'Linked identities', 'admin.role': 'Role',
    'admin.role_of': 'Role of {who}', 'admin.role_set': '{who} is now {role}.', 'admin.no_people': 'No people yet.',
    'admin.public': 'Public space ({n})', 'admin.health': 'Health', 'admin.database': 'Database', 'admin.queue': 'Ingest queue',
    'admin.channels': 'Channels', 'admin.memories': 'Memories', 'admin.spaces': 'Spaces', 'admin.keys': 'Live keys',
    'admin.jobs': 'Jobs', 'admin.job': 'Job', 'admin.runs': 'Runs', 'admin.failures': 'Failures', 'admin.last_run': 'Last run',
    'admin.last_error': 'Last error', 'admin.kind': 'Kind', 'admin.status': 'Status', 'admin.no_scheduled': 'No scheduled jobs.',
    'role.owner': 'owner', 'role.admin': 'admin', 'role.user': 'user', 'role.blocked': 'blocked',
    'health.ok': 'healthy', 'health.degraded': 'degraded',
    retry: 'Try again', 'load.failed': 'This part could not be loaded ({msg}).',
    'cat.preferences': 'preferences', 'cat.people': 'people', 'cat.experiences': 'experiences', 'cat.plans': 'plans',
    'cat.routines': 'routines', 'cat.constraints': 'constraints',
    'purpose.reply': 'replies', 'purpose.ingest': 'memory capture', 'purpose.reconcile': 'memory merging',
    'purpose.skill_decide': 'skill review', 'purpose.skill_write': 'skill writing', 'purpose.task_boundary': 'task detection',
    'purpose.task_summary': 'task summaries', 'purpose.doctor': 'health check', 'purpose.onboard': 'setup',
    'job.close_tasks': 'Close idle tasks', 'job.evolve_skills': 'Improve skills', 'job.rebuild_fts': 'Rebuild the keyword index',
    'job.flush_usage': 'Save usage counts', 'job.retry_ingest': 'Retry memory capture',
    'jobkind.ingest': 'memory capture', 'jobkind.import': 'import', 'jobkind.reembed': 're-embedding',
    'jobstatus.queued': 'queued', 'jobstatus.running': 'running', 'jobstatus.done': 'done', 'jobstatus.failed': 'failed',
    'ent.organisation': 'organisation', 'insight.kinds': 'Kinds of entity', 'insight.all': 'All entities ({n})',
    'mem.add': 'Add a memory', 'mem.add_text': 'What should be remembered', 'mem.add_pin': 'Pin it', 'mem.added': 'Remembered.',
    'mem.read_only': 'This key may read only: adding, editing and forgetting need a write key.',
    'date.example': 'e.g. {a} or {b}', 'date.invalid': 'Not a date: write it like {a}.',
    'admin.keys_title': 'API keys', 'admin.key': 'Key', 'admin.key_name': 'Name', 'admin.scope': 'Access', 'admin.created': 'Created',
    'admin.state': 'State', 'key.live': 'live', 'key.revoked': 'revoked', 'key.expired': 'expired',
    'scope.read': 'read', 'scope.write': 'read and write', 'scope.admin': 'admin',
    'admin.revoke': 'Revoke', 'admin.revoke_q': 'Revoke the key {prefix}…? Whoever uses it loses access at once.',
    'admin.revoke_self': 'This is the key you are logged in with: revoking it logs you out.', 'admin.revoked': 'Revoked {prefix}….',
    'admin.new_key': 'Create a key', 'admin.for': 'Whose memories', 'admin.lifetime': 'Valid for', 'admin.never': 'no expiry',
    'admin.days': '{n} days', 'admin.create': 'Create key', 'admin.no_keys': 'No keys yet.', 'admin.this_session': '(this session)',
    'admin.key_once': 'Copy this key now: it is shown this once and cannot be shown again.', 'admin.copy': 'Copy',
    'admin.copied': 'Copied.', 'admin.key_saved': 'I have saved it', 'admin.choose_person': 'Choose a person',
    'admin.need_person': 'Choose whose memories the key reaches.', 'admin.public_add': 'Add a shared note',
    'admin.public_text': 'Shared note (everyone’s recall may bring it up)', 'admin.public_added': 'Added to the public space.',
    'admin.key_made': 'Key {prefix}… created.', 'admin.tags': 'Tags (comma separated)',
    'channel.telegram': 'Telegram', 'channel.wechat': 'WeChat', 'channel.console': 'terminal', 'channel.api': 'API',
    pages: 'Pages', sep: ', ',
  },
  zh: {
    skip: '跳到正文', language: '语言', logout: '退出登录', cancel: '取消', confirm: '确认',
    logged_out: '已退出登录。', error: '出错', loading: '加载中…', save: '保存', edit: '编辑', any: '全部',
    prev: '上一页', next: '下一页', since: '起', until: '止',
    'login.title': '登录 memgate', 'login.help': '粘贴一个 API 密钥（memgate keys create …）。它会换成会话 Cookie，浏览器不保存密钥本身。',
    'login.key': 'API 密钥', 'login.submit': '登录', 'login.failed': '密钥无效（未知、已吊销或已过期）。',
    'page.memories': '记忆', 'page.pulse': '脉搏', 'page.insight': '洞察', 'page.skills': '任务与技能',
    'page.usage': '用量', 'page.admin': '管理',
    'kind.fact': '事实', 'kind.chunk': '消息', 'kind.task': '任务', 'kind.skill': '技能',
    'mem.search': '搜索', 'mem.kind': '类型', 'mem.category': '分类', 'mem.tag': '标签', 'mem.pinned': '已置顶',
    'mem.not_pinned': '未置顶', 'mem.go': '搜索', 'mem.score': '得分', 'mem.text': '内容', 'mem.tags': '标签（逗号分隔）',
    'mem.saved': '已保存。', 'mem.stale': '这条记忆刚被改过：请刷新后重试。',
    'mem.pin': '置顶', 'mem.unpin': '取消置顶', 'mem.pinned_ok': '已置顶。', 'mem.unpinned': '已取消置顶。',
    'mem.forget': '遗忘', 'mem.forget_q': '永久遗忘这条记忆？“{text}”', 'mem.forgotten': '已遗忘 {n} 条。',
    'mem.bulk_forget': '遗忘所选', 'mem.bulk_q': '永久遗忘所选的 {n} 条记忆？',
    'mem.select': '选择', 'mem.select_some': '请先勾选要遗忘的记忆。', 'mem.sources': '来源',
    'mem.source_gone': '（这条来源消息已不存在）', 'mem.none': '这里没有记忆。',
    'mem.count': '第 {from}–{to} 条，共 {total} 条',
    'pulse.day': '按天', 'pulse.week': '按周', 'pulse.bucket': '粒度', 'pulse.window': '时段',
    'pulse.last_days': '最近 {n} 天', 'pulse.chart': '记忆随时间的变化（按分类堆叠）', 'pulse.total': '共 {n} 条记忆',
    'pulse.bar': '{date}：{n} 条记忆', 'pulse.hint': '选择一根柱子，列出那段时间的记忆。',
    'pulse.top_tags': '热门标签', 'pulse.no_tags': '还没有标签。', 'pulse.period': '自 {from}：{n} 条记忆',
    'cat.none': '未分类', 'cat.about_you': '关于你',
    'insight.limit': '实体数', 'insight.chart': '实体及其共同出现的频率',
    'insight.node': '{label}（{kind}），出现在 {n} 条记忆中', 'insight.hint': '选择一个实体，列出提到它的记忆。',
    'insight.none': '还没有实体：记忆里提到人、地点和事物后，图会逐渐长出来。',
    'insight.entity': '{label}：{n} 条记忆', 'insight.edges': '{n} 条关联', 'insight.pair': '实体对',
    'insight.weight': '共现次数', 'insight.lift': '提升度',
    'ent.person': '人物', 'ent.place': '地点', 'ent.org': '机构', 'ent.product': '产品', 'ent.date': '日期', 'ent.name': '其他专名',
    'tasks.title': '任务', 'tasks.none': '还没有任务。', 'tasks.no_summary': '（还没有摘要）', 'tasks.chunks': '{n} 条消息',
    'task.active': '进行中', 'task.completed': '已完成', 'task.closed': '已关闭', 'task.open': '进行中', 'task.skipped': '已跳过',
    'skills.title': '技能', 'skills.none': '还没有技能。', 'skills.used': '用过 {n} 次', 'skills.versions': '版本',
    'skills.no_changelog': '（无更新说明）', 'skills.diff': '版本对比', 'skills.from': '从', 'skills.to': '到',
    'usage.calls_chart': '每天的 LLM 调用（按用途）', 'usage.tokens_chart': '每天的 token（按用途）', 'usage.calls': '次调用',
    'usage.tokens': '个 token', 'usage.table': '明细', 'usage.day': '日期', 'usage.purpose': '用途', 'usage.model': '模型',
    'usage.prompt': '提示 token', 'usage.completion': '生成 token', 'usage.cost': '费用', 'usage.none': '这段时间没有 LLM 调用。',
    'usage.total_cost': '已知费用：{cost}', 'usage.scope': '这是为这个空间发出的调用：回复和记忆处理（只有计数，没有内容）。',
    'usage.injected_chart': '每轮注入的记忆 token（日均）', 'usage.per_turn': '每轮（平均）',
    'usage.injected_hint': '召回加进每次回复提示里的记忆块，按估算的 token 计。',
    'usage.turns': '轮数', 'usage.p95': 'p95', 'usage.max': '最多', 'usage.injected_total': '注入合计',
    'usage.no_turns': '这段时间没有对话。',
    'admin.pairing': '配对请求', 'admin.code': '配对码', 'admin.who': '谁', 'admin.requested': '请求时间',
    'admin.expires': '过期时间', 'admin.actions': '操作', 'admin.approve': '批准', 'admin.deny': '拒绝',
    'admin.approved': '已批准 {code}。', 'admin.denied': '已拒绝 {code}。', 'admin.no_pairing': '没有人在等待。',
    'admin.people': '人员与角色', 'admin.space': '空间', 'admin.identities': '关联的身份', 'admin.role': '角色',
    'admin.role_of': '{who} 的角色', 'admin.role_set': '{who} 现在是{role}。', 'admin.no_people': '还没有人员。',
    'admin.public': '公共空间（{n}）', 'admin.health': '健康状况', 'admin.database': '数据库', 'admin.queue': '写入队列',
    'admin.channels': '渠道', 'admin.memories': '记忆', 'admin.spaces': '空间数', 'admin.keys': '有效密钥',
    'admin.jobs': '作业', 'admin.job': '作业', 'admin.runs': '运行次数', 'admin.failures': '失败次数', 'admin.last_run': '上次运行',
    'admin.last_error': '上次错误', 'admin.kind': '类型', 'admin.status': '状态', 'admin.no_scheduled': '没有定时作业。',
    'role.owner': '所有者', 'role.admin': '管理员', 'role.user': '用户', 'role.blocked': '已屏蔽',
    'health.ok': '正常', 'health.degraded': '降级',
    retry: '重试', 'load.failed': '这一部分没能加载（{msg}）。',
    'cat.preferences': '偏好', 'cat.people': '身边的人', 'cat.experiences': '经历', 'cat.plans': '计划',
    'cat.routines': '日常习惯', 'cat.constraints': '限制与禁忌',
    'purpose.reply': '回复', 'purpose.ingest': '记忆提取', 'purpose.reconcile': '记忆合并',
    'purpose.skill_decide': '技能评估', 'purpose.skill_write': '技能撰写', 'purpose.task_boundary': '任务识别',
    'purpose.task_summary': '任务总结', 'purpose.doctor': '健康检查', 'purpose.onboard': '初始设置',
    'job.close_tasks': '关闭闲置任务', 'job.evolve_skills': '改进技能', 'job.rebuild_fts': '重建关键词索引',
    'job.flush_usage': '保存用量统计', 'job.retry_ingest': '重试记忆提取',
    'jobkind.ingest': '记忆提取', 'jobkind.import': '导入', 'jobkind.reembed': '重新向量化',
    'jobstatus.queued': '排队中', 'jobstatus.running': '运行中', 'jobstatus.done': '已完成', 'jobstatus.failed': '失败',
    'ent.organisation': '机构', 'insight.kinds': '实体类型', 'insight.all': '全部实体（{n}）',
    'mem.add': '添加记忆', 'mem.add_text': '要记住的内容', 'mem.add_pin': '置顶', 'mem.added': '已记住。',
    'mem.read_only': '这个密钥只能读取：添加、编辑和遗忘需要可写的密钥。',
    'date.example': '例如 {a} 或 {b}', 'date.invalid': '不是有效的日期：请写成 {a} 这样。',
    'admin.keys_title': 'API 密钥', 'admin.key': '密钥', 'admin.key_name': '名称', 'admin.scope': '权限', 'admin.created': '创建时间',
    'admin.state': '状态', 'key.live': '有效', 'key.revoked': '已吊销', 'key.expired': '已过期',
    'scope.read': '只读', 'scope.write': '读写', 'scope.admin': '管理',
    'admin.revoke': '吊销', 'admin.revoke_q': '吊销密钥 {prefix}…？正在使用它的人会立刻失去访问权限。',
    'admin.revoke_self': '这是你当前登录所用的密钥：吊销后你会被退出登录。', 'admin.revoked': '已吊销 {prefix}…。',
    'admin.new_key': '创建密钥', 'admin.for': '访问谁的记忆', 'admin.lifetime': '有效期', 'admin.never': '永不过期',
    'admin.days': '{n} 天', 'admin.create': '创建密钥', 'admin.no_keys': '还没有密钥。', 'admin.this_session': '（当前会话）',
    'admin.key_once': '请现在复制这个密钥：它只显示这一次，之后无法再次查看。', 'admin.copy': '复制',
    'admin.copied': '已复制。', 'admin.key_saved': '我已保存', 'admin.choose_person': '选择一个人',
    'admin.need_person': '请选择这个密钥能访问谁的记忆。', 'admin.public_add': '添加共享笔记',
    'admin.public_text': '共享笔记（所有人的回忆都可能用到）', 'admin.public_added': '已加入公共空间。',
    'admin.key_made': '已创建密钥 {prefix}…。', 'admin.tags': '标签（逗号分隔）',
    'channel.telegram': 'Telegram', 'channel.wechat': '微信', 'channel.console': '终端', 'channel.api': 'API',
    pages: '页面', sep: '、',
  },
};

let current = null;

export function lang() {
  if (!current) {
    const saved = localStorage.getItem('memgate.lang');
    current = saved in STRINGS ? saved : (navigator.language || 'en').toLowerCase().startsWith('zh') ? 'zh' : 'en';
  }
  return current;
}

export function setLang(code) {
  current = code in STRINGS ? code : 'en';
  localStorage.setItem('memgate.lang', current);
}

/** The string for `key` with {name} placeholders filled; `fallback` (or the key) when unknown. */
export function t(key, vars = {}, fallback) {
  const s = STRINGS[lang()][key] ?? STRINGS.en[key] ?? fallback ?? key;
  return s.replace(/\{(\w+)\}/g, (m, k) => (k in vars ? String(vars[k]) : m));
}

/** The BCP 47 locale of the chosen language, for Intl (dates, numbers). */
export const locale = () => (lang() === 'zh' ? 'zh-CN' : 'en');

/** The strings written into index.html (data-i18n text, data-i18n-label aria-label), and the page's lang. */
export function applyStatic() {
  document.documentElement.lang = locale();
  for (const el of document.querySelectorAll('[data-i18n]')) el.textContent = t(el.dataset.i18n);
  for (const el of document.querySelectorAll('[data-i18n-label]')) el.setAttribute('aria-label', t(el.dataset.i18nLabel));
}

export const LANGS = Object.keys(STRINGS);
