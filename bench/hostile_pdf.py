"""What a PDF built to be slow costs everyone else (issue 31, item 1): a real `memgate run` on the
fake Bot API gets the red team's kind of PDF (pages sharing one compressed stream of `() Tj`
operators, a few KB), then, once its download is served, another person's messages and /healthz
probes. Prints how long they waited, and how the PDF was answered.

    python bench/hostile_pdf.py                 # 20 pages, 300,000 operators (6 KB)
    python bench/hostile_pdf.py --pages 5 --ops 100000 --others 5

Before issue 31 pypdf read the PDF on the event loop: the others waited for the whole read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.fakes.files import slow_pdf  # noqa: E402
from tests.fakes.llm_server import FakeLLM  # noqa: E402
from tests.fakes.telegram_api import FakeTelegram  # noqa: E402
from tests.reliability.procs import memgate_env, responder, start, terminate, until  # noqa: E402


def probe(url: str) -> float:
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=600) as resp:
            resp.read()
    except OSError:
        return float("nan")
    return time.perf_counter() - started


def quoting(tg: FakeTelegram, msg: dict) -> list[dict]:
    return [s for s in tg.sent if s["chat_id"] == msg["chat"]["id"]
            and (s.get("reply_parameters") or {}).get("message_id") == msg["message_id"]]


async def run(pages: int, ops: int, others: int, read_timeout: float) -> None:
    data = slow_pdf(pages, ops)
    with tempfile.TemporaryDirectory() as tmp:
        async with FakeLLM() as llm, FakeTelegram() as tg:
            config = (f'[channels.telegram]\nenabled = true\nbase_url = "{tg.base_url}"\npoll_timeout = 1.0\n'
                      f'[api]\nport = 0\n[media]\nread_timeout = {read_timeout}\n')
            env = memgate_env(Path(tmp), llm.base_url, config, TELEGRAM_BOT_TOKEN=tg.token)
            llm.responder = responder(slow_replies=False)
            proc = await start(env, "run")
            try:
                api = Path(tmp) / "data" / "api.json"
                await until(lambda: api.exists() and json.loads(api.read_text()).get("pid") == proc.pid,
                            "the API address published", proc=proc)
                url = json.loads(api.read_text())["url"]
                # Warm up: the first turn loads the embedder and litellm; that is not the PDF's cost.
                warm = tg.inject_message(400, "hello", first_name="Warm")
                await until(lambda: quoting(tg, warm), "the warm-up answered", proc=proc, timeout=600)
                sent_at = time.perf_counter()
                pdf = tg.inject_message(401, document="report.pdf", file_data=data, mime_type="application/pdf")
                await until(lambda: tg.downloads, "the PDF downloaded", proc=proc)
                waits, probes = [], []
                for n in range(others):
                    t0 = time.perf_counter()
                    msg = tg.inject_message(402 + n, f"Hi, I am person {n}", first_name=f"P{n}")
                    probes.append(await asyncio.to_thread(probe, url))
                    await until(lambda: quoting(tg, msg), "another person answered", proc=proc, timeout=3600)
                    waits.append(time.perf_counter() - t0)
                await until(lambda: quoting(tg, pdf), "the PDF answered", proc=proc, timeout=3600)
                pdf_s = time.perf_counter() - sent_at
            finally:
                await terminate(proc)
    load = os.getloadavg()[0]
    print(f"PDF: {len(data):,} bytes, {pages} pages, {ops:,} operators; [media] read_timeout = {read_timeout:g} s; "
          f"load average {load:.1f}")
    print("| what | seconds |\n|---|---|")
    for n, (w, p) in enumerate(zip(waits, probes)):
        print(f"| person {n}: message -> reply | {w:.2f} |")
        print(f"| /healthz while the PDF is read ({n}) | {p:.2f} |")
    print(f"| the PDF: message -> its answer | {pdf_s:.1f} |")
    print(f"\nthe PDF's answer: {quoting(tg, pdf)[0]['visible_text'][:160]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=20)
    ap.add_argument("--ops", type=int, default=300_000)
    ap.add_argument("--others", type=int, default=3)
    ap.add_argument("--read-timeout", type=float, default=30.0)
    args = ap.parse_args()
    asyncio.run(run(args.pages, args.ops, args.others, args.read_timeout))


if __name__ == "__main__":
    main()
