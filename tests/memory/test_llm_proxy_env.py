"""Model calls through a proxy (issue 27): litellm's HTTP client takes HTTPS_PROXY / HTTP_PROXY /
ALL_PROXY from the environment (NO_PROXY keeps a local model direct), so a hosted model that is
blocked where the bot runs is reached the standard way. Checked in a process of its own:
litellm caches its clients, and a proxy must not leak into other tests."""

from __future__ import annotations

import asyncio
import os
import sys

from tests.fakes.proxy import FakeProxy
from tests.reliability.procs import ROOT

CALL = """
import asyncio
from memory.llm import LiteLLM, LLMSettings, set_offline_env
set_offline_env()
llm = LiteLLM(LLMSettings(model="openai/fake-model", api_base=__import__("sys").argv[1], api_key="sk-test",
                          timeout=20, retries=0))
print(asyncio.run(llm.complete([{"role": "user", "content": "hi"}], purpose="test")).content)
"""


async def call_model(base_url: str, **env: str) -> str:
    full = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    full.update({"PYTHONPATH": ROOT}, **env)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", CALL, base_url, env=full, cwd=ROOT,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-2000:]
    return out.decode().strip()


async def test_model_calls_take_the_proxy_from_the_environment(fake_llm):
    fake_llm.script("through the proxy")
    async with FakeProxy() as proxy:
        assert await call_model(fake_llm.base_url, HTTP_PROXY=proxy.url()) == "through the proxy"
        assert proxy.requests == [f"POST {fake_llm.base_url}/chat/completions"]
