"""The `memgate` command line: the parser, built from one module per command group, and the
dispatch that turns every known failure into one line and an exit code, never a traceback.

    memgate chat [--user NAME]        talk to the bot in this terminal (attached to a running gateway, if any)
    memgate run                       start every enabled channel, the ingest worker and the scheduler
    memgate memory search|list|export|import
    memgate reembed                   re-embed every memory with the configured embedding model
    memgate doctor                    check extensions, model, database and LLM; say what to fix
    memgate migrate --from URL --to URL   copy the database to another, resumable
    memgate pairing list|approve CODE|deny CODE
    memgate public list|add TEXT|edit ID TEXT|forget ID   the shared notes every user's recall reads
    memgate jobs                      background jobs: last run, duration, error
    memgate keys create|list|revoke   HTTP API keys
    memgate mcp [--user NAME]         the memory for MCP clients over stdio (Claude Code, Cursor, OpenClaw)
    memgate onboard                   guided first run: model, channels, owner; writes the config
    memgate service install|uninstall|status   memgate as a systemd service
    memgate wechat login              log the WeChat (iLink) bot in with a QR code

Each command group's module adds its subcommand (`add_*`) and runs it (`cmd_*(settings, args)`);
a command that needs no config (onboard writes it) says so with `reads_config=False`, and one
whose arguments argparse cannot check alone gives a `check(args)` that runs before the config
is read. Exit codes: 0 ok, 1 a refusal or failure, 2 bad arguments or config, 3 the database is
locked, 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys

from bot.cli import doctor, jobs, keys, mcp, memory, migrate, onboard, pairing, run, service, wechat
from bot.config import load_settings
from bot.errors import ConfigError, MemgateError, StoreLockedError
from memory.private_files import restrict_umask

# In the order `memgate --help` lists them.
COMMANDS = (run.add_chat, run.add_run, memory.add_memory, migrate.add_reembed, doctor.add_doctor, migrate.add_migrate,
            pairing.add_pairing, pairing.add_public, jobs.add_jobs, keys.add_keys, mcp.add_mcp, onboard.add_onboard,
            service.add_service, wechat.add_wechat)


def parser() -> argparse.ArgumentParser:
    """The whole `memgate` parser: the global --config, then every command group's subcommands."""
    p = argparse.ArgumentParser(prog="memgate", description="A chat-bot gateway whose agent never forgets.")
    p.add_argument("--config", help="TOML config file (default: $MEMGATE_CONFIG, ./memgate.toml, ~/.config/memgate/memgate.toml)")
    sub = p.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Parse, check, load the config, run the command; its exit code (failures as one line on stderr)."""
    restrict_umask()  # every file memgate writes is its owner's alone, whatever umask it was started with
    args = parser().parse_args(argv)
    check = getattr(args, "check", None)
    problem = check(args) if check is not None else None
    if problem:
        print(problem, file=sys.stderr)
        return 2
    try:
        if not getattr(args, "reads_config", True):
            return args.func(args)
        settings = load_settings(args.config)
        return args.func(settings, args)
    except StoreLockedError as exc:
        print(f"memgate: {exc}", file=sys.stderr)
        return 3
    except ConfigError as exc:
        print(f"memgate: {exc}", file=sys.stderr)
        return 2
    except MemgateError as exc:
        print(f"memgate: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return _reader_gone()
    except OSError as exc:
        # A folder or file we must use is not usable (read-only data_dir, a file where a folder
        # should be): one line naming it, never a traceback.
        where = exc.filename or getattr(args, "config", None) or "a file"
        print(f"memgate: cannot use {where}: {exc.strerror or exc} (check data_dir / the config paths)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _reader_gone() -> int:
    """The reader of our output left (`memgate memory export | head -1`): that is not an error.

    Python would report the failed flush of stdout again at exit; pointing stdout at /dev/null
    first keeps the exit quiet, as `cat` or `grep` are in the same pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
    return 0
