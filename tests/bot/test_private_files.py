"""Issue 22, B1: the database is readable by every local user. With the usual umask (022) the data
folder was 0755 and the DuckDB file, its WAL and memgate.log 0644; another account copied the WAL
and read a secret from it. Now the data folder is 0700 and every file memgate writes 0600
whatever the umask, and `memgate doctor` reports looser files left by anything else.

The main test is the attack itself: a real `memgate chat` (started with umask 022) is told a
secret and killed with SIGKILL (so the WAL is still there); then a second local account, made
for the test, tries to read every file it left. Creating an account needs root: elsewhere the
test is skipped and says so.
"""

from __future__ import annotations

import asyncio
import grp
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from memory.private_files import loose_paths, open_private, private_dir, restrict_umask, write_private
from memory.tasks.skill_files import write_skill_file
from tests.bot.cli.test_cli import ROOT, env_for, read_reply

SECRET = "My locker combination is 31-17-4711, keep it safe."


def _second_account():
    """A throwaway local account (name, uid, gid), removed by the caller; skip when one cannot be made."""
    if os.geteuid() != 0:
        pytest.skip("a second local account is needed and only root can create one (useradd); run as root or in CI")
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        pytest.skip("useradd/userdel are not installed (apt-get install passwd)")
    name = "mgprobe" + secrets.token_hex(3)
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group", name],
                   check=True, capture_output=True)
    return name, pwd.getpwnam(name).pw_uid, grp.getgrnam(name).gr_gid


def _read_as(account, path: Path) -> subprocess.CompletedProcess:
    name, uid, gid = account
    # Only that account's own user and group: none of root's supplementary groups come along.
    return subprocess.run(["ls" if path.is_dir() else "cat", str(path)], user=uid, group=gid, extra_groups=[],
                          capture_output=True, timeout=30)


def _umask_022() -> None:
    os.umask(0o022)


@pytest.mark.timeout(600)
async def test_another_local_account_cannot_read_what_memgate_wrote(fake_llm):
    account = _second_account()
    # Not under pytest's own temp root (mkdtemp makes it 0700, which would hide everything anyway):
    # a world-traversable parent, as a home or /srv folder usually is.
    base = Path(tempfile.mkdtemp(prefix="memgate-b1-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        control = base / "control.txt"
        control.write_text("readable by anyone\n")
        os.chmod(control, 0o644)
        assert _read_as(account, control).returncode == 0  # the probe can read what is open to it

        env = env_for(base, fake_llm)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.cli", "chat", "--user", "alice", "--api", env=env, cwd=ROOT,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            preexec_fn=_umask_022)
        for line in (f"/remember {SECRET}", SECRET):  # a memory (for the export), then a turn (in the WAL)
            proc.stdin.write(f"{line}\n".encode())
            await proc.stdin.drain()
            await read_reply(proc, timeout=300)
        data = base / "data"
        assert (data / "api.token").exists()
        proc.send_signal(signal.SIGKILL)  # no clean shutdown: the WAL and api.token stay behind
        await proc.wait()
        # What the killed process left, WAL included, before anything opens the database again.
        files = [p for p in data.rglob("*") if p.is_file()]
        names = {p.name for p in files}
        assert {"memgate.duckdb", "memgate.duckdb.wal", "memgate.log", "api.token", "api.json"} <= names, names
        assert b"31-17-4711" in (data / "memgate.duckdb.wal").read_bytes()  # the secret, in clear, in the WAL
        for p in [data, *files]:
            got = _read_as(account, p)
            assert got.returncode != 0 and b"Permission denied" in got.stderr, (p, got)
        assert stat.S_IMODE(data.stat().st_mode) == 0o700 and loose_paths(data) == []  # folders 0700, files 0600

        export = base / "export.jsonl"
        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bot.cli", "memory", "export", str(export)],
                                       env=env, cwd=ROOT, capture_output=True, timeout=300, preexec_fn=_umask_022)
        assert done.returncode == 0, done.stderr
        assert "31-17-4711" in export.read_text()
        got = _read_as(account, export)
        assert got.returncode != 0 and b"Permission denied" in got.stderr
        assert stat.S_IMODE(export.stat().st_mode) == 0o600
    finally:
        subprocess.run(["userdel", account[0]], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def test_everything_written_is_private_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        loose = tmp_path / "loose.txt"
        loose.write_text("was open to all")
        os.chmod(loose, 0o666)
        with open_private(loose, "a") as f:  # rewriting an open file closes it
            f.write(" and now is not")
        write_private(tmp_path / "new.json", "{}")
        skill = write_skill_file(tmp_path, "u_alice", "deploy", "---\nname: deploy\n---\n")
        for p in (loose, tmp_path / "new.json", skill):
            assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
        restrict_umask()
        (tmp_path / "by-a-library").write_text("x")   # a file some library creates on its own
        (tmp_path / "made-dir").mkdir()
        assert stat.S_IMODE((tmp_path / "by-a-library").stat().st_mode) == 0o600
        assert stat.S_IMODE((tmp_path / "made-dir").stat().st_mode) == 0o700
    finally:
        os.umask(old)


def test_the_log_file_is_private_and_stays_so_across_rotation(tmp_path):
    import logging

    from bot.logs import setup_logging
    from bot.settings import Settings

    old = os.umask(0o022)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        settings = Settings(data_dir=str(tmp_path / "data"), log_max_mb=0.001, log_backups=2)
        setup_logging(settings, to_file=True, to_stderr=False)
        for i in range(200):
            logging.getLogger("probe").info("line %d of a log that rotates", i)
        logs = sorted((tmp_path / "data").glob("memgate.log*"))
        assert len(logs) == 3
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in logs)
        assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
    finally:
        for h in root.handlers:
            h.close()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        os.umask(old)


@pytest.mark.timeout(300)
async def test_doctor_reports_files_other_accounts_can_read(tmp_path):
    env = env_for(tmp_path)
    data = tmp_path / "data"
    first = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bot.cli", "doctor"], env=env, cwd=ROOT,
                                    capture_output=True, text=True, timeout=240)
    assert "[ok] the data folder" in first.stdout, first.stdout
    os.chmod(data, 0o755)
    os.chmod(data / "memgate.duckdb", 0o644)
    (data / "notes.txt").write_text("left by another tool")
    os.chmod(data / "notes.txt", 0o604)
    out = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bot.cli", "doctor"], env=env, cwd=ROOT,
                                  capture_output=True, text=True, timeout=240)
    line = next(l for l in out.stdout.splitlines() if "open to other accounts on this machine" in l)
    assert line.startswith("[FAIL]") and "memgate.duckdb (644)" in line and "notes.txt (604)" in line
    assert f"chmod -R go-rwx {data}" in out.stdout and out.returncode == 1 and "Traceback" not in out.stderr


def test_a_data_folder_shared_by_design_is_left_as_it_is(tmp_path):
    # Found: data_dir = "/tmp" (as a test of migrate did) made /tmp 0700, and the PostgreSQL
    # server running as another account shut down when it lost its own files under it.
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    private_dir(shared)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    own = tmp_path / "own"
    own.mkdir(mode=0o755)
    os.chmod(own, 0o755)
    private_dir(own)
    assert stat.S_IMODE(own.stat().st_mode) == 0o700
    private_dir(tmp_path / "new" / "data")
    assert stat.S_IMODE((tmp_path / "new" / "data").stat().st_mode) == 0o700
