"""`memgate keys create|list|revoke` as a real subprocess: the key is printed once, listed by
prefix only, and refused by the API once revoked."""

from __future__ import annotations

import subprocess
import sys

from tests.bot.cli.test_cli import ROOT, env_for


def memgate(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_keys_create_list_revoke(tmp_path):
    env = env_for(tmp_path)
    made = memgate(env, "keys", "create", "--space", "u_alice", "--scope", "write", "--expires", "30d", "--name", "laptop")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("mg_") and len(key) > 30 and "shown once" in made.stderr
    listed = memgate(env, "keys", "list")
    assert key not in listed.stdout and key[:10] in listed.stdout and "u_alice" in listed.stdout
    assert "live" in listed.stdout and "laptop" in listed.stdout
    revoked = memgate(env, "keys", "revoke", key[:10] + "…")
    assert revoked.returncode == 0 and "revoked" in revoked.stdout
    assert "revoked" in memgate(env, "keys", "list").stdout
    assert memgate(env, "keys", "create", "--admin").stdout.startswith("mg_")


def test_keys_bad_input_is_one_line(tmp_path):
    env = env_for(tmp_path)
    for args in (("keys", "create", "--space", "s", "--expires", "soon"), ("keys", "revoke", "mg_nothing"),
                 ("keys", "create", "--user", "nobody")):
        out = memgate(env, *args)
        assert out.returncode != 0 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    both = memgate(env, "keys", "create", "--space", "s", "--admin")
    assert both.returncode == 2 and "not allowed with" in both.stderr
    helptext = memgate(env, "keys", "create", "--help").stdout
    for opt in ("--user", "--space", "--admin", "--scope", "--expires", "--name"):
        assert opt in helptext
