"""The terminal channel reads bytes, not trust: invalid UTF-8 and lone surrogates on stdin reach
the bot as text with replacement characters, the message is answered and stored, and the reader
keeps reading (with strict decoding it used to die and leave the bot deaf)."""

from __future__ import annotations

import asyncio
import io
import sys

import pytest
from hypothesis import given, strategies as st

from adapters.console import clean_text
from memory.store.connection import Store
from tests.fakes import brain
from tests.reliability.memgate_cli import ROOT, cli_env

LINES = [b"caf\xe9 au lait is what I drink\n",            # latin-1, not UTF-8
         b"a lone \xed\xa0\x80 surrogate here\n",          # CESU-encoded lone surrogate
         b"truncated \xe4\xbd\n",                           # a cut multi-byte character
         "and a normal line: 我喜欢猫\n".encode()]


@pytest.mark.timeout(900)  # real subprocesses on a shared 2-core machine
@pytest.mark.parametrize("io_encoding", ["", "utf-8:strict"])
async def test_invalid_bytes_on_stdin_are_answered_stored_and_the_reader_survives(tmp_path, fake_llm, io_encoding):
    fake_llm.responder = brain.respond
    env = cli_env(tmp_path, MEMGATE_LLM_API_BASE=fake_llm.base_url, MEMGATE_LLM_MODEL="fake-model",
                  MEMGATE_LLM_RETRIES="0")
    if io_encoding:
        env["PYTHONIOENCODING"] = io_encoding
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "chat", "--user", "ivy", env=env, cwd=ROOT,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(b"".join(LINES)), 120)
    assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
    replies = [line for line in out.decode("utf-8").splitlines() if line.startswith("memgate: ")]
    assert len(replies) == len(LINES), (replies, err.decode(errors="replace")[-2000:])
    for reply, words in zip(replies, ("au lait", "surrogate here", "truncated", "我喜欢猫")):
        assert words in reply
    store = Store(tmp_path / "data" / "memgate.duckdb", 384)
    try:
        stored = [r[0] for r in store.read(lambda c: c.execute(
            "SELECT text FROM memories WHERE kind = 'chunk' AND role = 'user' ORDER BY created_at").fetchall())]
    finally:
        store.close()
    assert len(stored) == len(LINES)
    assert stored[0] == "caf\ufffd au lait is what I drink"
    assert all(t.encode("utf-8") for t in stored)  # no lone surrogate survives


async def test_a_text_stream_with_lone_surrogates_still_yields_messages():
    from adapters.console import ConsoleAdapter

    got = []

    async def inbound(msg):
        got.append(msg.text)

    adapter = ConsoleAdapter("ivy", stdin=io.StringIO("x \ud800 y\nnext\n"), stdout=io.StringIO())
    await adapter.start(inbound)
    await asyncio.wait_for(adapter.closed.wait(), 10)
    assert got == ["x \ufffd y", "next"]


@given(st.binary(max_size=200))
def test_clean_text_of_any_bytes_is_encodable_and_keeps_valid_utf8(raw):
    for decoded in (raw.decode("utf-8", "surrogateescape"), raw.decode("latin-1")):
        out = clean_text(decoded)
        out.encode("utf-8")  # never raises
    try:
        valid = raw.decode("utf-8")
    except UnicodeDecodeError:
        return
    assert clean_text(valid) == valid


@given(st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF) | st.characters(), max_size=50))
def test_clean_text_of_any_str_is_encodable(text):
    clean_text(text).encode("utf-8")
