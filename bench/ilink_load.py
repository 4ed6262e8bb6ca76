"""WeChat iLink under load: 20 users x 10 messages through the whole bot.

The real WechatIlinkAdapter long-polls the fake iLink server (tests/fakes/ilink.py, strict about
headers, cursor and context tokens); behind it run the real gateway, access control (open DM
policy), agent, litellm, DuckDB and e5 embeddings, and the fake LLM answering like a careful
model (tests/fakes/brain.py). All messages arrive as one burst, round-robin over the users, so
batches mix users and every conversation queues up.

Checks: nothing lost, nothing answered twice, each user's answers in the order they wrote,
every message acknowledged through the cursor. Prints messages/s and the update-to-reply
latency (from the message being available on the server to its answer reaching the server;
in a burst it is mostly waiting behind the same user's earlier messages, hence the turn time).

    python bench/ilink_load.py [--users 20] [--per-user 10]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from aiohttp import web  # noqa: E402

from adapters.wechat.ilink.adapter import WechatIlinkAdapter  # noqa: E402
from bot.app import build_app  # noqa: E402
from bot.config import load_settings  # noqa: E402
from memory.embed import LocalE5Embedder  # noqa: E402
from tests.fakes import brain  # noqa: E402
from tests.fakes.ilink import FakeIlink  # noqa: E402
from tests.fakes.llm_server import FakeLLM  # noqa: E402


class TimedIlink(FakeIlink):
    """The fake server, noting when each message became available and when each answer came."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.injected_at: dict[str, float] = {}
        self.sent_at: list[float] = []

    def inject_text(self, user_id: str, text: str):  # type: ignore[override]
        self.injected_at[text] = time.perf_counter()
        return super().inject_text(user_id, text)

    async def _sendmessage(self, request: web.Request) -> web.Response:
        before = len(self.sent)
        response = await super()._sendmessage(request)
        self.sent_at.extend([time.perf_counter()] * (len(self.sent) - before))
        return response


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile: the smallest value with at least p% of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def text_of(user: str, i: int) -> str:
    return f"message {i} from {user}"


async def run(users: int, per_user: int, timeout: float) -> int:
    names = [f"user{u:02d}@im.wechat" for u in range(users)]
    total = users * per_user
    embedder = LocalE5Embedder()
    embedder.embed_query("warm up")  # load the model before the clock starts
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        Path(tmp, "none.toml").write_text("")
        async with FakeLLM(responder=brain.respond) as llm, TimedIlink(longpoll_ms=1000) as fake:
            fake.write_credentials(data)
            settings = load_settings(None, env={
                "MEMGATE_CONFIG": str(Path(tmp, "none.toml")), "MEMGATE_DATA_DIR": str(data),
                "MEMGATE_LLM_API_BASE": llm.base_url, "MEMGATE_LLM_MODEL": "fake-model",
                "MEMGATE_LLM_API_KEY": "sk-bench", "MEMGATE_ACCESS_DM_POLICY": "open"})
            adapter = WechatIlinkAdapter(data, backoff_base=0.05)
            app = build_app(settings, channels=[adapter], embedder=embedder)
            turns = []
            app.gateway.on_turn = turns.append
            async with app:
                start = time.perf_counter()
                for i in range(per_user):
                    for name in names:
                        fake.inject_text(name, text_of(name, i))
                    await asyncio.sleep(0)
                await fake.wait_for(lambda: len(fake.sent) >= total or adapter.stats["send_failed"] > 0,
                                    timeout, "every answer sent")
                elapsed = max(fake.sent_at) - start
                await fake.wait_for(lambda: fake.unacknowledged() == [], timeout, "every message acknowledged")
                t_exit = time.perf_counter()
            shutdown = time.perf_counter() - t_exit  # answers what is left, drains ingestion

    answered = {name: [brain_echo(m.text) for m in fake.sent if m.to_user_id == name] for name in names}
    expected = {name: [text_of(name, i) for i in range(per_user)] for name in names}
    lost = sum(len(set(expected[n]) - set(answered[n])) for n in names)
    twice = sum(len(answered[n]) - len(set(answered[n])) for n in names)
    out_of_order = sum(1 for n in names if answered[n] != expected[n] and sorted(answered[n]) == sorted(expected[n]))
    latencies = [(at - fake.injected_at[brain_echo(m.text)]) * 1000 for m, at in zip(fake.sent, fake.sent_at)]
    # A turn: recall, the reply call, capture (what one message costs once its turn comes).
    turn_ms = [t.timings_ms["outside_llm"] + t.timings_ms["llm"] for t in turns] or [0.0]
    problems = [*fake.header_errors, *fake.protocol_errors]
    if fake.duplicates():
        problems.append(f"messages handed out again after their ack: {fake.duplicates()}")

    print(f"\nWeChat iLink load: {users} users x {per_user} messages, one burst, through adapter + gateway + "
          "agent + DuckDB (fake iLink, fake LLM)")
    rows = [
        ("messages sent / answered", f"{total} / {len(fake.sent)}"),
        ("lost / answered twice", f"{lost} / {twice}"),
        ("users with answers out of order", f"{out_of_order}"),
        ("send failures (ret -2 etc.)", f"{adapter.stats['send_failed']}"),
        ("getupdates calls", f"{fake.calls['getupdates']}"),
        ("wall time, first message to last answer", f"{elapsed:.2f} s"),
        ("throughput", f"{total / elapsed:.1f} messages/s"),
        ("update-to-reply latency p50", f"{percentile(latencies, 50):.0f} ms"),
        ("update-to-reply latency p95", f"{percentile(latencies, 95):.0f} ms"),
        ("update-to-reply latency max", f"{max(latencies):.0f} ms"),
        ("one agent turn p50 / p95", f"{percentile(turn_ms, 50):.0f} / {percentile(turn_ms, 95):.0f} ms"),
        ("LLM calls (reply + ingest)", f"{len(llm.requests)}"),
        ("shutdown (drains ingestion)", f"{shutdown:.2f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"  {key:<{width}}  {value:>16}")
    ok = lost == 0 and twice == 0 and out_of_order == 0 and len(fake.sent) == total and not problems
    for problem in problems:
        print(f"  problem: {problem}")
    print("  result: OK" if ok else "  result: FAILED")
    return 0 if ok else 1


def brain_echo(reply: str) -> str:
    """The user's words inside the fake model's answer ("... You said: <text>")."""
    return reply.rsplit("You said: ", 1)[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--per-user", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    args = parser.parse_args()
    return asyncio.run(run(args.users, args.per_user, args.timeout))


if __name__ == "__main__":
    raise SystemExit(main())
