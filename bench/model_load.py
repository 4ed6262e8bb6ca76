"""One model server for replies and memory: what people wait for when the model serves one request
at a time, as a home GPU or CPU does (issue 30).

One real `memgate run` (DuckDB, embeddings from the fake server) with N Telegram chats through the
fake Bot API; every chat call goes to a paced fake OpenAI-compatible server (tests/fakes/paced_llm.py):
`--slots` requests at once (the others wait their turn), the prompt read at `--prompt-rate`
tokens/s and the answer written at `--rate` tokens/s, streamed when asked. Each person sends a
message, waits for the reply, thinks `--think` seconds, and sends the next, for `--minutes`.

Prints one table: reply first token (the message sent -> the server writes the reply's first
token) p50/p95, reply total (sent -> the reply at the Bot API) p50/p95, replies done, memory calls
done (finished by the server) and cancelled, memory backlog (turns pending) at the end, and the
load average at the start and the end (the machine is shared).

    python bench/model_load.py [--chats 5] [--minutes 5] [--rate 20] [--slots 1] [--think 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import aiohttp  # noqa: E402

from bench.soak import backlog, free_port, load, percentile  # noqa: E402
from bench.telegram_load import FIRST_USER, TimedTelegram  # noqa: E402
from tests.fakes import brain  # noqa: E402
from tests.fakes.paced_llm import PacedLLM, Served  # noqa: E402
from tests.reliability.procs import is_reply_request, memgate_env, start, stderr_tail, terminate  # noqa: E402

MARKER = re.compile(r"\(chat (\d+) message (\d+)\)")
TOPICS = ("my sister Ana lives in Lisbon", "I play the cello on Sundays", "my dog Pico is afraid of thunder",
          "I am learning Japanese with an app", "my favourite tea is genmaicha", "what should I cook tonight?")


def marker_of(served: Served) -> tuple[int, int] | None:
    """The (chat, message) a reply request answers, from the marker in its last user message."""
    user = next((m.get("content") for m in reversed(served.body.get("messages", [])) if m.get("role") == "user"), "")
    found = MARKER.search(user if isinstance(user, str) else str(user))
    return (int(found.group(1)), int(found.group(2))) if found else None


async def person(tg: TimedTelegram, chat: int, stop_at: float, think: float, sent: dict, answered: dict,
                 timeout: float) -> None:
    """Send, wait for the reply, think, send again, until `stop_at` (time.monotonic)."""
    user, i = FIRST_USER + chat, 0
    while time.monotonic() < stop_at:
        text = f"{TOPICS[(chat * 5 + i) % len(TOPICS)]} (chat {chat} message {i})"
        waiter: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        sent[(chat, i)] = time.monotonic()
        msg = tg.inject_message(user, text, first_name=f"User{chat}")
        tg.waiters[(user, msg["message_id"])] = waiter
        try:
            await asyncio.wait_for(waiter, timeout)
            answered[(chat, i)] = time.monotonic()
        except TimeoutError:
            pass   # counted as not answered
        i += 1
        await asyncio.sleep(think)


async def run(args: argparse.Namespace) -> int:
    sent: dict[tuple[int, int], float] = {}
    answered: dict[tuple[int, int], float] = {}
    with tempfile.TemporaryDirectory(prefix="memgate-model-load-") as tmp:
        async with (PacedLLM(slots=args.slots, rate=args.rate, prompt_rate=args.prompt_rate, responder=brain.respond) as llm,
                    TimedTelegram() as tg, aiohttp.ClientSession() as http):
            port = free_port()
            config = f'[channels.telegram]\nenabled = true\nbase_url = "{tg.base_url}"\npoll_timeout = 10.0\n'
            # The gateway as a person runs it against a server on their machine: memgate's defaults
            # (retries, concurrency 0 = one call at a time for a local address), embeddings apart.
            extra = {"TELEGRAM_BOT_TOKEN": tg.token, "MEMGATE_API_PORT": str(port), "MEMGATE_LLM_RETRIES": "2",
                     "MEMGATE_LLM_CONCURRENCY": "0",
                     "MEMGATE_EMBEDDING_PROVIDER": "litellm", "MEMGATE_EMBEDDING_MODEL": "openai/fake-embed",
                     "MEMGATE_EMBEDDING_API_BASE": llm.base_url, "MEMGATE_EMBEDDING_API_KEY": "sk-test",
                     **dict(kv.split("=", 1) for kv in args.env)}
            proc = await start(memgate_env(Path(tmp), llm.base_url, config, **extra), "run")
            api = f"http://127.0.0.1:{port}"
            try:
                warm = tg.inject_message(FIRST_USER - 1, "hello, warming up")
                await tg.wait_until(lambda: (FIRST_USER - 1, warm["message_id"]) in tg.arrivals, 600)
                while await backlog(http, api):   # the warm-up turn's memory work is not measured
                    await asyncio.sleep(0.5)
                load_before = load()
                t0 = time.monotonic()
                llm.served.clear()
                print(f"model_load: {args.chats} chats x {args.minutes:g} min, model {args.slots} slot(s) at "
                      f"{args.rate:g} tokens/s (prompt {args.prompt_rate:g}/s), think {args.think:g} s; "
                      f"gateway pid {proc.pid}; load {load_before}", flush=True)
                stop_at = t0 + args.minutes * 60
                await asyncio.gather(*(person(tg, c, stop_at, args.think, sent, answered, args.reply_timeout)
                                       for c in range(args.chats)))
                at_end = await backlog(http, api)
                load_after = load()
            finally:
                code = await terminate(proc)
            if code:
                print(f"gateway exited {code}:\n{await stderr_tail(proc)}")
    replies = [s for s in llm.served if is_reply_request(s.body)]
    memory = [s for s in llm.served if s.body and not is_reply_request(s.body)]
    first: dict[tuple[int, int], float] = {}
    for s in sorted(replies, key=lambda s: s.first_token or float("inf")):
        key = marker_of(s)
        if key in sent and s.first_token and key not in first:
            first[key] = s.first_token - sent[key]
    totals = [answered[k] - sent[k] for k in answered]
    firsts = list(first.values())
    row = {
        "first token p50 s": percentile(firsts, 0.5), "first token p95 s": percentile(firsts, 0.95),
        "reply p50 s": percentile(totals, 0.5), "reply p95 s": percentile(totals, 0.95),
        "replies done": len(answered), "not answered": len(sent) - len(answered),
        "memory calls done": sum(1 for s in memory if s.ended and not s.cancelled),
        "memory calls cut": sum(1 for s in memory if s.cancelled),
        "backlog at end": at_end,
    }
    print("| " + " | ".join(row) + " | load before | load after |")
    print("|" + "---|" * (len(row) + 2))
    print("| " + " | ".join(f"{v:.1f}" if isinstance(v, float) else str(v) for v in row.values())
          + f" | {load_before} | {load_after} |")
    return 1 if code else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=5)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--slots", type=int, default=1, help="requests the model server serves at once")
    parser.add_argument("--rate", type=float, default=20.0, help="answer tokens per second")
    parser.add_argument("--prompt-rate", type=float, default=500.0, help="prompt tokens read per second")
    parser.add_argument("--think", type=float, default=2.0, help="seconds a person waits after a reply")
    parser.add_argument("--reply-timeout", type=float, default=300.0, help="seconds a person waits for a reply")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="extra environment for the gateway (e.g. MEMGATE_LLM_CONCURRENCY=2)")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
