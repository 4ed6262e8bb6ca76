"""A reply a person waits on is handed on as it is written (issue 30 item 5): the real litellm
client, streaming from the fake server, gives the text so far to `on_text` before the answer ends;
a retry starts the text over; tool-call answers hand on no text."""

from __future__ import annotations

import asyncio

from memory.llm import LiteLLM, LLMSettings
from tests.fakes.llm_server import FakeError, Streamed, ToolCall


def streaming_llm(fake_llm, **kw) -> LiteLLM:
    return LiteLLM(LLMSettings(model="openai/fake-model", api_base=fake_llm.base_url, api_key="sk-test", timeout=10,
                               retries=kw.pop("retries", 0), backoff=0.01, first_token_timeout=10, **kw))


async def test_the_text_so_far_is_handed_on_before_the_answer_ends(fake_llm):
    seen: list[str] = []
    first_shown = asyncio.Event()
    release = asyncio.Event()

    async def hold(i: int) -> None:
        if i == 2:
            await release.wait()

    def on_text(text: str) -> None:
        seen.append(text)
        if "dog is" in text:
            first_shown.set()

    fake_llm.script(Streamed(("The dog ", "is named ", "Brindlequix."), hold=hold))
    call = asyncio.create_task(streaming_llm(fake_llm).complete([{"role": "user", "content": "dog?"}], purpose="reply",
                                                                on_text=on_text))
    await asyncio.wait_for(first_shown.wait(), 30)
    assert not call.done()                      # the answer is not over, and its start is out
    assert seen[-1] == "The dog is named "
    release.set()
    result = await asyncio.wait_for(call, 30)
    assert result.content == "The dog is named Brindlequix."
    assert seen == ["The dog ", "The dog is named ", "The dog is named Brindlequix."]


async def test_a_retry_starts_the_text_over(fake_llm):
    seen: list[str] = []
    fake_llm.script(FakeError(500), Streamed(("Again ", "from the start.")))
    result = await streaming_llm(fake_llm, retries=1).complete([{"role": "user", "content": "hi"}], purpose="reply",
                                                               on_text=seen.append)
    assert result.content == "Again from the start."
    assert seen == ["Again ", "Again from the start."]


async def test_a_tool_call_answer_hands_on_no_text(fake_llm):
    seen: list[str] = []
    fake_llm.script([ToolCall("memory_search", {"query": "dog"})])
    result = await streaming_llm(fake_llm).complete([{"role": "user", "content": "dog?"}], purpose="reply",
                                                    tools=[{"type": "function", "function": {
                                                        "name": "memory_search", "parameters": {"type": "object"}}}],
                                                    on_text=seen.append)
    assert result.tool_calls and result.tool_calls[0].name == "memory_search"
    assert seen == []


async def test_a_sink_that_fails_never_breaks_the_answer(fake_llm):
    def broken(text: str) -> None:
        raise RuntimeError("the screen is gone")

    fake_llm.script(Streamed(("Still ", "answered.")))
    result = await streaming_llm(fake_llm).complete([{"role": "user", "content": "hi"}], purpose="reply", on_text=broken)
    assert result.content == "Still answered."
