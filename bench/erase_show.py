"""Issue 35's "show": transcripts of `/forget everything` and `memgate memory erase`, and a byte scan
of every file in the data folder after each erase.

Two people talk to the real gateway (in this process, the terminal-free RecordingChannel standing
for Telegram, the fake OpenAI-compatible LLM on loopback, real DuckDB and embedder): Alice and Bob
each remember a marker word and say another, Alice sets a reminder and talks in a group. Alice
erases herself with /forget everything; the operator then erases Bob with `memgate memory erase`
(a real subprocess on the database). After each, every file under the data folder is read as
bytes (UTF-8, UTF-16, JSON escapes, base64: tests/bytescan.py) for both people's markers. DuckDB
stores strings compressed once a column segment holds a few dozen, which would hide words from a
byte scan; so this process and the CLI write plain segments (DuckDB's `force_compression`
setting), and the scan must find the other person's marker in memgate.duckdb to count.

Writes the transcripts and the scans to `--out` (default a temp folder) and prints them.

    python bench/erase_show.py [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.bytescan import files_under, find, install_plain_duckdb  # noqa: E402

install_plain_duckdb()

from bot.app import build_app  # noqa: E402
from bot.config import load_settings  # noqa: E402
from memory.embed import LocalE5Embedder  # noqa: E402
from tests.fakes import brain  # noqa: E402
from tests.fakes.channel import RecordingChannel  # noqa: E402
from tests.fakes.llm_server import FakeLLM  # noqa: E402

ALICE = ["QUOKKAMARBLE7731", "PELICANBRIM2290", "OTTERLANTERN6060"]
BOB = ["MANGOFJORD9902", "HERONSPIRAL4848"]
PLAIN_CLI = ["-c", "import sys; from tests.bytescan import install_plain_duckdb; install_plain_duckdb(); "
                   "from bot.cli import main; sys.exit(main(sys.argv[1:]))"]


def scan_report(data: Path, title: str, gone: list[str], kept: list[str]) -> str:
    found = find(data, gone + kept)
    lines = [f"== byte scan: {title}", f"files under {data}:"]
    lines += [f"  {p.relative_to(data)} ({p.stat().st_size:,} bytes)" for p in files_under(data)]
    for w in gone:
        lines.append(f"  erased {w}: {'FOUND in ' + ', '.join(found[w]) if found[w] else 'in no file'}")
    for w in kept:
        lines.append(f"  kept   {w}: {', '.join(found[w]) if found[w] else 'NOT FOUND'}")
    ok = all(not found[w] for w in gone) and all("memgate.duckdb" in found[w] for w in kept)
    lines.append(f"  verdict: {'ok' if ok else 'FAILED'} (erased words in no file; kept words found inside memgate.duckdb)")
    return "\n".join(lines) + "\n"


async def chat(channel: RecordingChannel, log: list[str], user: str, text: str, **kw) -> str:
    n = len(channel.sent)
    await channel.say(user, text, **kw)
    await channel.wait_for(n + 1, timeout=600)
    answer = channel.sent[n]
    where = " (in group g1)" if kw.get("is_group") else ""
    log.append(f"{user}{where}> {text}")
    doc = f"\n    [file {answer.document.filename}, {len(answer.document.data):,} bytes]" if answer.document else ""
    log.append("bot> " + answer.text.replace("\n", "\n     ") + doc)
    return answer.text


async def conversation(data: Path, llm_url: str, out: Path) -> tuple[str, str]:
    (out / "none.toml").write_text("")
    env = {"MEMGATE_CONFIG": str(out / "none.toml"), "MEMGATE_DATA_DIR": str(data), "MEMGATE_LLM_API_BASE": llm_url,
           "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0", "MEMGATE_LLM_API_KEY": "sk-test",
           "MEMGATE_LLM_MEMORY_LLM": "false", "MEMGATE_ACCESS_DM_POLICY": "allowlist",
           "MEMGATE_ACCESS_ALLOW": "telegram:alice,telegram:bob", "MEMGATE_ACCESS_GROUPS": "telegram:g1"}
    channel = RecordingChannel("telegram")
    app = build_app(load_settings(None, env=env), channels=[channel], embedder=LocalE5Embedder())
    log: list[str] = []
    async with app:
        await chat(channel, log, "alice", f"/remember my locker code is {ALICE[0]}")
        await chat(channel, log, "alice", f"my sister lives in {ALICE[1]}")
        await chat(channel, log, "alice", f"/remind tomorrow 9:00 water the {ALICE[2]} plants")
        await chat(channel, log, "alice", "group plan: picnic at GROUPNOTE5150 on Sunday", chat="g1", is_group=True,
                   mentions_bot=True)
        await chat(channel, log, "bob", f"/remember my bike is called {BOB[0]}")
        await chat(channel, log, "bob", f"I train at {BOB[1]} on Mondays")
        await app.engine.worker.drain()
        log.append("--- the transcript of /forget everything starts here ---")
        await chat(channel, log, "alice", "/memory")
        await chat(channel, log, "alice", "/export")
        await chat(channel, log, "alice", "/forget everything", chat="g1", is_group=True, mentions_bot=True)
        asked = await chat(channel, log, "alice", "/forget everything")
        code = asked.rsplit("/forget everything ", 1)[1].split()[0]
        await chat(channel, log, "alice", f"/forget everything {code}")
        await chat(channel, log, "alice", "/memory")
        await chat(channel, log, "bob", "/memory")
        await app.gateway.idle()
        scan = scan_report(data, "after /forget everything (the gateway still running)", ALICE, BOB)
    return "\n".join(log) + "\n", scan


def cli(data: Path, out: Path, log: list[str], *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMGATE_")}
    env.update({"MEMGATE_DATA_DIR": str(data), "MEMGATE_CONFIG": str(out / "none.toml"), "PYTHONPATH": str(ROOT)})
    r = subprocess.run([sys.executable, *PLAIN_CLI, *args], env=env, cwd=ROOT, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=900)
    log.append(f"$ memgate {' '.join(args)}")
    log += [line for line in (r.stdout + r.stderr).splitlines()]
    log.append(f"(exit {r.returncode})")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="memgate-erase-show-"))
    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    async with FakeLLM() as llm:
        llm.responder = brain.respond
        chat_log, chat_scan = await conversation(data, llm.base_url, out)
    cli_log: list[str] = []
    cli(data, out, cli_log, "memory", "list", "--user", "telegram:bob")
    cli(data, out, cli_log, "memory", "erase", "--user", "telegram:bob")
    cli(data, out, cli_log, "memory", "erase", "--user", "telegram:bob", "--yes")
    cli(data, out, cli_log, "memory", "list", "--user", "telegram:bob")
    cli(data, out, cli_log, "jobs")
    # Both people are gone; the group's memory stays, and the scan must still see it in the database.
    cli_scan = scan_report(data, "after memgate memory erase (no gateway)", ALICE + BOB, ["GROUPNOTE5150"])
    for name, text in (("forget_everything.txt", chat_log), ("scan_after_forget_everything.txt", chat_scan),
                       ("memory_erase.txt", "\n".join(cli_log) + "\n"), ("scan_after_memory_erase.txt", cli_scan)):
        (out / name).write_text(text)
        print(f"##### {name}\n{text}")
    print(f"written to {out}; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    asyncio.run(main())
