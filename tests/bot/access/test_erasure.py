"""Erasing a person (issue 35): every table that can hold a space's rows is covered (found by its
`space_id`, or declared a dependent, or kept on purpose: a new table is a decision), each loses
the erased space's rows and only those, and /forget everything in a direct chat erases a person
whole through the real gateway: counts and a code first, then every row, file and cache, while
another person's memory stays; the person comes back a stranger; a group's memory stays."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from bot.app import build_app, erase_rules, open_store
from bot.config import load_settings
from memory.erase import MEMORY_RULES, all_tables, erase_spaces, space_tables, uncovered
from memory.store.dialect import dialect_of
from memory.store.keywords import rebuild_index
from tests.bytescan import find, install_plain_duckdb
from tests.fakes import brain
from tests.fakes.channel import RecordingChannel

BACKENDS = ["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)]
ALICE_SAYS = ["QUOKKAMARBLE7731 is my locker code", "my sister lives in PELICANBRIM2290", "I keep bees on the roof"]
BOB_SAYS = "my bike is called MANGOFJORD9902"


def settings_for(tmp_path, backend: str, request, **extra: str):
    env = {"MEMGATE_DATA_DIR": str(tmp_path / "data"), "MEMGATE_CONFIG": str(tmp_path / "none.toml"), **extra}
    (tmp_path / "none.toml").write_text("")
    if backend == "postgres":
        env["MEMGATE_STORE_URL"] = request.getfixturevalue("pg_url")
    return load_settings(None, env=env)


@pytest.fixture(params=BACKENDS)
def every_table(request, tmp_path):
    """A store with every layer's migrations and the keyword index's tables."""
    store = open_store(settings_for(tmp_path, request.param, request))
    rebuild_index(store)
    yield store
    store.close()


def test_every_table_is_erased_or_kept_on_purpose(every_table):
    """Fails when a migration adds a table that has no space_id and is neither a dependent nor kept."""
    assert every_table.read(lambda c: uncovered(c, MEMORY_RULES + erase_rules())) == []


def _literal(con, table: str, column: str, data_type: str, n: int, space: str) -> str:
    """A value of the column's type for synthetic row `n` of `space` (unique where keys need it)."""
    t = data_type.upper()
    if column == "space_id":
        return f"'{space}'"
    if "[]" in t or t == "ARRAY" or t.startswith("FLOAT[") or t == "USER-DEFINED":
        return "NULL"
    if "CHAR" in t or t == "TEXT":
        return f"'{table}-{column}-{space}-{n}'"
    if "INT" in t:
        return str(hash((table, column, space, n)) % 1_000_000_000)
    if t == "DATE":
        return "DATE '2026-01-01'"
    if "TIMESTAMP" in t:
        return "TIMESTAMP '2026-01-01 00:00:00'"
    if "BOOL" in t:
        return "false"
    if "DOUBLE" in t or "FLOAT" in t or "REAL" in t:
        return "0.5"
    raise AssertionError(f"no synthetic value for {table}.{column} {data_type}")


def test_every_space_table_loses_the_erased_space_s_rows_and_only_those(every_table):
    """Reminders and any other table with a space_id are covered the day they are added."""
    store = every_table
    kept = {k.table for k in (MEMORY_RULES + erase_rules()).kept}

    def seed(con) -> list[str]:
        tables = [t for t in space_tables(con) if t not in kept]
        for t in tables:
            cols = con.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
                               "AND table_schema = current_schema() ORDER BY ordinal_position", [t]).fetchall()
            for space in ("u_gone", "u_stays"):   # one row each: some tables key on the space alone
                for n in range(1):
                    values = ", ".join(_literal(con, t, c, d, n, space) for c, d in cols)
                    con.execute(f"INSERT INTO {t} ({', '.join(c for c, _ in cols)}) VALUES ({values})")
        return tables

    tables = store.write(seed)
    assert {"memories", "identities", "sessions", "api_keys", "ingest_queue", "tasks", "skills", "reminders"} <= set(tables)
    store.write(lambda c: erase_spaces(c, ["u_gone"], erase_rules()))
    for t in tables:
        left = store.read(lambda c: dict(c.execute(f"SELECT space_id, count(*) FROM {t} GROUP BY 1").fetchall()))
        assert left == {"u_stays": 1}, t


def test_dependents_go_with_their_space_and_others_stay(tmp_path, request):
    store = open_store(settings_for(tmp_path, "duckdb", request))
    try:
        def seed(con):
            for who, space in (("alice", "u_a"), ("bob", "u_b")):
                con.execute("INSERT INTO spaces VALUES (?, 'user', ?, now())", [space, who])
                con.execute("INSERT INTO identities VALUES ('telegram', ?, ?, 'user', ?, now(), now())", [who, space, who])
                con.execute("INSERT INTO sessions VALUES (?, 's', ?, now(), now())", [f"telegram:{who}", space])
                for seq, status in ((1, "answered"), (2, "pending")):
                    con.execute("INSERT INTO inbox (seq, channel, platform_key, conversation_key, message, status, received_at) "
                                "VALUES (?, 'telegram', ?, ?, '{}', ?, now())", [seq + (10 if who == "bob" else 0),
                                                                                  f"{who}{seq}", f"telegram:{who}", status])
                con.execute("INSERT INTO outbox (seq, reply_id, conversation_key, channel, part, parts, reply, status, "
                            "next_attempt_at, created_at) VALUES (?, 'r', ?, 'telegram', 0, 1, '{}', 'pending', now(), now())",
                            [1 if who == "alice" else 2, f"telegram:{who}"])
                con.execute("INSERT INTO pairing_requests (code, channel, external_id, display_name, chat_id, created_at, "
                            "expires_at) VALUES (?, 'telegram', ?, ?, ?, now(), now())", [who.upper(), who, who, who])
                con.execute("INSERT INTO link_attempts VALUES ('telegram', ?, now(), false)", [who])
        store.write(seed)
        store.write(lambda c: erase_spaces(c, ["u_a"], erase_rules()))
        q = {"identities": "external_id", "sessions": "space_id", "pairing_requests": "external_id",
             "link_attempts": "external_id", "outbox": "conversation_key", "spaces": "id"}
        for table, col in q.items():
            assert store.read(lambda c: [r[0] for r in c.execute(f"SELECT {col} FROM {table} ORDER BY 1").fetchall()]) \
                in (["bob"], ["u_b"], ["telegram:bob"]), table
        # Received messages: the person's receipts go; a pending one (the command being answered) stays.
        inbox = store.read(lambda c: c.execute("SELECT platform_key FROM inbox ORDER BY 1").fetchall())
        assert [r[0] for r in inbox] == ["alice2", "bob1", "bob2"]
    finally:
        store.close()


# --- through the gateway ---------------------------------------------------------------------------
@pytest.fixture
def env(tmp_path, fake_llm):
    (tmp_path / "memgate.toml").write_text("")

    def make(**extra: str) -> dict[str, str]:
        base = {"MEMGATE_CONFIG": str(tmp_path / "memgate.toml"), "MEMGATE_DATA_DIR": str(tmp_path / "data"),
                "MEMGATE_LLM_API_BASE": fake_llm.base_url, "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0",
                "MEMGATE_LLM_API_KEY": "sk-test", "MEMGATE_ACCESS_OWNERS": "telegram:olive",
                "MEMGATE_ACCESS_DM_POLICY": "allowlist", "MEMGATE_ACCESS_ALLOW": "telegram:alice,telegram:bob",
                "MEMGATE_ACCESS_GROUPS": "telegram:g1",
                "MEMGATE_LLM_MEMORY_LLM": "false"}
        base.update(extra)
        return base
    return make


async def ask(channel: RecordingChannel, user: str, text: str, **kw) -> str:
    n = len(channel.sent)
    await channel.say(user, text, **kw)
    await channel.wait_for(n + 1, timeout=300)
    return channel.sent[n].text


@pytest.mark.timeout(900)
async def test_forget_everything_erases_a_person_and_nothing_of_anyone_else(env, fake_llm, clock, embedder, tmp_path):
    undo = install_plain_duckdb()   # strings stored plain, so the byte scan sees every row and freed block
    try:
        await _forget_everything(env, fake_llm, clock, embedder, tmp_path)
    finally:
        undo()


async def _forget_everything(env, fake_llm, clock, embedder, tmp_path) -> None:
    fake_llm.responder = brain.respond
    channel = RecordingChannel("telegram")
    app = build_app(load_settings(None, env=env()), channels=[channel], clock=clock.now, embedder=embedder)
    data = tmp_path / "data"
    async with app:
        await ask(channel, "alice", f"/remember {ALICE_SAYS[0]}")
        for text in ALICE_SAYS[1:]:
            await ask(channel, "alice", text)
        await ask(channel, "alice", "group talk: the picnic is at GROUPNOTE5150", chat="g1", is_group=True,
                  mentions_bot=True)
        reminded = await ask(channel, "alice", "/remind tomorrow 9:00 water the PELICANBRIM2290 plants")
        assert "PELICANBRIM2290" in reminded
        await ask(channel, "bob", f"/remember {BOB_SAYS}")
        await ask(channel, "bob", "hello there")
        await app.engine.worker.drain()
        kept = await ask(channel, "alice", "/memory")
        assert re.search(r"I keep \d+ messages, 1 fact and 0 tasks about you", kept) and "QUOKKAMARBLE7731" in kept

        in_group = await ask(channel, "alice", "/forget everything", chat="g1", is_group=True, mentions_bot=True)
        assert "belongs to the group" in in_group
        asked = await ask(channel, "alice", "/forget everything")
        assert re.search(r"\b1 fact\b", asked) and "message" in asked and re.search(r"\b1 reminder\b", asked)
        code = re.search(r"/forget everything ([A-Z0-9]{8})", asked).group(1)
        assert "code is not waiting" in await ask(channel, "bob", f"/forget everything {code}")   # not bob's
        done = await ask(channel, "alice", f"/forget everything {code.lower()}")
        assert done.startswith("Done: I erased") and "group" in done
        at_once = find(data, ["QUOKKAMARBLE7731", "PELICANBRIM2290", "MANGOFJORD9902"])   # the gateway still runs
        assert at_once["QUOKKAMARBLE7731"] == [] and at_once["PELICANBRIM2290"] == []
        assert "memgate.duckdb" in at_once["MANGOFJORD9902"]
        assert "code is not waiting" in await ask(channel, "alice", f"/forget everything {code}")  # once
        # Alice is a stranger now: the allowlist lets her in again, with an empty memory.
        memory = await ask(channel, "alice", "/memory")
        assert "I keep 0 messages, 0 facts" in memory and "QUOKKA" not in memory
        bob = await ask(channel, "bob", "/memory")
        assert "MANGOFJORD9902" in bob
        rows = app.store.read(lambda c: c.execute(
            "SELECT count(*) FROM memories WHERE text LIKE '%QUOKKA%' OR text LIKE '%PELICAN%'").fetchone()[0])
        assert rows == 0
        assert not app.store.read(lambda c: c.execute("SELECT count(*) FROM reminders WHERE text LIKE '%PELICAN%'").fetchone()[0])
        group = app.store.read(lambda c: c.execute(
            "SELECT count(*) FROM memories WHERE text LIKE '%GROUPNOTE5150%'").fetchone()[0])
        assert group >= 1   # the group's memory is the group's
        await app.gateway.idle()
    found = find(data, ["QUOKKAMARBLE7731", "PELICANBRIM2290", BOB_SAYS.split()[-1]])
    assert found["QUOKKAMARBLE7731"] == [] and found["PELICANBRIM2290"] == []
    assert "memgate.duckdb" in found["MANGOFJORD9902"]    # the scan sees the database's text


@pytest.mark.timeout(600)
async def test_export_sends_the_memory_as_a_file_in_either_format_a_few_times_an_hour(env, fake_llm, clock, embedder):
    fake_llm.responder = brain.respond
    channel = RecordingChannel("telegram")
    app = build_app(load_settings(None, env=env()), channels=[channel], clock=clock.now, embedder=embedder)
    async with app:
        await ask(channel, "alice", f"/remember {ALICE_SAYS[0]}")
        await ask(channel, "alice", "/export")
        doc = channel.sent[-1].document
        assert doc.filename.endswith(".jsonl") and b"QUOKKAMARBLE7731" in doc.data
        await ask(channel, "alice", "/export md")
        doc = channel.sent[-1].document
        assert doc.filename.endswith(".md") and doc.data.startswith(b"# Memories of ")
        assert b"- **fact** " in doc.data and b"QUOKKAMARBLE7731" in doc.data
        clock.advance(minutes=20)
        await ask(channel, "alice", "/export markdown")
        again = await ask(channel, "alice", "/export")
        assert "3 times in the last hour" in again and "again in 40 minutes" in again
        assert channel.sent[-1].document is None
        assert (await ask(channel, "bob", "/export")).startswith("Your")      # the limit is per person
        clock.advance(minutes=41)
        assert (await ask(channel, "alice", "/export")).startswith("Your")
        assert "Usage: /export" in await ask(channel, "alice", "/export pdf")
        await app.gateway.idle()
