"""Skills: SKILL.md files (pure and property-tested), the rule filter, and SkillEvolver through the
fake LLM: create, upgrade to version 2, stay at version 1, never from chit-chat, private until
published."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.turn.views.tasks import format_skill, format_skills
from memory.embed import LocalE5Embedder
from memory.llm import LiteLLM, LLMSettings
from memory.store.rows import NewMemory, insert_memories, new_id
from memory.tasks.skill_files import (
    SkillDoc,
    clean_doc,
    kebab_name,
    parse_skill_md,
    render_skill_md,
    safe_component,
    skill_path,
    unique_name,
)
from memory.tasks.skill_library import SkillNotFound, related_scores
from memory.tasks.skills import SkillEvolver
from memory.store.connection import Store
from memory.tasks.rules import skill_reject_reason
from memory.tasks.processor import TaskProcessor
from tests.fakes.clock import FakeClock
from tests.fakes.llm_server import FakeError, FakeLLM

pytestmark = pytest.mark.filterwarnings("ignore:.*`ReadOnly` qualifier:UserWarning")

T0 = datetime(2026, 1, 1, 9, 0)


# --- pure: SKILL.md ----------------------------------------------------------------------------
@pytest.mark.parametrize("text,name", [
    ("Postgres Nightly Backup", "postgres-nightly-backup"), ("deploy_nginx  with--Docker!", "deploy-nginx-with-docker"),
    ("pgBackRest setup", "pgbackrest-setup"), ("PostgreSQL", "postgresql"), ("Café crème", "cafe-creme"), ("部署 nginx", "nginx"),
    ("部署", "skill"), ("a" * 100, "a" * 64),
])
def test_kebab_name(text, name):
    assert kebab_name(text) == name


def test_render_has_frontmatter_and_the_four_sections_in_the_users_language():
    doc = SkillDoc(name="pg-backup", description="Back up PostgreSQL: nightly, with pg_dump",
                   steps=("Create ~/.pgpass", "Add the cron entry\nthen check the log"), pitfalls=("cron has no env",),
                   commands=("pg_dump -Fc appdb > /var/backups/appdb.dump",), prerequisites=("postgresql-client",))
    text = render_skill_md(doc)
    assert text.startswith('---\nname: pg-backup\ndescription: "Back up PostgreSQL: nightly, with pg_dump"\n---\n')
    for heading in ("## Steps", "## Pitfalls", "## Key commands", "## Prerequisites"):
        assert heading in text
    assert "1. Create ~/.pgpass\n2. Add the cron entry\n   then check the log" in text
    assert "## Key commands\n- `pg_dump -Fc appdb > /var/backups/appdb.dump`\n" in text
    zh = render_skill_md(SkillDoc(name="nginx-docker", description="用 Docker 部署 nginx", steps=("运行容器",)))
    assert "## 步骤" in zh and "## 关键命令" in zh and "description: 用 Docker 部署 nginx" in zh
    assert parse_skill_md(text) == doc


_line = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r"), max_size=30)
_item = st.lists(_line, min_size=1, max_size=3).map("\n".join)
_docs = st.builds(SkillDoc, name=_line, description=_line, steps=st.lists(_item, max_size=4).map(tuple),
                  pitfalls=st.lists(_item, max_size=3).map(tuple), commands=st.lists(_item, max_size=3).map(tuple),
                  prerequisites=st.lists(_item, max_size=3).map(tuple))


@settings(max_examples=300, deadline=None)
@given(_docs, st.sampled_from(["en", "zh"]))
def test_skill_md_round_trip(doc, language):
    cleaned = clean_doc(doc)
    assert parse_skill_md(render_skill_md(cleaned, language)) == cleaned


@given(st.text(max_size=40))
def test_paths_stay_inside_the_skills_folder(space):
    from pathlib import Path

    path = skill_path(Path("/data"), space, "../../etc")
    assert path.parts[:3] == ("/", "data", "skills") and ".." not in path.parts and len(path.parts) == 6
    assert "/" not in safe_component(space)


@pytest.mark.parametrize("count,summary,roles,reason", [
    (6, "x" * 100, ["user", "assistant"], None),
    (5, "x" * 100, ["user", "assistant"], "too_few_chunks"),
    (6, "x" * 99, ["user", "assistant"], "summary_too_short"),
    (6, None, ["user", "assistant"], "summary_too_short"),
    (8, "x" * 300, ["user", "tool"], "missing_role"),
    (8, "用 Docker 部署 nginx" * 10, ["assistant", "user", "tool"], None),
])
def test_skill_rule_filter(count, summary, roles, reason):
    assert skill_reject_reason(count, summary, roles) == reason


def test_related_scores_weigh_vector_and_keyword():
    scores = related_scores([("a", 0.9), ("b", 0.8)], [("b", 6.0), ("c", 3.0)])
    assert scores == pytest.approx({"a": 0.63, "b": 0.56 + 0.3, "c": 0.15})


def test_unique_name():
    assert unique_name("pg", set()) == "pg"
    assert unique_name("pg", {"pg", "pg-2"}) == "pg-3"


# --- SkillEvolver through the fake LLM ---------------------------------------------------------
@pytest.fixture(scope="module")
def embedder():
    return LocalE5Embedder()


@pytest.fixture
async def fake():
    async with FakeLLM() as server:
        yield server


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def llm(fake):
    return LiteLLM(LLMSettings(model="openai/fake-model", api_base=fake.base_url, retries=0, timeout=10))


@pytest.fixture
def evolver(store, embedder, llm, clock, tmp_path):
    return SkillEvolver(store, embedder, llm, tmp_path / "data", clock=clock.now)


def completed_task(store: Store, embedder, space: str, msgs: list[tuple[str, str]], title: str, summary: str,
                   start: datetime = T0) -> str:
    """A task as TaskProcessor leaves it once summarised: chunks linked, status completed."""
    task_id = new_id("t")
    rows = [NewMemory(space_id=space, kind="chunk", role=r, text=t, title=t[:60], created_at=start + timedelta(minutes=i),
                      session_id="s1", task_id=task_id) for i, (r, t) in enumerate(msgs)]
    vectors = embedder.embed_passages([r.text for r in rows])

    def write(c):
        insert_memories(c, rows, vectors)
        c.execute("INSERT INTO tasks (id, space_id, session_id, status, title, summary, first_user_text, chunk_count, "
                  "started_at, last_at, closed_at) VALUES (?, ?, 's1', 'completed', ?, ?, ?, ?, ?, ?, ?)",
                  [task_id, space, title, summary, msgs[0][1], len(msgs), start, start + timedelta(minutes=len(msgs)),
                   start + timedelta(hours=2)])

    store.write(write)
    return task_id


BACKUP_CHAT = [
    ("user", "How do I back up my PostgreSQL database every night?"),
    ("assistant", "Schedule pg_dump with cron: 0 2 * * * pg_dump -U app -Fc appdb > /var/backups/appdb.dump"),
    ("user", "The dump is empty when cron runs it."),
    ("assistant", "cron has no PGPASSWORD. Put the password in ~/.pgpass and chmod 600 ~/.pgpass."),
    ("user", "Works now, thanks!"),
    ("assistant", "Great. Check /var/backups after the next night."),
]
BACKUP_SUMMARY = """Nightly PostgreSQL backup with pg_dump and cron
Goal: back up appdb every night
Key steps:
1. crontab -e: 0 2 * * * pg_dump -U app -Fc appdb > /var/backups/appdb.dump
2. put the password in ~/.pgpass and chmod 600 ~/.pgpass
Result: nightly dumps appear in /var/backups"""
BETTER_SUMMARY = """Verified PostgreSQL backups with retention
Goal: make the nightly appdb backup safe to rely on
Key steps:
1. dump with pg_dump -Fc, then verify it with pg_restore --list
2. delete dumps older than 14 days: find /var/backups -name '*.dump' -mtime +14 -delete
3. mail on failure from the cron wrapper
Result: broken dumps are noticed the same night"""
SAME_SUMMARY = """Nightly PostgreSQL backup for a second database
Goal: back up reportsdb every night like appdb
Key steps:
1. crontab -e: 0 3 * * * pg_dump -U app -Fc reportsdb > /var/backups/reportsdb.dump
Result: the same cron and pg_dump procedure works for reportsdb"""
CREATE = {"name": "PostgreSQL nightly backup", "description": "Back up a PostgreSQL database every night with pg_dump and cron",
          "steps": ["Put the password in ~/.pgpass (chmod 600)", "Add a cron entry that runs pg_dump -Fc"],
          "pitfalls": ["cron jobs have no PGPASSWORD: the dump is empty"],
          "commands": ["0 2 * * * pg_dump -U app -Fc appdb > /var/backups/appdb.dump"],
          "prerequisites": ["postgresql-client on the host"]}
UPGRADE = {"improved": True, "changelog": "Verify each dump with pg_restore --list, keep 14 days, mail on failure",
           "description": "Back up a PostgreSQL database every night with pg_dump and cron, verified and rotated",
           "steps": ["Put the password in ~/.pgpass (chmod 600)", "Add a cron entry that runs pg_dump -Fc",
                     "Verify the dump with pg_restore --list", "Delete dumps older than 14 days",
                     "Mail the admin when any step fails"],
           "pitfalls": ["cron jobs have no PGPASSWORD: the dump is empty", "an unverified dump may be corrupt"],
           "commands": ["0 2 * * * pg_dump -U app -Fc appdb > /var/backups/appdb.dump",
                        "pg_restore --list /var/backups/appdb.dump > /dev/null",
                        "find /var/backups -name '*.dump' -mtime +14 -delete"],
           "prerequisites": ["postgresql-client on the host", "a working mail command"]}


def decide(match=None, upgrade=False, reusable=False, reason="") -> str:
    return json.dumps({"match": match, "upgrade": upgrade, "reusable": reusable, "reason": reason})


async def create_v1(store, embedder, fake, evolver, space="u:1") -> str:
    completed_task(store, embedder, space, BACKUP_CHAT, "Nightly PostgreSQL backup", BACKUP_SUMMARY)
    fake.script(decide(reusable=True, reason="repeatable procedure"), json.dumps(CREATE))
    assert await evolver.evolve_pending() == 1
    return "postgresql-nightly-backup"


def skill_versions(store: Store) -> list[tuple]:
    return store.read(lambda c: c.execute(
        "SELECT s.name, s.version, v.version, v.changelog FROM skills s JOIN skill_versions v ON v.skill_id = s.id "
        "ORDER BY v.version").fetchall())


async def test_howto_task_creates_a_skill(store, embedder, fake, evolver, tmp_path):
    name = await create_v1(store, embedder, fake, evolver)
    assert fake.calls == 2
    assert evolver.llm.usage.calls == {"skill_decide": 1, "skill_write": 1}
    assert "(none)" in fake.requests[0]["messages"][1]["content"]
    skill = await evolver.get(name, ["u:1", "public"])
    assert skill is not None and (skill.version, skill.usage_count) == (1, 1)
    assert skill.content.startswith(f"---\nname: {name}\n")
    assert "0 2 * * * pg_dump -U app -Fc appdb > /var/backups/appdb.dump" in skill.content
    assert (tmp_path / "data/skills/u_1" / name / "SKILL.md").read_text(encoding="utf-8") == skill.content
    row = store.read(lambda c: c.execute("SELECT kind, title, text FROM memories WHERE id = ?", [skill.id]).fetchone())
    assert row[0] == "skill" and row[1] == name and "1. Put the password in ~/.pgpass" in row[2]
    assert [s.name for s in await evolver.search("how to back up postgres", ["u:1"])] == [name]
    assert await evolver.search("what is a good kitten name", ["u:1"]) == []
    assert [s.name for s in await evolver.list_skills(["u:1"])] == [s.name for s in await evolver.search("*", ["u:1"])] \
        == [name]
    assert await evolver.list_skills(["u:2", "public"]) == []
    assert store.read(lambda c: c.execute("SELECT bool_and(skill_checked) FROM tasks").fetchone()[0]) is True
    assert await evolver.evolve_pending() == 0 and fake.calls == 2
    assert "postgresql-nightly-backup (v1, 1 use)" in format_skills([skill])


async def test_better_method_upgrades_to_version_2_with_a_changelog(store, embedder, fake, evolver, tmp_path):
    name = await create_v1(store, embedder, fake, evolver)
    task = completed_task(store, embedder, "u:1", BACKUP_CHAT, "Verified PostgreSQL backups", BETTER_SUMMARY,
                          T0 + timedelta(days=3))
    fake.script(decide(match=1, upgrade=True, reason="adds verification"), json.dumps(UPGRADE))
    assert await evolver.evolve_pending() == 1
    decide_prompt = fake.requests[2]["messages"][1]["content"]
    assert f"1. {name}: Back up a PostgreSQL database" in decide_prompt
    assert "CURRENT SKILL.md" in fake.requests[3]["messages"][1]["content"]
    first = store.read(lambda c: c.execute("SELECT id FROM tasks WHERE id <> ?", [task]).fetchone()[0])
    assert skill_versions(store) == [(name, 2, 1, f"Created from task {first}"), (name, 2, 2, UPGRADE["changelog"])]
    history = await evolver.history(name, ["u:1"])
    assert [v.version for v in history] == [1, 2] and history[1].source_task_id == task
    assert "pg_restore --list" not in history[0].content and "pg_restore --list" in history[1].content
    skill = await evolver.get(name, ["u:1"])
    assert (tmp_path / "data/skills/u_1" / name / "SKILL.md").read_text(encoding="utf-8") == skill.content == history[1].content
    shown = format_skill(skill, history)
    assert "Version history:" in shown and f"v2 2026-01-01 09:00: {UPGRADE['changelog']}" in shown
    hits = await evolver.search("verify dump pg_restore", ["u:1"])
    assert hits and hits[0].version == 2


async def test_same_domain_task_with_nothing_new_stays_at_version_1(store, embedder, fake, evolver):
    name = await create_v1(store, embedder, fake, evolver)
    completed_task(store, embedder, "u:1", BACKUP_CHAT, "Nightly backup for reportsdb", SAME_SUMMARY)
    fake.script(decide(match=1, upgrade=False, reason="same procedure"))
    assert await evolver.evolve_pending() == 1
    assert fake.calls == 3                                       # no writing call
    # The decision may claim an improvement the writer then cannot find: still version 1.
    completed_task(store, embedder, "u:1", BACKUP_CHAT, "Nightly backup again", SAME_SUMMARY)
    fake.script(decide(match=1, upgrade=True), json.dumps({"improved": False}))
    assert await evolver.evolve_pending() == 1
    assert skill_versions(store) == [(name, 1, 1, skill_versions(store)[0][3])]


CHIT_CHAT = [
    ("user", "What's your favourite season? I love autumn, the colours in the park are amazing this year."),
    ("assistant", "Autumn is lovely! The red maples and the cool air make walks really pleasant."),
    ("user", "Yes, we walked around the lake last Sunday and had hot chocolate afterwards."),
    ("assistant", "That sounds like a perfect afternoon. Did the kids enjoy it too?"),
    ("user", "They did, they collected leaves for a school project."),
    ("assistant", "What a nice idea, I hope the project turns out beautiful."),
]
CHIT_SUMMARY = ("Chat about autumn walks\nGoal: small talk about the season\nResult: the user shared a family walk "
                "around the lake and a leaf project for school")


async def test_chit_chat_never_creates_a_skill(store, embedder, fake, evolver):
    completed_task(store, embedder, "u:1", CHIT_CHAT[:4], "Autumn", "Small talk about autumn")   # rule filter
    completed_task(store, embedder, "u:1", CHIT_CHAT, "Chat about autumn walks", CHIT_SUMMARY)
    fake.script(decide(reusable=False, reason="chit-chat"))
    assert await evolver.evolve_pending() == 2
    assert fake.calls == 1
    assert store.read(lambda c: c.execute("SELECT count(*) FROM skills").fetchone()[0]) == 0
    assert await evolver.search("autumn walk", ["u:1"]) == []


async def test_failed_decision_leaves_the_task_for_the_next_run(store, embedder, fake, evolver):
    completed_task(store, embedder, "u:1", BACKUP_CHAT, "Nightly PostgreSQL backup", BACKUP_SUMMARY)
    fake.script(FakeError(500))
    assert await evolver.evolve_pending() == 0
    fake.script(decide(reusable=True), json.dumps(CREATE))
    assert await evolver.evolve_pending() == 1
    assert [v[:3] for v in skill_versions(store)] == [("postgresql-nightly-backup", 1, 1)]


async def test_private_skill_is_invisible_to_another_user_until_published(store, embedder, fake, evolver, tmp_path):
    name = await create_v1(store, embedder, fake, evolver, space="u:alice")
    bob = ["u:bob", "public"]
    assert await evolver.search("postgres backup", bob) == []
    assert await evolver.get(name, bob) is None and await evolver.history(name, bob) == []
    with pytest.raises(SkillNotFound):
        await evolver.publish(name, "u:bob", "public")
    published = await evolver.publish(name, "u:alice", "public")
    assert published.space_id == "public" and published.name == name
    assert await evolver.publish(name, "u:alice", "public") == published        # unchanged: no new version
    assert [s.space_id for s in await evolver.search("postgres backup", bob)] == ["public"]
    seen = await evolver.get(name, bob)
    assert seen is not None and seen.id == published.id and seen.usage_count == 1
    own = await evolver.get(name, ["u:alice", "public"])                        # her own copy comes first
    assert own is not None and own.space_id == "u:alice"
    assert (tmp_path / "data/skills/public" / name / "SKILL.md").exists()
    await evolver.count_usage([published.id, published.id])
    assert (await evolver.get(published.id, bob)).usage_count == 3


async def test_completed_task_from_the_processor_feeds_the_evolver(store, embedder, fake, llm, clock, evolver):
    fake.responder = lambda body: json.dumps({"verdict": "SAME", "confidence": 0.9})
    proc = TaskProcessor(store, embedder, llm, clock=clock.now)
    rows = [NewMemory(space_id="u:1", kind="chunk", role=r, text=t, title=t[:60], created_at=T0 + timedelta(minutes=i),
                      session_id="s1", turn_id=f"turn{i // 2}") for i, (r, t) in enumerate(BACKUP_CHAT)]
    store.write(lambda c: insert_memories(c, rows, embedder.embed_passages([r.text for r in rows])))
    await proc.assign("u:1")
    fake.script(json.dumps({"title": "Nightly PostgreSQL backup with pg_dump and cron", "goal": "back up appdb nightly",
                            "steps": ["0 2 * * * pg_dump -U app -Fc appdb > /var/backups/appdb.dump",
                                      "put the password in ~/.pgpass, chmod 600"],
                            "result": "dumps appear nightly", "details": []}),
                decide(reusable=True), json.dumps(CREATE))
    clock.set(T0 + timedelta(hours=3))
    assert await proc.close_idle() == 1
    assert await evolver.evolve_pending() == 1
    assert [v[:3] for v in skill_versions(store)] == [("postgresql-nightly-backup", 1, 1)]


async def test_a_turns_skill_search_reuses_the_question_recall_embedded(store, fake, clock, tmp_path):
    """Recall and the skill search of one turn ask with the same question: one embedding call, not
    two (a question of several lines was embedded once as it is and once with its lines joined)."""
    from memory.embed import LiteLLMEmbedder
    from memory.recall.search import Recaller

    embedder = LiteLLMEmbedder("openai/fake-embed", store.dim, api_base=fake.base_url, api_key="sk-test")
    question = "how do I back up postgres?\nnightly backup cron pg_dump"
    await asyncio.to_thread(Recaller(store, embedder).search, question, ["u:1"])  # the fake server runs on this loop
    assert len(fake.embedding_requests) == 1
    await SkillEvolver(store, embedder, LiteLLM(LLMSettings(model="openai/fake-model", api_base=fake.base_url)),
                       tmp_path / "data", clock=clock.now).search(question, ["u:1"])
    assert len(fake.embedding_requests) == 1
