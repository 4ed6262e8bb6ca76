"""How long a person waits, and what they are told, when the model is misconfigured or down.

Runs the real `memgate chat` (one line piped in) and `memgate doctor` from a checkout against:
a model name litellm cannot route (no address), a refused address (a closed loopback port), a
server that accepts and never answers, and one whose first byte comes late (the fake OpenAI
server with a Delay). Prints, per case, the seconds until the answer line (or the refusal) and
the whole run, the text shown, and the load average beside them (the machine is shared).

    python bench/model_faults.py [--checkout PATH] [--slow SECONDS] [--cases chat-refused,doctor-hang,...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakes.llm_server import Delay, FakeLLM  # noqa: E402
from tests.fakes.ports import free_port  # noqa: E402


def silent_server() -> tuple[int, socket.socket]:
    """A listener that accepts and never answers (a hung model server)."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(srv.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return srv.getsockname()[1], srv


def run(checkout: Path, command: list[str], env: dict[str, str], stdin: str | None,
        limit: float) -> tuple[float, float, float, str]:
    """(seconds to the first output line, the gap before the last line, the whole run, the output).

    `chat` gets two messages: the first turn also waits for the start-up (litellm's import, the
    embedding model); the second starts right after the first is answered, so the gap before the
    last line is one turn alone."""
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "bot.cli", *command], cwd=checkout, env=env, text=True,
                            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if stdin is not None:
        proc.stdin.write(stdin)
        proc.stdin.close()
    stamps: list[float] = []
    lines: list[str] = []
    timer = threading.Timer(limit, proc.kill)
    timer.start()
    for line in proc.stdout:
        if line.strip():
            stamps.append(time.monotonic() - t0)
            lines.append(line.rstrip())
    proc.wait()
    timer.cancel()
    total = time.monotonic() - t0
    first = stamps[0] if stamps else total
    gap = stamps[-1] - stamps[-2] if len(stamps) >= 2 else float("nan")
    return first, gap, total, "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--checkout", default=str(ROOT))
    p.add_argument("--slow", type=float, default=8.0, help="seconds the slow server waits before its first byte")
    p.add_argument("--limit", type=float, default=400.0, help="kill a run after this many seconds")
    p.add_argument("--cases", default="")
    args = p.parse_args()
    checkout = Path(args.checkout)

    async def serve() -> None:
        async with FakeLLM(responder=lambda body: Delay(args.slow, "Hello from the slow model.")) as slow, \
                FakeLLM(responder=lambda body: "Hello from the quick model.") as quick:
            state["slow"], state["ok"] = slow.base_url, quick.base_url
            ready.set()
            await asyncio.Event().wait()

    state: dict[str, str] = {}
    ready = threading.Event()
    threading.Thread(target=lambda: asyncio.run(serve()), daemon=True).start()
    ready.wait()
    hang_port, _srv = silent_server()
    cases = {
        "ok": {"MEMGATE_LLM_MODEL": "qwen2.5", "MEMGATE_LLM_API_BASE": state["ok"]},
        "unroutable": {"MEMGATE_LLM_MODEL": "qwen2.5"},
        "refused": {"MEMGATE_LLM_MODEL": "qwen2.5", "MEMGATE_LLM_API_BASE": f"http://127.0.0.1:{free_port()}/v1"},
        "hang": {"MEMGATE_LLM_MODEL": "qwen2.5", "MEMGATE_LLM_API_BASE": f"http://127.0.0.1:{hang_port}/v1"},
        "slow": {"MEMGATE_LLM_MODEL": "qwen2.5", "MEMGATE_LLM_API_BASE": state["slow"]},
    }
    wanted = [c for c in args.cases.split(",") if c]
    with tempfile.TemporaryDirectory(prefix="memgate-bench-faults-") as tmp:
        config = Path(tmp) / "memgate.toml"
        config.write_text("")
        for command in ("chat", "doctor"):
            for name, extra in cases.items():
                key = f"{command}-{name}"
                if wanted and key not in wanted:
                    continue
                data = Path(tmp) / key
                env = {k: v for k, v in os.environ.items() if not k.startswith("MEMGATE_")}
                env.update(MEMGATE_CONFIG=str(config), MEMGATE_DATA_DIR=str(data), LITELLM_LOCAL_MODEL_COST_MAP="True",
                           HF_HUB_OFFLINE="1", **extra)
                load = Path("/proc/loadavg").read_text().split()[0]
                first, gap, total, out = run(checkout, [command] if command == "doctor" else ["chat", "--user", "bench"],
                                             env, "hello there\nare you there?\n" if command == "chat" else None, args.limit)
                shown = [ln for ln in out.splitlines() if ln.strip()]
                if command == "doctor":
                    shown = [ln for ln in shown if "LLM" in ln or "fix:" in ln or "problem" in ln or "model" in ln.lower()]
                turn = f"the turn {gap:6.1f}s  " if command == "chat" else ""
                print(f"{key:18} first line {first:6.1f}s  {turn}whole run {total:6.1f}s  (load {load})")
                for ln in shown[-4:]:
                    print(f"    | {ln[:220]}")
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
