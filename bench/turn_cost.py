"""Cost and overhead of one turn: a scripted 10-turn conversation through the real gateway,
agent, litellm and DuckDB against the fake OpenAI-compatible server (tests/fakes/brain.py
answers memgate's prompts like a careful model).

Prints LLM calls and tokens per turn by purpose (reply; memory: ingest, reconcile, task_boundary
when the separate judge is asked), the memory total against issue 13's targets, tokens injected
per recall, and the time a turn spends outside the LLM (recall, prompt building, capture).

    python bench/turn_cost.py
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bot.app import build_app  # noqa: E402
from bot.config import load_settings  # noqa: E402
from memory.text import MEMORY_OPEN, estimate_tokens  # noqa: E402
from tests.fakes import brain  # noqa: E402
from tests.fakes.channel import RecordingChannel  # noqa: E402
from tests.fakes.clock import FakeClock  # noqa: E402
from tests.fakes.llm_server import FakeLLM  # noqa: E402

CONVERSATION = [
    "Hi! I'm Dana, I moved to Lisbon last spring for a job at a biotech startup.",
    "I'm vegetarian and allergic to cashews, so restaurant tips need to respect that.",
    "My sister Maya visits next month; she loves jazz and old bookshops.",
    "Can you suggest a weekend plan for the two of us in Lisbon?",
    "I run 5 km every morning along the river before work.",
    "What was the name of my sister again?",
    "I'm learning Portuguese on Tuesdays and Thursdays with a tutor called Rui.",
    "Any dinner idea for Friday? Remember my allergy.",
    "Actually I stopped being vegetarian last week, I eat fish now.",
    "Summarise what you know about my week.",
]


async def main() -> int:
    clock = FakeClock()
    tmp = tempfile.TemporaryDirectory()
    async with FakeLLM(responder=brain.respond) as llm_server:
        env = {"MEMGATE_DATA_DIR": tmp.name, "MEMGATE_LLM_API_BASE": llm_server.base_url, "MEMGATE_LLM_MODEL": "fake-model",
               "MEMGATE_LLM_API_KEY": "sk-bench", "MEMGATE_CONFIG": str(Path(tmp.name) / "none.toml")}
        Path(tmp.name, "none.toml").write_text("")
        settings = load_settings(None, env=env)
        channel = RecordingChannel("console")
        app = build_app(settings, channels=[channel], clock=clock.now)
        results = []
        app.gateway.on_turn = results.append
        async with app:
            for i, text in enumerate(CONVERSATION, start=1):
                await channel.say("dana", text)
                await channel.wait_for(i, timeout=120)
                await app.gateway.idle()
                await app.engine.worker.drain()
                clock.advance(minutes=3)
            usage = app.llm.usage
            mem_usage = app.memory_llm.usage
            blocks = [r["messages"][0]["content"].split(MEMORY_OPEN, 1)[1] for r in llm_server.requests
                      if r["messages"][0]["content"].startswith("You are") and MEMORY_OPEN in r["messages"][0]["content"]]
        n = len(CONVERSATION)
        print(f"\nTurn cost over a scripted {n}-turn conversation (fake LLM, real litellm, DuckDB, e5 embeddings)")
        print(f"{'purpose':<14}{'calls/turn':>12}{'prompt tok/turn':>18}{'completion tok/turn':>22}")
        rows = [("reply", usage)] + [(name, mem_usage) for name in sorted(mem_usage.calls)]
        for name, u in rows:
            calls = u.calls.get(name, 0)
            print(f"{name:<14}{calls / n:>12.2f}{u.prompt_tokens.get(name, 0) / n:>18.0f}{u.completion_tokens.get(name, 0) / n:>22.0f}")
        mem_calls = mem_usage.total_calls()
        mem_tokens = mem_usage.total_tokens()
        print(f"{'memory':<14}{mem_calls / n:>12.2f}{'':>18}{mem_tokens / n:>22.0f} (prompt + completion; "
              f"target <= 1.1 calls, <= 600 tokens)")
        total_calls = usage.total_calls() + mem_usage.total_calls()
        total_tokens = usage.total_tokens() + mem_usage.total_tokens()
        print(f"{'all':<14}{total_calls / n:>12.2f}{'':>18}{total_tokens / n:>22.0f} (prompt + completion)")
        print(f"injected memory block: mean {statistics.mean(estimate_tokens(b) for b in blocks) if blocks else 0:.0f} tokens "
              f"over {len(blocks)} turns with memories")
        outside = sorted(r.timings_ms["outside_llm"] for r in results)
        recall = sorted(r.timings_ms["recall"] for r in results)
        capture = sorted(r.timings_ms["capture"] for r in results)
        print(f"time outside the LLM per turn: p50 {outside[len(outside) // 2]:.1f} ms "
              f"(recall p50 {recall[len(recall) // 2]:.1f} ms incl. query embedding, capture p50 {capture[len(capture) // 2]:.1f} ms), "
              f"max {outside[-1]:.1f} ms; first turn after start {results[0].timings_ms['outside_llm']:.1f} ms")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
