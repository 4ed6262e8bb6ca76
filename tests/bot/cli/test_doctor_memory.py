"""Issue 30, item 6: `memgate doctor` said "all good" while every memory call failed: it now makes
the ingest worker's call on a sample turn with the configured memory model and says whether the
JSON it gets back is usable (against the fake OpenAI-compatible server: its answers decide)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from tests.fakes import brain
from tests.fakes.llm_server import FakeLLM

ROOT = str(Path(__file__).resolve().parents[3])
pytestmark = pytest.mark.timeout(300)


async def doctor(tmp_path: Path, base: str, **extra: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMGATE_", "TELEGRAM_"))}
    (tmp_path / "none.toml").write_text("")
    env.update({"MEMGATE_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": ROOT, "MEMGATE_CONFIG": str(tmp_path / "none.toml"),
                "MEMGATE_LLM_API_BASE": base, "MEMGATE_LLM_MODEL": "fake-model", **extra})
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "doctor", env=env, cwd=ROOT,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    assert "Traceback" not in err.decode(), err.decode()
    return proc.returncode, out.decode()


def memory_line(out: str) -> str:
    return next(line for line in out.splitlines() if "memory call" in line)


async def test_a_memory_model_whose_json_is_unusable_is_a_problem(tmp_path):
    # The reply model answers; every memory call gets prose back (a small model ignoring the JSON asked for).
    async with FakeLLM(lambda body: "Sure! The user has a dog.") as server:
        code, out = await doctor(tmp_path, server.base_url)
    assert code == 1 and "all good" not in out, out
    line = memory_line(out)
    assert line.startswith("[FAIL] memory call: fake-model's JSON for a sample turn is not usable"), out
    assert "memory_model" in out.split(line + "\n", 1)[1].splitlines()[0]   # the fix line names the key
    assert any("Brindlequix" in str(r["messages"]) for r in server.requests)  # the sample turn was sent


async def test_a_memory_model_with_usable_json_is_ok_and_names_the_fact(tmp_path):
    async with FakeLLM(brain.respond) as server:
        code, out = await doctor(tmp_path, server.base_url)
    assert "[ok] memory call: fake-model gave usable JSON for a sample turn" in memory_line(out), out
    assert "Brindlequix" in memory_line(out)


async def test_the_memory_model_is_the_one_configured_for_memory(tmp_path):
    async with FakeLLM(brain.respond, models=("big", "small/memory-1b")) as server:
        code, out = await doctor(tmp_path, server.base_url, MEMGATE_LLM_MODEL="big",
                                 MEMGATE_LLM_MEMORY_MODEL="small/memory-1b")
    assert "[ok] memory call: small/memory-1b gave usable JSON" in memory_line(out), out
    assert [r["model"] for r in server.requests if "Brindlequix" in str(r["messages"])] == ["small/memory-1b"]


async def test_memory_calls_switched_off_are_said_and_not_tried(tmp_path):
    async with FakeLLM(brain.respond) as server:
        code, out = await doctor(tmp_path, server.base_url, MEMGATE_LLM_MEMORY_LLM="false")
    assert "[ok] memory calls are off ([llm] memory_llm = false)" in out, out
    assert not any("Brindlequix" in str(r["messages"]) for r in server.requests)


async def test_a_memory_model_at_its_own_address_is_fixed_with_its_own_key(tmp_path):
    # [memory] llm_model is set: the fix names that key, not [llm] memory_model (setting both is refused).
    async with FakeLLM(brain.respond) as replies, FakeLLM(lambda body: "Sure! The user has a dog.") as memory:
        code, out = await doctor(tmp_path, replies.base_url, MEMGATE_MEMORY_LLM_MODEL="small-model",
                                 MEMGATE_MEMORY_LLM_API_BASE=memory.base_url)
    line = memory_line(out)
    assert line.startswith("[FAIL] memory call: small-model's JSON for a sample turn is not usable"), out
    fix = out.split(line + "\n", 1)[1].splitlines()[0]
    assert "[memory] llm_model (MEMGATE_MEMORY_LLM_MODEL) (set now)" in fix and "[llm] memory_model" not in fix, out
