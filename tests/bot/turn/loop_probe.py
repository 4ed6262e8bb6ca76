"""Run one real turn (and its ingestion) in a fresh interpreter with asyncio debug on; print, as
JSON, every callback that held the event loop longer than the threshold.

Used by tests/bot/test_event_loop.py in a subprocess, so heavy libraries (litellm, jieba, the
embedding model) are really imported for the first time while the bot is running, as after
every start. Measured two ways: asyncio's own slow-callback warnings (wall time), and the loop
thread's CPU time per callback (what the callback itself cost, whatever the machine's load).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path

THRESHOLD = 0.1


def main(base_url: str, data_dir: str) -> None:
    slow_wall: list[str] = []
    slow_cpu: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            if msg.startswith("Executing") and " took " in msg:
                slow_wall.append(msg[:300])

    logging.getLogger("asyncio").addHandler(Capture())
    logging.getLogger("asyncio").setLevel(logging.WARNING)

    original = asyncio.events.Handle._run

    def timed(self):  # the loop thread's CPU time per callback
        t0 = time.thread_time()
        try:
            return original(self)
        finally:
            spent = time.thread_time() - t0
            if spent > THRESHOLD:
                task = getattr(self._callback, "__self__", None)
                what = task.get_coro() if isinstance(task, asyncio.Task) else self
                slow_cpu.append(f"{spent:.3f}s cpu: {what!r}"[:300])

    from bot.app import build_app
    from bot.config import load_settings
    from tests.fakes.channel import RecordingChannel

    async def turn() -> None:
        loop = asyncio.get_running_loop()
        settings = load_settings(None, env={
            "MEMGATE_CONFIG": str(Path(data_dir) / "none.toml"), "MEMGATE_DATA_DIR": data_dir,
            "MEMGATE_LLM_API_BASE": base_url, "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_API_KEY": "sk-test",
            "MEMGATE_LLM_RETRIES": "0"})
        channel = RecordingChannel("console")
        app = await asyncio.to_thread(build_app, settings, channels=[channel])
        loop.set_debug(True)
        loop.slow_callback_duration = THRESHOLD
        asyncio.events.Handle._run = timed
        async with app:
            await channel.say("alice", "我对花生过敏 and I live in Porto.")
            await channel.wait_for(1, timeout=300)
            await app.gateway.idle()
            await app.engine.worker.drain()
            await channel.say("alice", "what am I allergic to?")
            await channel.wait_for(2, timeout=300)
        asyncio.events.Handle._run = original
        loop.set_debug(False)

    asyncio.run(turn())
    print(json.dumps({"wall": slow_wall, "cpu": slow_cpu}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
