"""`memgate run` with no terminal (issue 15): lines piped in are read by the terminal channel (it
is enabled by default) and answered; with nothing to read and the API off, one line says what to
do instead of "no channel is enabled"; with the API on (the default) the gateway runs headless
(issue 24) and stays up; the log file is rotated by size."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import urllib.request
from contextlib import asynccontextmanager
from pathlib import Path

from bot.logs import log_file, setup_logging
from bot.config import load_settings
from tests.fakes import brain

ROOT = str(Path(__file__).resolve().parents[3])


def _env(tmp_path: Path, llm_base: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMGATE_", "TELEGRAM_"))}
    (tmp_path / "none.toml").write_text("")
    env.update({"MEMGATE_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": ROOT, "MEMGATE_CONFIG": str(tmp_path / "none.toml"),
                "MEMGATE_API_ENABLED": "false"})
    if llm_base:
        env.update({"MEMGATE_LLM_API_BASE": llm_base, "MEMGATE_LLM_MODEL": "fake-model", "MEMGATE_LLM_RETRIES": "0"})
    return env


async def test_run_reads_piped_lines_with_the_default_console(tmp_path, fake_llm):
    import asyncio

    fake_llm.responder = brain.respond
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot.cli", "run", env=_env(tmp_path, fake_llm.base_url),
                                                cwd=ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(b"hello from a pipe\n"), 180)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert "memgate: You said: hello from a pipe" in out.decode()
    assert "no channel is enabled" not in err.decode()


def test_run_with_nothing_to_read_says_what_to_do(tmp_path):
    out = subprocess.run([sys.executable, "-m", "bot.cli", "run"], env=_env(tmp_path), cwd=ROOT, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "no channel is enabled" not in out.stderr and "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.startswith("memgate:")]
    assert len(lines) == 1 and "memgate chat" in lines[0] and "memgate onboard" in lines[0]


# The issue asks for /healthz after 30 s. The test waits for the event that ends start-up (the
# "ready" log line: libraries and the embedding model loaded) and checks again after it; set
# MEMGATE_TEST_HEADLESS_HOLD=30 to also hold that long (the closing note's run did).
HOLD_S = float(os.environ.get("MEMGATE_TEST_HEADLESS_HOLD", "0"))


def healthz(url: str) -> int:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=10) as resp:
            return resp.status
    except OSError:
        return 0


@asynccontextmanager
async def headless(argv: list[str], env: dict[str, str], cwd: str, data: Path):
    """A gateway started as a service starts it (stdin /dev/null, no terminal): yields (url, log lines,
    stdout lines) once /healthz answered 200 and start-up is over; SIGTERM on leaving, exit 0."""
    proc = await asyncio.create_subprocess_exec(*argv, env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    err: list[str] = []
    out: list[str] = []

    async def pump(stream, into: list[str]) -> None:
        async for line in stream:
            into.append(line.decode(errors="replace").rstrip("\n"))

    pumps = [asyncio.create_task(pump(proc.stderr, err)), asyncio.create_task(pump(proc.stdout, out))]

    async def until(what: str, check) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 180
        while not await check():
            assert proc.returncode is None, f"memgate run exited ({proc.returncode}) before {what}:\n" + "\n".join(err[-30:])
            assert loop.time() < deadline, f"never {what}:\n" + "\n".join(err[-30:])
            await asyncio.sleep(0.05)

    try:
        async def published() -> bool:
            try:
                return json.loads((data / "api.json").read_text())["pid"] == proc.pid
            except (OSError, ValueError, KeyError):
                return False

        await until("published its address", published)
        url = json.loads((data / "api.json").read_text())["url"]
        await until("answered /healthz 200", lambda: asyncio.to_thread(lambda: healthz(url) == 200))

        async def ready() -> bool:
            return any("ready: " in line for line in err)

        await until("finished starting", ready)
        await asyncio.sleep(HOLD_S)
        assert proc.returncode is None and await asyncio.to_thread(healthz, url) == 200, "\n".join(err[-30:])
        yield url, err, out
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 120)
        await asyncio.gather(*pumps, return_exceptions=True)
    assert code == 0, "\n".join(err[-30:])


async def test_run_with_only_the_api_and_no_terminal_serves_and_stays_up(tmp_path):
    """Issue 24: no chat channel at all, stdin /dev/null: the API (with the dashboard) is the gateway."""
    env = _env(tmp_path)
    (tmp_path / "api.toml").write_text("[channels.console]\nenabled = false\n[api]\nenabled = true\nport = 0\n")
    env.update({"MEMGATE_CONFIG": str(tmp_path / "api.toml"), "MEMGATE_API_ENABLED": "true"})
    async with headless([sys.executable, "-m", "bot.cli", "run"], env, ROOT, tmp_path / "data") as (url, err, out):
        with urllib.request.urlopen(url + "/", timeout=10) as resp:  # the dashboard page itself
            assert resp.status == 200 and b"<html" in resp.read().lower()
        doctor = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bot.cli", "doctor"], env=env, cwd=ROOT,
                                         capture_output=True, text=True, timeout=300)
        assert f"[ok] dashboard at {url}/ (served by the running gateway)" in doctor.stdout.splitlines(), doctor.stdout
        assert f"[ok] MCP for other agents: `memgate mcp` (stdio), or {url}/mcp (streamable HTTP, an API key as " \
            "Bearer); docs/mcp.md" in doctor.stdout.splitlines(), doctor.stdout
    assert f"memgate: dashboard at {url}/ (log in with a key from `memgate keys create --user NAME`)" in out
    assert not any("Traceback" in line for line in err)


def test_the_log_file_is_rotated_at_its_size(tmp_path):
    settings = load_settings(None, env={"MEMGATE_CONFIG": str(tmp_path / "c.toml"), "MEMGATE_DATA_DIR": str(tmp_path / "d"),
                                        "MEMGATE_LOG_MAX_MB": "0.001", "MEMGATE_LOG_BACKUPS": "2"}) \
        if (tmp_path / "c.toml").write_text("") is not None else None
    setup_logging(settings, to_file=True, to_stderr=False)
    try:
        for n in range(200):
            logging.getLogger("memgate.test").info("line %d with some words to fill the file", n)
    finally:
        for h in logging.getLogger().handlers:
            h.close()
        logging.getLogger().handlers.clear()
    path = log_file(settings)
    files = sorted(p.name for p in path.parent.glob("memgate.log*"))
    assert files == ["memgate.log", "memgate.log.1", "memgate.log.2"]
    assert all(p.stat().st_size <= 1100 for p in path.parent.glob("memgate.log*"))
    assert "line 199" in path.read_text()
