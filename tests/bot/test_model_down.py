"""README command 1 with no model server listening (issue 15): the reply names the address that
failed and that the message was kept; the log and `memgate doctor` say what to run."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from bot.model_servers import down_hint, shown_address

ROOT = str(Path(__file__).resolve().parents[2])
KEY = "sk-very-secret-key-123"


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _env(tmp_path: Path, base: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMGATE_", "TELEGRAM_"))}
    (tmp_path / "none.toml").write_text("")
    env.update({"MEMGATE_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": ROOT, "MEMGATE_CONFIG": str(tmp_path / "none.toml"),
                "MEMGATE_LLM_API_BASE": base, "MEMGATE_LLM_MODEL": "qwen2.5", "MEMGATE_LLM_RETRIES": "0",
                "MEMGATE_LLM_API_KEY": KEY})
    return env


def test_chat_with_no_model_server_names_the_address_and_keeps_the_message(tmp_path):
    base = f"http://127.0.0.1:{closed_port()}/v1"
    out = subprocess.run([sys.executable, "-m", "bot.cli", "chat", "--user", "ann"], input="my cat is called Miso\n",
                         env=_env(tmp_path, base), cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    reply = next(line for line in out.stdout.splitlines() if line.startswith("memgate: "))
    assert base in reply and "kept" in reply
    assert KEY not in out.stdout + out.stderr
    log = (tmp_path / "data" / "memgate.log").read_text()
    failed = [line for line in log.splitlines() if "LLM failed" in line]
    assert failed and base in failed[0] and "ollama serve" in failed[0] and "ollama pull qwen2.5" in failed[0]
    assert "memgate doctor" in failed[0] and KEY not in log


def test_doctor_says_what_to_run_for_a_local_server(tmp_path):
    base = f"http://127.0.0.1:{closed_port()}/v1"
    out = subprocess.run([sys.executable, "-m", "bot.cli", "doctor"], env=_env(tmp_path, base), cwd=ROOT,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 1
    assert base in out.stdout and "ollama serve" in out.stdout and "ollama pull qwen2.5" in out.stdout
    assert KEY not in out.stdout + out.stderr and "Traceback" not in out.stderr


def test_a_remote_provider_hint_names_the_key_variable_not_ollama():
    hint = down_hint("", "openai/gpt-4o-mini")
    assert "MEMGATE_LLM_API_KEY" in hint and "ollama" not in hint


@given(user=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12),
       password=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=4, max_size=30),
       token=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=4, max_size=30))
def test_the_shown_address_never_carries_credentials(user, password, token):
    url = f"https://{user}:{password}@llm.example:8443/v1?api_key={token}"
    shown = shown_address(url, "m")
    assert shown == "https://llm.example:8443/v1"
