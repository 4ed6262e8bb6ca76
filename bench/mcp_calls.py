"""What one MCP tool call costs on each path, with the SDK's own client: a real headless `memgate run`
(API only, a fresh data folder, the local embedder), N `search` calls each way.

    python bench/mcp_calls.py            # 20 calls each way
    python bench/mcp_calls.py -n 50

Rows: streamable HTTP at /mcp in one client session; `memgate mcp` over stdio through the gateway
(each call is its own exchange with /mcp); `memgate mcp` with no gateway (the database opened for
each call). Printed: median and p90 wall time per call, the gateway's HTTP requests per call (its
/metrics counter, a count, not a timing) and the load average beside each row: the machine is
shared, so times are indicative.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx2  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

FACTS = ("prefers window seats on long flights", "is allergic to peanuts", "runs the Berlin marathon in September",
         "keeps the spare key under the red flowerpot", "reads on trains")


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"


def cli(env: dict, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "bot.cli", *args], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    if out.returncode:
        raise SystemExit(f"memgate {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout.strip()


def mcp_posts(url: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return sum(float(m) for m in re.findall(r'memgate_api_requests_total\{method="POST",status="\d+"\} ([0-9.]+)', text))


async def timed(session: ClientSession, n: int) -> list[float]:
    times = []
    for i in range(n):
        started = time.perf_counter()
        res = await session.call_tool("search", {"query": FACTS[i % len(FACTS)].split()[-1], "limit": 5})
        times.append((time.perf_counter() - started) * 1000)
        assert not res.is_error, res.content[0].text
    return times


async def over_http(url: str, key: str, n: int) -> tuple[list[float], float]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http, \
            streamable_http_client(url + "/mcp", http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        await timed(session, 2)  # warm: the first search pays for the vector file and the query model
        before = mcp_posts(url)
        return await timed(session, n), mcp_posts(url) - before


async def over_stdio(env: dict, n: int, url: str | None) -> tuple[list[float], float | None]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "bot.cli", "mcp"], env=env, cwd=str(ROOT))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await timed(session, 2)
        before = mcp_posts(url) if url else None
        times = await timed(session, n)
        return times, (mcp_posts(url) - before if url else None)


def row(name: str, times: list[float], posts: float | None, n: int) -> str:
    q = statistics.quantiles(times, n=10)
    per = f"{posts / n:.1f}" if posts is not None else "-"
    return f"| {name} | {statistics.median(times):.0f} | {q[8]:.0f} | {per} | {load()} |"


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=20, help="search calls per path (default 20)")
    n = p.parse_args().n
    with tempfile.TemporaryDirectory(prefix="memgate-mcp-bench-") as tmp:
        config = Path(tmp) / "memgate.toml"
        config.write_text("[channels.console]\nenabled = false\n[api]\nport = 0\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMGATE_")}
        env.update(MEMGATE_CONFIG=str(config), MEMGATE_DATA_DIR=str(Path(tmp) / "data"), PYTHONPATH=str(ROOT))
        gateway = subprocess.Popen([sys.executable, "-m", "bot.cli", "run"], env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            address = Path(tmp) / "data" / "api.json"
            for _ in range(600):
                if address.exists():
                    break
                time.sleep(0.1)
            url = json.loads(address.read_text())["url"]
            key = cli(env, "keys", "create", "--space", "u_bench", "--scope", "write").splitlines()[0]
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http, \
                    streamable_http_client(url + "/mcp", http_client=http) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                for fact in FACTS:
                    await session.call_tool("store", {"text": f"The user {fact}"})
            print(f"| path ({n} searches) | median ms | p90 ms | gateway POSTs per call | load |")
            print("|---|---|---|---|---|")
            print(row("streamable HTTP, one session", *await over_http(url, key, n), n))
            print(row("memgate mcp via the gateway", *await over_stdio({**env, "MEMGATE_API_KEY": key}, n, url), n))
        finally:
            gateway.terminate()
            gateway.wait(timeout=120)
        print(row("memgate mcp, no gateway", *await over_stdio({**env, "MEMGATE_API_KEY": key}, n, None), n))


if __name__ == "__main__":
    asyncio.run(main())
