"""`memgate service install [--user] | uninstall | status`: memgate as a systemd service.

The unit is rendered from a template (pure), written to the user's (~/.config/systemd/user) or
the system's (/etc/systemd/system) unit folder, or to `--unit-dir` / $MEMGATE_SYSTEMD_DIR (tests,
packagers: then systemctl is not called, only named). The service runs `memgate --config FILE
run` with stdin on /dev/null (so the terminal channel stays out), restarts on failure, and is
stopped with SIGTERM, on which memgate answers what is queued; memory work not done yet waits in its
durable queue for the next start (no memory call starts after the signal). It
runs sandboxed (HARDENING): the data folder is the only path it may write. A systemctl step
that fails is an error with systemctl's own words (the unit stays written).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bot.errors import ConfigError, MemgateError

UNIT_NAME = "memgate.service"

UNIT_TEMPLATE = """\
# memgate as a systemd {scope} service, written by `memgate service install`.
# Change it with `memgate service install` again (or edit, then `systemctl {flag}daemon-reload`).
[Unit]
Description=memgate chat-bot gateway (long-term memory per person)
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
ExecStart={exec_start}
WorkingDirectory={workdir}
{user_line}# No terminal: the console channel stays out; logs go to the journal and to memgate.log.
StandardInput=null
Environment=PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True
Restart=on-failure
RestartSec=5
# On SIGTERM memgate answers what is queued; memory work left waits in its queue for the next start.
KillSignal=SIGTERM
TimeoutStopSec=90
{hardening}
[Install]
WantedBy={wanted_by}
"""

# The sandbox (`systemd-analyze security --offline=yes` rates it; tests/test_deploy.py holds it
# to <= 4.0). memgate needs: its data folder (database, logs, caches, api.json) as the only
# writable path, the network (IPv4/IPv6 to the model and the platforms, Unix sockets for a local
# PostgreSQL), and nothing privileged. A user service gets the same: systemd runs it in a user
# namespace where the kernel allows unprivileged ones (Debian, Ubuntu, Fedora do).
HARDENING = """\
# Sandbox: the data folder is the only writable path; no privileges, devices or kernel knobs.
NoNewPrivileges=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectSystem=strict
ProtectHome=read-only
ReadWritePaths={writable}
UMask=0077
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
RemoveIPC=yes
CapabilityBoundingSet=
AmbientCapabilities=
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged
SystemCallErrorNumber=EPERM
"""


class SystemctlFailed(MemgateError):
    """systemctl refused a step of the install (no user bus, not allowed, a bad unit)."""


@dataclass(frozen=True, slots=True)
class UnitPlace:
    """Where the unit goes and whether systemctl manages that folder."""

    directory: Path
    user: bool
    managed: bool          # False: a folder we were pointed at; print the systemctl steps, run none

    @property
    def path(self) -> Path:
        return self.directory / UNIT_NAME

    @property
    def systemctl(self) -> list[str]:
        return ["systemctl", "--user"] if self.user else ["systemctl"]


def unit_place(user: bool, unit_dir: str | None = None, env: dict[str, str] | None = None) -> UnitPlace:
    env = os.environ if env is None else env
    chosen = unit_dir or env.get("MEMGATE_SYSTEMD_DIR")
    if chosen:
        return UnitPlace(Path(chosen).expanduser(), user, managed=False)
    if user:
        base = Path(env.get("XDG_CONFIG_HOME") or Path(env.get("HOME", "~")).expanduser() / ".config")
        return UnitPlace(base / "systemd" / "user", True, managed=True)
    return UnitPlace(Path("/etc/systemd/system"), False, managed=True)


def memgate_command() -> list[str]:
    """How to start this same memgate: its console script, or this Python with -m bot.cli."""
    script = Path(sys.executable).parent / "memgate"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    found = shutil.which("memgate")
    return [found] if found else [sys.executable, "-m", "bot.cli"]


def render_unit(command: list[str], config: Path, *, user: bool, run_as: str | None, workdir: Path,
                writable: tuple[Path, ...] = ()) -> str:
    """The unit file text (pure). `workdir` (the data folder) and `writable` are the paths the
    service may write; every other one is read-only to it."""
    exec_start = " ".join(shlex.quote(part) for part in [*command, "--config", str(config), "run"])
    paths = " ".join(_unit_path(p) for p in dict.fromkeys([workdir, *writable]))
    return UNIT_TEMPLATE.format(scope="user" if user else "system", flag="--user " if user else "",
                                exec_start=exec_start, workdir=workdir, hardening=HARDENING.format(writable=paths),
                                user_line="" if user or not run_as else f"User={run_as}\n",
                                wanted_by="default.target" if user else "multi-user.target")


def store_folder(store_url: str) -> tuple[Path, ...]:
    """The folder of a DuckDB file kept outside the data folder (it must stay writable), else ()."""
    from memory.store.url import parse_store_url

    where = parse_store_url(store_url)
    if where.backend != "duckdb" or str(where.path) == ":memory:":
        return ()
    return (Path(where.path).expanduser().absolute().parent,)


def _unit_path(path: Path) -> str:
    """A path as a unit file's path lists take it: spaces and quotes quoted, % escaped."""
    text = str(path).replace("%", "%%")
    return f'"{text}"' if any(c in text for c in ' "\'\\') else text


def config_for_service(named: str | None, env: dict[str, str] | None = None) -> Path:
    """The config file the service will read: it must exist (a service has no terminal to ask)."""
    from bot.config import DEFAULT_CONFIG_PATHS

    env = os.environ if env is None else env
    for cand in ([named] if named else [env.get("MEMGATE_CONFIG")] if env.get("MEMGATE_CONFIG") else list(DEFAULT_CONFIG_PATHS)):
        p = Path(os.path.expanduser(cand)).resolve()
        if p.is_file():
            return p
    raise ConfigError("the service needs a config file: run `memgate onboard` first, or pass --config FILE")


def _run(cmd: list[str]) -> tuple[int, str]:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 1, str(exc)
    return done.returncode, (done.stdout + done.stderr).strip()


def install(place: UnitPlace, text: str, *, start: bool) -> list[str]:
    """Write the unit; in a managed folder reload systemd and enable (and start) it. Returns what
    to tell the person, one line each."""
    place.directory.mkdir(parents=True, exist_ok=True)
    tmp = place.path.with_name(UNIT_NAME + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, place.path)
    lines = [f"wrote {place.path}"]
    steps = [[*place.systemctl, "daemon-reload"], [*place.systemctl, "enable", *(["--now"] if start else []), UNIT_NAME]]
    if not place.managed or shutil.which("systemctl") is None:
        lines.append("to start it: " + " && ".join(shlex.join(s) for s in steps))
        return lines
    for step in steps:
        code, out = _run(step)
        if code != 0:
            # The unit is written but not running: a non-zero exit with systemctl's own words
            # (for --user without a login session: "Failed to connect to bus").
            why = " ".join(out.split()) or f"exit status {code}"
            raise SystemctlFailed(f"wrote {place.path}, but `{shlex.join(step)}` failed: {why}"
                                  + (_NO_BUS_HINT if place.user and "bus" in why.lower() else ""))
        lines.append(f"{shlex.join(step)}: ok")
    if place.user:
        lines.append("to keep it running after you log out: loginctl enable-linger $USER")
    return lines


_NO_BUS_HINT = (" (a user service needs your login session's bus: run it from a login shell, not su/sudo, or "
                "`loginctl enable-linger $USER` and log in again; or install a system service with sudo)")


def uninstall(place: UnitPlace) -> list[str]:
    lines = []
    if place.managed and shutil.which("systemctl") is not None:
        code, out = _run([*place.systemctl, "disable", "--now", UNIT_NAME])
        lines.append(f"{shlex.join([*place.systemctl, 'disable', '--now', UNIT_NAME])}: {'ok' if code == 0 else 'failed'}")
    if place.path.exists():
        place.path.unlink()
        lines.append(f"removed {place.path}")
        if place.managed and shutil.which("systemctl") is not None:
            _run([*place.systemctl, "daemon-reload"])
    else:
        lines.append(f"no unit at {place.path}: nothing to remove")
    return lines


def status(place: UnitPlace) -> list[str]:
    if not place.path.exists():
        return [f"not installed (no {place.path}); install with: memgate service install{' --user' if place.user else ''}"]
    lines = [f"installed: {place.path}"]
    exec_line = next((line for line in place.path.read_text().splitlines() if line.startswith("ExecStart=")), "")
    lines.append(f"runs: {exec_line.removeprefix('ExecStart=')}")
    if place.managed and shutil.which("systemctl") is not None:
        code, out = _run([*place.systemctl, "is-active", UNIT_NAME])
        lines.append(f"state: {out or 'unknown'}")
    else:
        lines.append("state: not asked (a unit folder outside systemd's, or no systemctl here)")
    return lines
