"""Memory work on a model of its own (issue 30): `[memory] llm_model`, `llm_api_base` and
MEMGATE_MEMORY_LLM_API_KEY point ingest and tasks at another (cheaper, or remote) server, with its
own gate; the old `[llm] memory_model` (another model on the reply's server) keeps working."""

from __future__ import annotations

import pytest

from bot.app import build_app
from bot.config import load_settings
from bot.errors import ConfigError
from tests.fakes import brain
from tests.fakes.channel import RecordingChannel
from tests.fakes.llm_server import FakeLLM
from tests.reliability.procs import is_reply_request


def env_for(tmp_path, fake_llm, **more) -> dict[str, str]:
    return {"MEMGATE_DATA_DIR": str(tmp_path / "data"), "MEMGATE_LLM_API_BASE": fake_llm.base_url,
            "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0", "MEMGATE_LLM_API_KEY": "sk-reply", **more}


async def test_memory_work_goes_to_its_own_server_with_its_own_key_and_the_reply_key_stays_home(
        tmp_path, fake_llm, clock, embedder) -> None:
    fake_llm.responder = brain.respond
    async with FakeLLM(responder=brain.respond) as memory_server:
        settings = load_settings(None, env=env_for(
            tmp_path, fake_llm, MEMGATE_MEMORY_LLM_MODEL="small-model", MEMGATE_MEMORY_LLM_API_BASE=memory_server.base_url,
            MEMGATE_MEMORY_LLM_API_KEY="sk-memory"))
        channel = RecordingChannel("console")
        app = build_app(settings, channels=[channel], clock=clock.now, embedder=embedder)
        async with app:
            await channel.say("alice", "My sister Ana lives in Lisbon.")
            await channel.wait_for(1, timeout=300)   # the first turn waits for the warm-up (litellm import)
            await app.gateway.idle()
            await app.engine.worker.drain()
            facts = app.store.read(lambda c: c.execute("SELECT text FROM memories WHERE kind = 'fact'").fetchall())
            assert app.llm.gate is not app.memory_llm.gate        # another server: a gate of its own
    assert fake_llm.requests and all(is_reply_request(r) for r in fake_llm.requests)
    assert memory_server.requests and not any(is_reply_request(r) for r in memory_server.requests)
    assert {r["model"] for r in memory_server.requests} == {"small-model"}
    assert set(memory_server.keys) == {"Bearer sk-memory"} and set(fake_llm.keys) == {"Bearer sk-reply"}
    assert any("Lisbon" in text for (text,) in facts)


async def test_the_old_memory_model_key_is_another_model_on_the_replys_server_behind_the_same_gate(
        tmp_path, fake_llm, clock, embedder) -> None:
    fake_llm.responder = brain.respond
    settings = load_settings(None, env=env_for(tmp_path, fake_llm, MEMGATE_LLM_MEMORY_MODEL="small-model"))
    channel = RecordingChannel("console")
    async with build_app(settings, channels=[channel], clock=clock.now, embedder=embedder) as app:
        await channel.say("alice", "My sister Ana lives in Lisbon.")
        await channel.wait_for(1, timeout=300)
        await app.gateway.idle()
        await app.engine.worker.drain()
        assert app.llm.gate is app.memory_llm.gate
    assert {r["model"] for r in fake_llm.requests if not is_reply_request(r)} == {"small-model"}
    assert set(fake_llm.keys) == {"Bearer sk-reply"}


@pytest.mark.parametrize("env, names", [
    ({"MEMGATE_LLM_MEMORY_MODEL": "a", "MEMGATE_MEMORY_LLM_MODEL": "b"}, ("llm.memory_model", "memory.llm_model")),
    ({"MEMGATE_MEMORY_LLM_API_BASE": "http://127.0.0.1:9/v1"}, ("memory.llm_api_base", "memory.llm_model")),
])
def test_conflicting_memory_model_keys_are_one_line_naming_both(tmp_path, env, names) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, env={"MEMGATE_DATA_DIR": str(tmp_path), "MEMGATE_LLM_MODEL": "openai/x", **env})
    text = str(caught.value)
    assert "\n" not in text and all(name in text for name in names)


def test_a_memory_key_written_in_the_file_is_refused_as_a_secret(tmp_path) -> None:
    config = tmp_path / "memgate.toml"
    config.write_text('[memory]\nllm_model = "openai/gpt-4o-mini"\nllm_api_key = "sk-oops"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={"MEMGATE_DATA_DIR": str(tmp_path)})
    assert "memory.llm_api_key" in str(caught.value) and "MEMGATE_MEMORY_LLM_API_KEY" in str(caught.value)
    assert "sk-oops" not in str(caught.value)



async def test_a_short_reply_length_does_not_cut_memorys_json(tmp_path, fake_llm) -> None:
    """[llm] max_tokens is the reply's: the reconcile call, which names no length of its own, took
    it (64 tokens cut its JSON); memory calls now have their own."""
    from bot.model_clients import make_llm

    settings = load_settings(None, env=env_for(tmp_path, fake_llm, MEMGATE_LLM_MAX_TOKENS="64"))
    await make_llm(settings, None, memory=True).complete([{"role": "user", "content": "{}"}], purpose="reconcile",
                                                        json_mode=True)
    await make_llm(settings, None).complete([{"role": "user", "content": "hi"}], purpose="reply")
    memory, reply = (r["max_tokens"] for r in fake_llm.requests)
    assert reply == 64 and memory >= 1024


def test_memory_calls_have_a_timeout_of_their_own_or_llms(tmp_path, fake_llm) -> None:
    from bot.model_clients import make_llm

    own = load_settings(None, env=env_for(tmp_path, fake_llm, MEMGATE_LLM_TIMEOUT="600", MEMGATE_MEMORY_LLM_TIMEOUT="30"))
    assert (make_llm(own, None, memory=True).settings.timeout, make_llm(own, None).settings.timeout) == (30, 600)
    inherited = load_settings(None, env=env_for(tmp_path, fake_llm, MEMGATE_LLM_TIMEOUT="600"))
    assert make_llm(inherited, None, memory=True).settings.timeout == 600
