"""The scripted fake LLM server, driven through the real litellm client; and the fake clock."""

import os

# litellm reads these at import time: no cost-map download, no hub lookups.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ["HF_HUB_OFFLINE"] = "1"

import json  # noqa: E402
import math  # noqa: E402
from datetime import UTC, datetime, timedelta, timezone  # noqa: E402

import aiohttp  # noqa: E402
import litellm  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.fakes.clock import FakeClock  # noqa: E402
from tests.fakes.llm_server import Delay, FakeError, FakeLLM, ToolCall, embed_vector  # noqa: E402

litellm.suppress_debug_info = True

# litellm 1.110 builds pydantic schemas lazily on first use; their ReadOnly notices are noise here.
pytestmark = pytest.mark.filterwarnings("ignore:.*`ReadOnly` qualifier:UserWarning")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "remember",
            "description": "Store a fact about the user.",
            "parameters": {
                "type": "object",
                "properties": {"fact": {"type": "string"}, "weight": {"type": "number"}},
                "required": ["fact"],
            },
        },
    }
]


@pytest.fixture
async def llm():
    async with FakeLLM() as server:
        yield server


async def ask(server: FakeLLM, messages=None, **kwargs):
    """One litellm chat call against the fake, no retries, bounded in time."""
    kwargs.setdefault("num_retries", 0)
    kwargs.setdefault("timeout", 10)
    return await litellm.acompletion(
        model="openai/fake-model",
        api_base=server.base_url,
        api_key="sk-test",
        messages=messages or [{"role": "user", "content": "hi"}],
        **kwargs,
    )


async def embed(server: FakeLLM, inputs: list[str]):
    return await litellm.aembedding(
        model="openai/fake-embed", api_base=server.base_url, api_key="sk-test", input=inputs, timeout=10
    )


# -- chat ----------------------------------------------------------------------------------


async def test_scripted_string_comes_back_as_content_with_usage(llm):
    llm.script("Hello there, friend.")
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello please"}]
    response = await ask(llm, messages)

    assert response.choices[0].message.content == "Hello there, friend."
    assert response.choices[0].finish_reason == "stop"
    assert response.model.endswith("fake-model")
    assert response.id.startswith("chatcmpl-")
    chars = len("You are terse.") + len("Say hello please")
    assert response.usage.prompt_tokens == chars // 4 + 1
    assert response.usage.completion_tokens == len("Hello there, friend.") // 4 + 1
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens


async def test_script_is_fifo_then_falls_back_to_ok(llm):
    llm.script("first", "second")
    answers = [(await ask(llm)).choices[0].message.content for _ in range(3)]
    assert answers == ["first", "second", "OK"]
    assert llm.calls == 3


async def test_tool_calls_come_back_parsed(llm):
    llm.script([ToolCall("remember", {"fact": "likes tea", "weight": 0.5}), ToolCall("remember", {"fact": "x"}, id="mine")])
    response = await ask(llm, tools=TOOLS)

    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert [c.function.name for c in calls] == ["remember", "remember"]
    assert json.loads(calls[0].function.arguments) == {"fact": "likes tea", "weight": 0.5}
    assert calls[0].id == "call_1"
    assert calls[1].id == "mine"


async def test_requests_record_messages_and_tools(llm):
    llm.script([ToolCall("remember", {"fact": "likes tea"})], "Noted.")
    first = [{"role": "user", "content": "I like tea"}]
    response = await ask(llm, first, tools=TOOLS)
    call = response.choices[0].message.tool_calls[0]
    second = first + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "stored"},
    ]
    await ask(llm, second, tools=TOOLS)

    assert llm.calls == 2
    assert llm.requests[0]["messages"] == first
    assert llm.requests[0]["tools"] == TOOLS
    assert llm.requests[0]["model"] == "fake-model"
    last = llm.last_messages()
    assert [m["role"] for m in last] == ["user", "assistant", "tool"]
    assert last[1]["tool_calls"][0]["function"]["name"] == "remember"
    assert last[2] == {"role": "tool", "tool_call_id": call.id, "content": "stored"}


async def test_fake_error_surfaces_as_litellm_exception(llm):
    llm.script(FakeError(500, "kaput"), "recovered")
    with pytest.raises(litellm.InternalServerError, match="kaput"):
        await ask(llm)
    assert llm.calls == 1  # num_retries=0: the client did not retry
    assert (await ask(llm)).choices[0].message.content == "recovered"


async def test_fail_next_goes_ahead_of_the_script_with_its_status(llm):
    llm.script("after")
    llm.fail_next(1, status=429)
    with pytest.raises(litellm.RateLimitError):
        await ask(llm)
    assert (await ask(llm)).choices[0].message.content == "after"


async def test_callable_and_responder_see_the_request_body(llm):
    llm.script(lambda body: f"echo: {body['messages'][-1]['content']}")
    llm.responder = lambda body: [ToolCall("remember", {"n": len(body["messages"])})]

    assert (await ask(llm, [{"role": "user", "content": "ping"}])).choices[0].message.content == "echo: ping"
    response = await ask(llm, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], tools=TOOLS)
    assert json.loads(response.choices[0].message.tool_calls[0].function.arguments) == {"n": 2}


async def test_delay_longer_than_client_timeout_is_a_timeout(llm):
    llm.script(Delay(30, "too late"))
    with pytest.raises(litellm.Timeout):
        await ask(llm, timeout=0.3)


async def test_delay_then_answers(llm):
    llm.script(Delay(0.01, "eventually"))
    assert (await ask(llm)).choices[0].message.content == "eventually"


async def test_unusable_script_item_fails_loudly(llm):
    llm.script(lambda body: 42)
    with pytest.raises(litellm.InternalServerError, match="unusable script item"):
        await ask(llm)


async def test_stream_content(llm):
    text = "A streamed answer that spans several chunks."
    llm.script(text)
    stream = await ask(llm, stream=True, stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]

    assert len(chunks) > 3
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    rebuilt = litellm.stream_chunk_builder(chunks)
    assert rebuilt.choices[0].message.content == text
    assert rebuilt.usage.completion_tokens == len(text) // 4 + 1
    assert llm.requests[-1]["stream"] is True


async def test_stream_tool_calls(llm):
    llm.script([ToolCall("remember", {"fact": "a rather long fact to split across chunks"})])
    stream = await ask(llm, tools=TOOLS, stream=True)
    rebuilt = litellm.stream_chunk_builder([chunk async for chunk in stream])

    call = rebuilt.choices[0].message.tool_calls[0]
    assert call.function.name == "remember"
    assert json.loads(call.function.arguments) == {"fact": "a rather long fact to split across chunks"}
    assert rebuilt.choices[0].finish_reason == "tool_calls"


async def test_reset_forgets_requests_and_script(llm):
    llm.script("never said")
    await ask(llm)
    await embed(llm, ["x"])
    llm.script("dropped")
    llm.reset()
    assert (llm.calls, llm.embedding_requests, llm.last_messages()) == (0, [], [])
    assert (await ask(llm)).choices[0].message.content == "OK"


# -- embeddings ----------------------------------------------------------------------------


async def test_embeddings_dimension_determinism_and_usage(llm):
    first = await embed(llm, ["tea", "coffee"])
    again = await embed(llm, ["coffee"])

    vectors = [item["embedding"] for item in first.data]
    assert [len(v) for v in vectors] == [384, 384]
    assert vectors[0] != vectors[1]
    assert again.data[0]["embedding"] == pytest.approx(vectors[1], abs=1e-6)
    assert math.isclose(sum(x * x for x in vectors[0]), 1.0, rel_tol=1e-5)
    assert first.usage.prompt_tokens > 0
    assert llm.embedding_requests[0]["input"] == ["tea", "coffee"]
    assert llm.calls == 0


async def test_embed_dim_is_configurable():
    async with FakeLLM(embed_dim=8) as server:
        response = await embed(server, ["x"])
    assert len(response.data[0]["embedding"]) == 8


@settings(max_examples=50, deadline=None)
@given(text=st.text(max_size=200), dim=st.integers(min_value=1, max_value=64))
def test_embed_vector_is_deterministic_unit_length(text, dim):
    vector = embed_vector(text, dim)
    assert vector == embed_vector(text, dim)
    assert len(vector) == dim
    assert math.isclose(math.fsum(x * x for x in vector), 1.0, rel_tol=1e-9)


async def test_base64_embeddings_decode_to_the_float_vector(llm):
    import base64
    import struct

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        async with http.post(f"{llm.base_url}/embeddings", json={"input": "tea", "encoding_format": "base64"}) as resp:
            body = await resp.json()
    raw = base64.b64decode(body["data"][0]["embedding"])
    assert list(struct.unpack("<384f", raw)) == pytest.approx(embed_vector("tea", 384), abs=1e-6)


# -- plain HTTP ----------------------------------------------------------------------------


async def test_models_listing_and_unknown_path(llm):
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        async with http.get(f"{llm.base_url}/models") as resp:
            models = await resp.json()
        async with http.get(f"{llm.base_url}/nowhere") as resp:
            status, error = resp.status, await resp.json()
        async with http.post(f"{llm.base_url}/chat/completions", data=b"not json") as resp:
            bad_status = resp.status

    assert "fake-model" in [m["id"] for m in models["data"]]
    assert status == 404
    assert set(error["error"]) >= {"message", "type", "code"}
    assert bad_status == 400
    assert llm.calls == 0


async def test_base_url_needs_start_and_stop_is_idempotent():
    server = FakeLLM()
    with pytest.raises(RuntimeError):
        server.base_url
    await server.start()
    assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
    await server.stop()
    await server.stop()


# -- clock ---------------------------------------------------------------------------------


def test_clock_starts_at_default_in_utc():
    clock = FakeClock()
    assert clock.now() == datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
    assert clock.now().tzinfo is not None


def test_clock_advance_moves_wall_and_monotonic_together():
    clock = FakeClock(datetime(2025, 6, 1, tzinfo=UTC))
    before = clock.monotonic()
    clock.advance(hours=2, seconds=30)
    assert clock.now() == datetime(2025, 6, 1, 2, 0, 30, tzinfo=UTC)
    assert clock.monotonic() - before == 7230
    with pytest.raises(ValueError):
        clock.advance(seconds=-1)


def test_clock_set_converts_to_utc_and_never_moves_monotonic_back():
    clock = FakeClock()
    mono = clock.monotonic()
    clock.set(datetime(2026, 1, 1, 12, 0, tzinfo=timezone(timedelta(hours=2))))
    assert clock.now() == datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
    assert clock.now().utcoffset() == timedelta(0)
    assert clock.monotonic() == mono + 3600
    clock.set(datetime(2020, 1, 1))  # naive: taken as UTC; wall time may go back, monotonic may not
    assert clock.now() == datetime(2020, 1, 1, tzinfo=UTC)
    assert clock.monotonic() == mono + 3600
