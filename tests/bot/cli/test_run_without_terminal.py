"""`memgate run` with no terminal (issue 15): lines piped in are read by the terminal channel (it
is enabled by default) and answered; with nothing to read, one line says what to do instead of
"no channel is enabled"; the log file is rotated by size."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
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
