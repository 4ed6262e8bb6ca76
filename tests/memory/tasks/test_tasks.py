"""Tasks: boundary and skip rules (pure, table-driven), and TaskProcessor through the fake LLM."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from memory.embed import LocalE5Embedder
from memory.llm import LiteLLM, LLMSettings
from memory.store.rows import NewMemory, insert_memories, new_id, utc_naive
from memory.recall.search import Recaller
from memory.store.connection import Store
from memory.tasks.rules import (
    SKIP_RULES,
    ChunkInfo,
    OpenTask,
    SkipThresholds,
    Step,
    TaskDigest,
    Turn,
    Verdict,
    boundary_step,
    count_exchanges,
    group_turns,
    is_trivial_line,
    resolve_verdict,
    skip_reason,
    user_language,
)
from memory.tasks.processor import TaskProcessor
from memory.tasks.settings import TaskSettings
from memory.tasks.summary import SummaryAnswer, format_chat, render_summary
from bot.turn.views.tasks import format_task, format_tasks
from tests.fakes.clock import FakeClock
from tests.fakes.llm_server import FakeError, FakeLLM

pytestmark = pytest.mark.filterwarnings("ignore:.*`ReadOnly` qualifier:UserWarning")

T0 = datetime(2026, 1, 1, 9, 0)


# --- builders ----------------------------------------------------------------------------------
def chunk(role: str, text: str, minute: int = 0, session: str = "s1", turn: str | None = None) -> ChunkInfo:
    return ChunkInfo(id=f"c{minute}{role[0]}", role=role, text=text, created_at=T0 + timedelta(minutes=minute),
                     session_id=session, turn_id=turn)


def turn(*chunks: ChunkInfo) -> Turn:
    return Turn(tuple(chunks))


def digest(*msgs: tuple[str, str]) -> TaskDigest:
    return TaskDigest(tuple(msgs))


def add_turns(store: Store, embedder, space: str, msgs: list[tuple[str, str]], start: datetime, *,
              session: str = "s1", step: timedelta = timedelta(minutes=1)) -> list[str]:
    """Insert chunks as ingest would: one turn id per user message and what follows it."""
    rows, turn_id = [], new_id("turn")
    for i, (role, text) in enumerate(msgs):
        if role == "user" and i > 0:
            turn_id = new_id("turn")
        rows.append(NewMemory(space_id=space, kind="chunk", role=role, text=text, title=text[:60],
                              created_at=start + i * step, session_id=session, turn_id=turn_id))
    vectors = embedder.embed_passages([r.text for r in rows])
    return store.write(lambda c: insert_memories(c, rows, vectors))


def verdict(v: str, confidence: float) -> str:
    return json.dumps({"verdict": v, "confidence": confidence})


def summary_json(title: str, **kw) -> str:
    return json.dumps({"title": title, "goal": kw.get("goal", "g"), "steps": kw.get("steps", ["s"]),
                       "result": kw.get("result", "r"), "details": kw.get("details", [])}, ensure_ascii=False)


@pytest.fixture(scope="module")
def embedder():
    return LocalE5Embedder()


def judge_same(body: dict) -> str:
    """Unscripted boundary questions get SAME; anything else the fake's plain "OK"."""
    system = body["messages"][0]["content"]
    return verdict("SAME", 0.9) if "split a chat into tasks" in system else "OK"


@pytest.fixture
async def fake():
    async with FakeLLM(responder=judge_same) as server:
        yield server


def calls(proc: TaskProcessor, purpose: str) -> int:
    return proc.llm.usage.calls.get(purpose, 0)


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def proc(store, embedder, fake, clock):
    llm = LiteLLM(LLMSettings(model="openai/fake-model", api_base=fake.base_url, retries=0, timeout=10))
    return TaskProcessor(store, embedder, llm, clock=clock.now)


def tasks_of(store: Store, space: str) -> list[tuple]:
    return store.read(lambda c: c.execute(
        "SELECT id, status, skip_reason, chunk_count, title, summary, closed_at FROM tasks WHERE space_id = ? "
        "ORDER BY started_at", [space]).fetchall())


# --- pure: turns -------------------------------------------------------------------------------
def test_group_turns_by_turn_id_role_and_session():
    chunks = [
        chunk("user", "a", 0, turn="t1"), chunk("assistant", "b", 1, turn="t1"), chunk("tool", "c", 2, turn="t1"),
        chunk("user", "d", 3, turn="t2"), chunk("assistant", "e", 4, turn="t2"),
        chunk("user", "f", 5), chunk("user", "g", 6), chunk("assistant", "h", 7), chunk("user", "i", 8),
        chunk("assistant", "j", 9, session="s2"),
    ]
    assert [[c.text for c in t.chunks] for t in group_turns(chunks)] == [
        ["a", "b", "c"], ["d", "e"], ["f", "g", "h"], ["i"], ["j"]]


# --- pure: boundaries --------------------------------------------------------------------------
OPEN = OpenTask(session_id="s1", last_at=T0, has_user=True)
BOUNDARY_CASES = [
    ("no open task", None, turn(chunk("user", "hello")), Step("new", "first_task")),
    ("session change", OPEN, turn(chunk("user", "hi", 5, session="s2")), Step("new", "session_change")),
    ("gap over 2 h", OPEN, turn(chunk("user", "back again", 121)), Step("new", "idle_gap")),
    ("gap of exactly 2 h is not over", OPEN, turn(chunk("user", "here are the logs", 120)), Step("ask", "llm")),
    ("task without a user message", OpenTask("s1", T0, has_user=False), turn(chunk("user", "what?", 1)),
     Step("same", "task_has_no_user_message")),
    ("turn without a user message", OPEN, turn(chunk("assistant", "reminder: meeting", 3)),
     Step("same", "turn_has_no_user_message")),
    ("trivial turn", OPEN, turn(chunk("user", "ok thanks!", 3), chunk("assistant", "You're welcome", 4)),
     Step("same", "turn_is_trivial")),
    ("chinese trivial turn", OPEN, turn(chunk("user", "好的，谢谢", 3)), Step("same", "turn_is_trivial")),
    ("chinese follow-up goes to the LLM", OPEN, turn(chunk("user", "端口映射应该怎么写？", 2)), Step("ask", "llm")),
    ("chinese after a session change", OPEN, turn(chunk("user", "你好，我换了个设备", 2, session="wx")),
     Step("new", "session_change")),
]


@pytest.mark.parametrize("name,task,t,expected", BOUNDARY_CASES, ids=[c[0] for c in BOUNDARY_CASES])
def test_boundary_rules(name, task, t, expected):
    assert boundary_step(task, t, timedelta(hours=2)) == expected


VERDICT_CASES = [
    ("llm failed", None, None, Step("same", "llm_failed")),
    ("same", Verdict(False, 0.9), None, Step("same", "llm_same")),
    ("sure new", Verdict(True, 0.9), None, Step("new", "llm_new")),
    ("new at the threshold", Verdict(True, 0.65), None, Step("new", "llm_new")),
    ("unsure new asks again", Verdict(True, 0.5), None, Step("second_look", "llm_new_unsure")),
    ("second look confirms", Verdict(True, 0.5), Verdict(True, 0.6), Step("new", "second_look_new")),
    ("second look keeps", Verdict(True, 0.5), Verdict(False, 0.8), Step("same", "second_look_same")),
]


@pytest.mark.parametrize("name,first,second,expected", VERDICT_CASES, ids=[c[0] for c in VERDICT_CASES])
def test_resolve_verdict(name, first, second, expected):
    assert resolve_verdict(first, second, threshold=0.65) == expected


# --- pure: skip rules --------------------------------------------------------------------------
HOWTO = [
    ("user", "How do I back up my PostgreSQL database every night on Ubuntu?"),
    ("assistant", "Use pg_dump from cron. Run `pg_dump -U app appdb > /var/backups/appdb.sql` and add it to crontab."),
    ("user", "The cron job runs but the dump file is empty. Why?"),
    ("assistant", "cron has no PGPASSWORD; put the password in ~/.pgpass with chmod 600 and it will work."),
]
GREETINGS = [
    ("user", "hello there, good morning!"),
    ("assistant", "Good morning! How can I help you today?"),
    ("user", "just testing, is the bot working?"),
    ("assistant", "Yes, I'm working! Let me know if you need anything."),
    ("user", "ok great thanks"),
    ("assistant", "You're welcome! Feel free to ask me anything."),
]
ZH_HOWTO = [
    ("user", "怎么用 Docker 部署 nginx？"),
    ("assistant", "运行 docker run -d -p 80:80 nginx 即可，配置文件挂载到 /etc/nginx/conf.d。"),
    ("user", "端口被占用了怎么办？"),
    ("assistant", "先用 lsof -i :80 找到占用的进程并停止它，或者把映射改成 8080:80。"),
]
ZH_GREETINGS = [("user", "你好"), ("assistant", "你好！有什么可以帮你的吗？"), ("user", "测试一下"),
                ("assistant", "收到"), ("user", "好的，谢谢"), ("assistant", "不客气")] * 3
TOOLS = [("user", "check the disk usage on all servers")] + [("tool", "df output ...")] * 3 + \
        [("assistant", "checking more")] + [("tool", "df output ...")] * 4 + [("assistant", "All disks are below 70%.")]

# (rule, messages, applies?) -- every named check, both ways, English and Chinese.
RULE_CASES = [
    ("too_few_chunks", HOWTO[:3], True),
    ("too_few_chunks", HOWTO, False),
    ("too_few_exchanges", [HOWTO[0], HOWTO[2], HOWTO[1], ("tool", "x")], True),
    ("too_few_exchanges", HOWTO, False),
    ("too_few_exchanges", ZH_HOWTO, False),
    ("no_user_message", [("assistant", "reminder")] * 4, True),
    ("no_user_message", HOWTO, False),
    ("too_short", [("user", "how do I list files?"), ("assistant", "ls -la"), ("user", "hidden ones?"),
                   ("assistant", "ls -a shows them")], True),
    ("too_short", HOWTO, False),
    ("too_short", ZH_HOWTO, False),          # < 200 characters but >= 80 with CJK
    ("too_short", [("user", "怎么列文件"), ("assistant", "用 ls"), ("user", "隐藏的呢"), ("assistant", "ls -a")], True),
    ("mostly_trivial", GREETINGS, True),
    ("mostly_trivial", ZH_GREETINGS, True),
    ("mostly_trivial", HOWTO, False),
    ("mostly_trivial", ZH_HOWTO, False),
    ("tool_heavy", TOOLS, True),
    ("tool_heavy", HOWTO, False),
    ("tool_heavy", TOOLS[:1] + TOOLS[1:] + [("user", "and the memory?"), ("assistant", "fine")], False),
]


@pytest.mark.parametrize("rule,msgs,applies", RULE_CASES,
                         ids=[f"{r}-{i}-{a}" for i, (r, _, a) in enumerate(RULE_CASES)])
def test_each_skip_rule(rule, msgs, applies):
    check = {r.name: r for r in SKIP_RULES}[rule]
    assert check.applies(digest(*msgs), SkipThresholds()) is applies


SKIP_REASON_CASES = [
    ("how-to is kept", HOWTO, None),
    ("chinese how-to is kept", ZH_HOWTO, None),
    ("greetings", GREETINGS, "mostly_trivial"),
    ("chinese greetings", ZH_GREETINGS, "mostly_trivial"),
    ("one message", HOWTO[:1], "too_few_chunks"),
    ("tools only", TOOLS, "tool_heavy"),
    ("assistant only", [("assistant", "a long reminder " * 20)] * 4, "no_user_message"),
]


@pytest.mark.parametrize("name,msgs,reason", SKIP_REASON_CASES, ids=[c[0] for c in SKIP_REASON_CASES])
def test_skip_reason_first_rule(name, msgs, reason):
    assert skip_reason(digest(*msgs)) == reason


def test_exchanges_count_answered_user_messages():
    assert count_exchanges([("user", ""), ("user", ""), ("assistant", ""), ("tool", ""), ("assistant", "")]) == 1
    assert count_exchanges([("user", ""), ("tool", ""), ("assistant", ""), ("user", ""), ("assistant", "")]) == 2


@pytest.mark.parametrize("line,trivial", [
    ("hi", True), ("OK!", True), ("test", True), ("Thanks a lot :)", True), ("👍", True),
    ("Is there anything else I can help with?", True), ("好的", True), ("测试", True), ("你好！", True),
    ("好的，谢谢", True), ("有什么可以帮你的吗？", True),
    ("ok, run pg_dump first", False), ("hi, my server returns 502", False), ("好的，我来配置 nginx", False),
    ("端口被占用了", False), ("42", False), ("yes " * 30, False),
])
def test_trivial_lines(line, trivial):
    assert is_trivial_line(line) is trivial


@pytest.mark.parametrize("texts,lang", [
    (["How do I deploy nginx?"], "en"), (["怎么用 Docker 部署 nginx？"], "zh"),
    (["I visited 北京 last year and loved the food there"], "en"), ([""], "en"),
])
def test_user_language(texts, lang):
    assert user_language(texts) == lang


def test_format_chat_redacts_and_keeps_head_and_tail_within_budget():
    s = TaskSettings(summary_total_chars=600, summary_chunk_chars=100)
    chunks = [chunk("user", "deploy with password: hunter22 please", 0)] + \
             [chunk("assistant", f"step {i} " + "x" * 150, i + 1) for i in range(10)]
    text = format_chat(chunks, s)
    assert "hunter22" not in text and "[REDACTED]" in text
    assert len(text) <= 600
    assert text.startswith("[1] user:") and "[11] assistant: step 9" in text and "messages left out" in text


def test_render_summary_uses_the_users_language():
    ans = SummaryAnswer(title="部署 nginx", goal="在服务器上运行 nginx", steps=["docker run -d -p 80:80 nginx"],
                        result="成功", details=["端口 80"])
    text = render_summary(ans, "zh")
    assert text.splitlines() == ["部署 nginx", "目标：在服务器上运行 nginx", "关键步骤：", "1. docker run -d -p 80:80 nginx",
                                 "结果：成功", "关键细节：", "- 端口 80"]
    assert "Key steps:" in render_summary(SummaryAnswer(title="t", steps=["a"]), "en")


# --- TaskProcessor through the fake LLM -------------------------------------------------------
ZH_CHAT = [
    [("user", "我想用 Docker 部署一个 nginx 服务器，应该怎么做？"),
     ("assistant", "先安装 Docker，然后运行 docker run -d --name web -p 80:80 nginx，再把配置挂载到 /etc/nginx/conf.d。")],
    [("user", "端口映射应该怎么写？我想用 8080。"),
     ("assistant", "把 -p 80:80 改成 -p 8080:80，然后访问 http://localhost:8080 就可以了。")],
    [("user", "另外，推荐几本关于中国历史的书吧。"),
     ("assistant", "可以读《万历十五年》和《中国大历史》，两本都很好读。")],
    [("user", "还有别的推荐吗？"), ("assistant", "《明朝那些事儿》也很受欢迎。")],
    [("user", "谢谢，我先看这几本。"), ("assistant", "不客气，祝阅读愉快！")],
]


async def test_boundaries_through_the_llm_in_chinese(store, embedder, fake, proc):
    space = "u:zh"
    fake.script(
        verdict("SAME", 0.9),                                   # turn 2: follow-up
        verdict("NEW", 0.95),                                   # turn 3: books
        summary_json("用 Docker 部署 nginx", goal="在 8080 端口运行 nginx",
                     steps=["docker run -d --name web -p 8080:80 nginx"], result="可以访问 http://localhost:8080"),
        verdict("NEW", 0.5), verdict("SAME", 0.8),              # turn 4: unsure NEW, second look keeps it
        FakeError(500),                                          # turn 5: the judge fails -> SAME
    )
    for i, msgs in enumerate(ZH_CHAT):
        add_turns(store, embedder, space, msgs, T0 + timedelta(minutes=5 * i))
        await proc.assign(space)
    tasks = tasks_of(store, space)
    assert [(t[1], t[3]) for t in tasks] == [("completed", 4), ("open", 6)]
    assert tasks[0][4] == "用 Docker 部署 nginx" and "目标：在 8080 端口运行 nginx" in tasks[0][5]
    assert fake.calls == 6
    boundary_prompt = fake.requests[0]["messages"][1]["content"]
    assert "First request: 我想用 Docker 部署" in boundary_prompt and "端口映射" in boundary_prompt
    summary_prompt = fake.requests[2]["messages"]
    assert "Chinese" in summary_prompt[0]["content"] and "推荐几本" not in summary_prompt[1]["content"]
    recheck = fake.requests[4]["messages"]
    assert "Look again" in recheck[0]["content"] and "另外，推荐几本" in recheck[1]["content"]
    assert proc.llm.usage.calls == {"task_boundary": 5, "task_summary": 1}


async def test_hard_cuts_and_userless_tasks_need_no_llm(store, embedder, fake, proc):
    space = "u:1"
    add_turns(store, embedder, space, [("assistant", "Reminder: dentist at 3pm.")], T0)
    add_turns(store, embedder, space, [("user", "thanks, what time again?"), ("assistant", "3pm.")],
              T0 + timedelta(minutes=1))
    await proc.assign(space)                                     # task had no user message: same, no LLM
    add_turns(store, embedder, space, [("user", "hi from my phone"), ("assistant", "hello!")],
              T0 + timedelta(minutes=3), session="s2")           # session change
    await proc.assign(space)
    add_turns(store, embedder, space, [("user", "good evening"), ("assistant", "good evening!")],
              T0 + timedelta(hours=3), session="s2")             # gap over 2 h
    await proc.assign(space)
    assert fake.calls == 0
    assert [(t[1], t[2], t[3]) for t in tasks_of(store, space)] == [
        ("skipped", "too_few_chunks", 3), ("skipped", "too_few_chunks", 2), ("open", None, 2)]


QUALIFYING = [
    ("user", "How do I back up my PostgreSQL database every night on Ubuntu? The password is password: s3cr3t-pw"),
    ("assistant", "Use pg_dump from cron: `pg_dump -U app -Fc appdb > /var/backups/appdb.dump`."),
    ("user", "Where do I put the schedule?"),
    ("assistant", "Run `crontab -e` and add `0 2 * * * pg_dump -U app -Fc appdb > /var/backups/appdb.dump`."),
    ("user", "It works, thanks. See https://www.postgresql.org/docs/current/app-pgdump.html for options?"),
    ("assistant", "Yes, that page lists every option of pg_dump."),
]


async def test_qualifying_task_closes_after_idle_with_exactly_one_summary(store, embedder, fake, proc, clock):
    space = "u:1"
    clock.set(T0)
    add_turns(store, embedder, space, QUALIFYING, T0)
    await proc.assign(space)
    fake.script(summary_json("Nightly PostgreSQL backup with pg_dump and cron",
                             steps=["crontab -e", "0 2 * * * pg_dump -U app -Fc appdb > /var/backups/appdb.dump"],
                             details=["https://www.postgresql.org/docs/current/app-pgdump.html"]))
    assert calls(proc, "task_boundary") == 2                     # turns 2 and 3 of the batch
    clock.advance(hours=1)
    assert await proc.close_idle() == 0
    assert calls(proc, "task_summary") == 0 and tasks_of(store, space)[0][1] == "open"
    clock.advance(hours=1, minutes=10)
    assert await proc.close_idle() == 1
    assert await proc.close_idle() == 0
    assert calls(proc, "task_summary") == 1
    sent = json.dumps(fake.requests[-1]["messages"])
    assert "s3cr3t-pw" not in sent and "[REDACTED]" in sent and "crontab -e" in sent
    (task_id, status, _, count, title, summary, closed_at), = tasks_of(store, space)
    assert (status, count) == ("completed", 6)
    assert "0 2 * * * pg_dump -U app -Fc appdb > /var/backups/appdb.dump" in summary
    assert closed_at == utc_naive(clock.now())
    linked = store.read(lambda c: c.execute(
        "SELECT count(*) FROM memories WHERE kind = 'chunk' AND task_id = ?", [task_id]).fetchone()[0])
    assert linked == 6
    hits = Recaller(store, embedder, clock=clock.now).search("postgres backup cron", [space], kinds=["task"])
    assert [h.id for h in hits] == [task_id] and len(hits[0].source_ids) == 6
    view = await proc.summary(task_id, [space, "public"])
    assert view is not None and view.title == title
    assert format_task(view).startswith(f"Task {task_id} (completed, 6 messages, 2026-01-01 09:00 to 2026-01-01 09:05)\n"
                                        "Nightly PostgreSQL backup with pg_dump and cron\n")
    assert await proc.summary(task_id, ["u:2", "public"]) is None


async def test_greeting_only_task_is_skipped_with_its_reason(store, embedder, fake, proc, clock):
    space = "u:1"
    add_turns(store, embedder, space, GREETINGS, T0)
    await proc.assign(space)
    clock.set(T0 + timedelta(hours=3))
    assert await proc.close_idle() == 1
    (task_id, status, reason, *_), = tasks_of(store, space)
    assert (status, reason) == ("skipped", "mostly_trivial")
    assert calls(proc, "task_summary") == 0
    assert store.read(lambda c: c.execute("SELECT count(*) FROM memories WHERE kind = 'task'").fetchone()[0]) == 0
    assert "skipped: mostly_trivial" in format_tasks(await proc.recent(space))
    assert format_task((await proc.recent(space))[0]).endswith("No summary: skipped by the rule mostly_trivial.")


async def test_failed_summary_stays_pending_and_is_retried(store, embedder, fake, proc, clock):
    space = "u:1"
    add_turns(store, embedder, space, QUALIFYING, T0)
    await proc.assign(space)
    clock.set(T0 + timedelta(hours=3))
    fake.script(FakeError(500))
    assert await proc.close_idle() == 0
    (_, status, _, _, _, _, closed_at), = tasks_of(store, space)
    assert status == "open" and closed_at is not None
    assert "closing" in format_tasks(await proc.recent(space))
    fake.script(summary_json("Nightly PostgreSQL backup"))
    assert await proc.close_idle() == 1
    assert tasks_of(store, space)[0][1] == "completed"
    assert calls(proc, "task_summary") == 2


async def test_new_chunks_after_close_start_a_new_task_and_recent_lists_newest_first(store, embedder, fake, proc, clock):
    space = "u:1"
    add_turns(store, embedder, space, GREETINGS, T0)
    await proc.assign(space)
    clock.set(T0 + timedelta(hours=3))
    await proc.close_idle()
    add_turns(store, embedder, space, HOWTO, T0 + timedelta(hours=3))
    await proc.assign(space)
    recent = await proc.recent(space)
    assert [t.status for t in recent] == ["open", "skipped"]
    assert recent[0].first_user_text == HOWTO[0][1]
    assert calls(proc, "task_summary") == 0
