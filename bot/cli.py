"""The `memgate` command line.

    memgate chat [--user NAME]        talk to the bot in this terminal
    memgate run                       start every enabled channel, the ingest worker and the scheduler
    memgate memory search|list|export|import
    memgate reembed                   re-embed every memory with the configured embedding model
    memgate doctor                    check extensions, model, database and LLM; say what to fix
    memgate pairing list|approve CODE|deny CODE
    memgate public list|add TEXT|edit ID TEXT|forget ID   the shared notes every user's recall reads
    memgate jobs                      background jobs: last run, duration, error
    memgate wechat login              log the WeChat (iLink) bot in with a QR code
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import os
import signal
import sys
from datetime import UTC, datetime
from contextlib import contextmanager
from pathlib import Path

from bot.config import Settings, load_settings
from bot.errors import ConfigError, MemgateError, StoreLockedError
from bot.logs import log_file, log_loop_exceptions, setup_logging, terminal_session
from memory.private_files import loose_paths, open_private, restrict_umask

log = logging.getLogger("memgate")

NO_LLM_TEXT = """No language model is configured, so memgate cannot answer yet. Set one of:
  MEMGATE_LLM_MODEL=<any litellm model, e.g. openai/gpt-4o-mini> plus its key in MEMGATE_LLM_API_KEY, or
  MEMGATE_LLM_API_BASE=http://127.0.0.1:11434/v1 (Ollama, llama.cpp's server or any OpenAI-compatible server) and MEMGATE_LLM_MODEL=<its model name>."""


# --- chat and run -------------------------------------------------------------------------
async def _serve(settings: Settings, channels, *, until_console_closes: bool, serve_api: bool = False) -> int:
    from bot.app import build_app

    app = build_app(settings, channels=channels, serve_api=serve_api)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    log_loop_exceptions(loop)
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    async with app:
        console = next((c for c in channels if c.name == "console"), None)
        waiters = [asyncio.create_task(stop.wait())]
        if until_console_closes and console is not None:
            waiters.append(asyncio.create_task(console.closed.wait()))
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for w in waiters:
            w.cancel()
        # Answer what is already queued before the channels go away.
        await app.gateway.idle()
    return 0


def _console(settings: Settings, user: str | None):
    from adapters.console import ConsoleAdapter

    name = user or settings.channels.console.user or os.environ.get("USER") or getpass.getuser() or "me"
    return ConsoleAdapter(name, bot_name=settings.agent.name, history_path=settings.data_path / "console_history")


def stdin_kind() -> str:
    """"tty", "lines" (a pipe or a file: read line by line) or "none" (/dev/null, closed: a service)."""
    import stat

    try:
        if sys.stdin is None:
            return "none"
        if sys.stdin.isatty():
            return "tty"
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError):
        return "none"
    return "lines" if stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode) else "none"


def cmd_chat(settings: Settings, args) -> int:
    if not settings.llm_configured:
        print(NO_LLM_TEXT, file=sys.stderr)
        return 2
    setup_logging(settings, to_file=True, to_stderr=logging.ERROR)
    console = _console(settings, args.user)
    if console.interactive:
        print(f"memgate: talking as {console.user}. /help for commands; /quit, Ctrl-D or Ctrl-C to leave.\n"
              f"(arrow keys edit the line, Up recalls earlier ones; logs go to {log_file(settings)})\n")
    with terminal_session(settings, console):
        code = asyncio.run(_serve(settings, [console], until_console_closes=True,
                                  serve_api=bool(args.api) and settings.api.enabled))
    return code


def build_channels(settings: Settings) -> list:
    """Every channel enabled in the config (secrets from the environment)."""
    chans = []
    c = settings.channels
    if c.telegram.enabled:
        from adapters.telegram.adapter import TelegramAdapter

        token = settings.secret("telegram_token")
        if not token:
            raise ConfigError("channels.telegram is enabled but TELEGRAM_BOT_TOKEN is not set")
        chans.append(TelegramAdapter(token, base_url=c.telegram.base_url or None, poll_timeout=c.telegram.poll_timeout))
    if c.wechat.enabled:
        from adapters.wechat.ilink.adapter import WechatIlinkAdapter

        chans.append(WechatIlinkAdapter(settings.data_path, base_url=c.wechat.base_url or None))
    if c.wechat_mp.enabled:
        from adapters.wechat.mp.adapter import WechatMpAdapter

        mp = c.wechat_mp
        if not settings.secret("wechat_mp_token") or not mp.app_id:
            raise ConfigError("channels.wechat_mp needs app_id in the file and WECHAT_MP_TOKEN / WECHAT_MP_APP_SECRET in the environment")
        chans.append(WechatMpAdapter(token=settings.secret("wechat_mp_token"), app_id=mp.app_id,
                                     app_secret=settings.secret("wechat_mp_secret") or "",
                                     encoding_aes_key=settings.secret("wechat_mp_aes_key"), host=mp.host, port=mp.port,
                                     path=mp.path, api_base=mp.api_base, replay_window=mp.replay_window))
    # The terminal channel reads a terminal, or lines piped in; with nothing to read (a service's
    # /dev/null) it is left out, so the other channels run on their own.
    if c.console.enabled and stdin_kind() != "none":
        chans.append(_console(settings, None))
    return chans


def cmd_run(settings: Settings, args) -> int:
    setup_logging(settings, to_file=True)
    channels = build_channels(settings)
    if not channels:
        if settings.channels.console.enabled:
            raise ConfigError("the only enabled channel is the terminal (channels.console), and there is no terminal or "
                              "input to read here: run `memgate chat` in a terminal, pipe lines in, or enable Telegram "
                              "or WeChat (`memgate onboard` walks through it)")
        raise ConfigError("no channel is enabled: enable one under [channels.*] in the config (or run `memgate onboard`)")
    console = next((c for c in channels if c.name == "console"), None)
    if console is not None and console.interactive:
        print(f"memgate: running {', '.join(c.name for c in channels)}; talking here as {console.user}. "
              f"/quit, Ctrl-D or Ctrl-C stops every channel.\n(logs go to {log_file(settings)})\n")
    with terminal_session(settings, console):
        if not settings.llm_configured:
            log.warning("no LLM configured: the bot answers commands only. %s", NO_LLM_TEXT.splitlines()[0])
        log.info("starting channels: %s", ", ".join(c.name for c in channels))
        # The person at the terminal leaving ends the run: a bot that went on silently after
        # Ctrl-D looked stopped and was not (run it as a service to keep it up: `memgate service`).
        return asyncio.run(_serve(settings, channels, until_console_closes=console is not None,
                                  serve_api=settings.api.enabled))


# --- memory -------------------------------------------------------------------------------
def _engine(settings: Settings):
    from bot.app import build_app

    return build_app(settings)


@contextmanager
def _operator(settings: Settings):
    """Through the running gateway's admin API when one answers, else on the database directly.

    Only the second imports the database, the embedding model and litellm: talking to a running
    gateway stays light (bot.operator imports none of them)."""
    from bot.gateway_client import find_gateway
    from bot.operator import RemoteOperator

    client = find_gateway(settings.data_path)
    if client is not None:
        yield RemoteOperator(client)
        return
    from bot.api.keys import Keys
    from bot.app import make_embedder
    from bot.operator_local import LocalOperator

    app = _engine(settings)
    try:
        yield LocalOperator(app.engine, app.access, app.pairing, Keys(app.store, clock=app.clock), app.clock,
                            embedder=lambda: make_embedder(settings))
    finally:
        app.store.close()


def format_memory_line(m) -> str:
    """One line of `memory search` (with its score) or `memory list`."""
    if m.score is not None:
        return f"{m.score:.2f}  [{m.id}] ({m.kind}, {m.space_id}, {m.created_at:%Y-%m-%d}) {m.text[:200]}"
    return f"[{m.id}] ({m.kind}, {m.space_id}, {m.created_at:%Y-%m-%d}){' pinned' if m.pinned else ''} {m.text[:200]}"


def cmd_memory(settings: Settings, args) -> int:
    """search, list, export, import: through the running gateway when there is one, the same lines either way."""
    if args.action == "import":
        try:
            lines = Path(args.file).read_bytes().split(b"\n")
        except OSError as exc:
            print(f"memgate: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    with _operator(settings) as op:
        if args.action == "search":
            found = op.search(" ".join(args.query), args.space, args.limit, user=args.user)
            for m in found:
                print(format_memory_line(m))
            if not found:
                print("nothing found")
        elif args.action == "list":
            listed = op.list(args.space, args.kind, args.limit, user=args.user)
            for m in listed:
                print(format_memory_line(m))
            if not listed:
                print("no memories")
        elif args.action == "export":
            _export(op, args)
        else:
            return _import(op, args, lines)
    return 0


def _export(op, args) -> None:
    lines = op.export(args.space, args.user)  # an unknown --user is refused before the file is made
    out = open_private(args.file) if args.file != "-" else sys.stdout  # someone's memories: 0600
    try:
        with _Bar() as bar:
            for line in lines:
                out.write(line)
                if out is not sys.stdout:
                    bar.update(1)
    finally:
        if out is not sys.stdout:
            out.close()


class _Bar:
    """A progress bar on stderr that appears with the first progress (a refusal prints alone)."""

    def __init__(self, total: int | None = None, *, desc: str | None = None, unit: str = "mem",
                 tty_only: bool = False) -> None:
        self.total, self._bar = total, None
        self._desc, self._unit, self._tty_only = desc, unit, tty_only

    def update(self, n: int) -> None:
        if self._bar is None:
            from tqdm import tqdm

            # tty_only: no bar at all when stderr is not a terminal (tqdm's disable=None).
            self._bar = tqdm(total=self.total, desc=self._desc, unit=self._unit, file=sys.stderr,
                             disable=None if self._tty_only else False)
        self._bar.update(n)

    def write(self, text: str) -> None:
        from tqdm import tqdm

        tqdm.write(text, file=sys.stderr)

    def __enter__(self) -> _Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()


def _import(op, args, lines: list[bytes]) -> int:
    """`memgate memory import FILE [--user NAME | --space ID]`: idempotent, bad lines reported by number."""
    with _Bar(sum(1 for line in lines if line.strip())) as bar:
        summary = op.import_lines(lines, args.space, args.user, source=args.file, progress=bar.update,
                                  on_bad=lambda n, reason: bar.write(f"{args.file}: line {n}: {reason} (skipped)"))
    print(f"imported {summary.added} memories ({summary.present} already present, {len(summary.bad)} bad lines skipped)")
    return 1 if summary.bad else 0


def cmd_reembed(settings: Settings, args) -> int:
    """Re-embed every memory with the configured model (through a running gateway: with its model)."""
    with _operator(settings) as op, _Bar() as bar:
        n, model = op.reembed(progress=bar.update)
    print(f"re-embedded {n} memories with {model}")
    return 0


def cmd_migrate(settings: Settings, args) -> int:
    """`memgate migrate --from URL --to URL`: copy every table, resumable; counts checked at the end."""
    from bot.app import open_store
    from memory.store.migrate import check_urls, copy_store

    bars: dict[str, _Bar] = {}
    seen: dict[str, int] = {}

    def progress(table: str, done: int, total: int) -> None:
        if not total:
            return  # an empty table: no bar
        if table not in bars:
            for b in bars.values():
                b.__exit__()
            bars[table] = _Bar(total, desc=table, unit="row", tty_only=True)
            seen[table] = 0
        bars[table].update(done - seen[table])
        seen[table] = done

    def at(where) -> Settings:  # the same settings (migrations, password, dim) on another database
        return settings.model_copy(update={"store": settings.store.model_copy(update={"url": str(where)})})

    src, dst = check_urls(args.source, args.target)
    with open_store(at(src)) as source, open_store(at(dst)) as target:
        try:
            result = copy_store(source, target, str(src), batch=args.batch, progress=progress)
        finally:
            for b in bars.values():
                b.__exit__()
    width = max([len(c.table) for c in result.counts] + [5])
    print(f"{'table':<{width}} | {'source':>9} | {'target':>9} | ok")
    for c in result.counts:
        print(f"{c.table:<{width}} | {c.source:>9} | {c.target:>9} | {'yes' if c.ok else 'NO'}")
    bad = [c.table for c in result.counts if not c.ok]
    if bad:
        print(f"memgate: the row counts differ in {', '.join(bad)}: the target is not a complete copy", file=sys.stderr)
        return 1
    rate = f", {result.copied / result.copy_s:.0f} rows/s" if result.copied and result.copy_s else ""
    print(f"migrated {sum(c.target for c in result.counts)} rows ({result.copied} copied by this run in "
          f"{result.copy_s:.1f} s{rate}; indexes and keyword index {result.finish_s:.1f} s)")
    return 0


# --- doctor -------------------------------------------------------------------------------
def cmd_doctor(settings: Settings, args) -> int:
    problems = 0

    def report(ok: bool, what: str, fix: str = "") -> None:
        nonlocal problems
        print(f"[{'ok' if ok else 'FAIL'}] {what}" + ("" if ok else f"\n       fix: {fix}"))
        problems += 0 if ok else 1

    # First, as found: opening the store below makes the database's own files private again.
    loose = loose_paths(settings.data_path, _database_files(settings))
    if loose:
        shown = ", ".join(f"{p} ({mode:o})" for p, mode in loose[:5]) + (f" and {len(loose) - 5} more" if len(loose) > 5 else "")
        report(False, f"open to other accounts on this machine: {shown}",
               f"chmod -R go-rwx {settings.data_path}" + "".join(f" {p}" for p, _ in loose
                                                                 if settings.data_path not in p.parents
                                                                 and p != settings.data_path))
    else:
        report(True, f"the data folder {settings.data_path} and the database are private to {getpass.getuser()}")
    from memory.store.connection import connect

    try:
        con = connect(":memory:")
        con.execute("SELECT array_inner_product([1.0, 0.0]::FLOAT[2], [1.0, 0.0]::FLOAT[2]), stem('running', 'porter')")
        con.close()
        report(True, "DuckDB vss and fts extensions load from their packages")
    except Exception as exc:
        report(False, f"DuckDB extensions: {exc}", "pip install duckdb==1.5.5 duckdb-extension-vss==1.5.5 duckdb-extension-fts==1.5.5")
    try:
        from bot.app import make_embedder

        emb = make_embedder(settings)
        vec = emb.embed_query("hello")
        report(len(vec) == emb.dim, f"embedding model {emb.name} ({emb.dim}-d)")
    except Exception as exc:
        report(False, f"embedding model: {exc}", "check [embedding] in the config")
    try:
        from bot.app import open_store

        store = open_store(settings)
        store.write(lambda c: store.meta_set(c, "doctor", datetime.now(UTC).isoformat()))
        store.close()
        report(True, f"database {settings.store_url} is writable")
    except StoreLockedError as exc:
        report(True, f"database in use by a running gateway ({exc})")
    except Exception as exc:
        report(False, f"database {settings.store_url}: {exc}", "check data_dir (or [store] url) and its permissions")
    if not settings.llm_configured:
        report(False, "no LLM configured", NO_LLM_TEXT.replace("\n", "\n       "))
    else:
        from bot.app import make_llm

        async def ping() -> str:
            llm = make_llm(settings, None)
            out = await llm.complete([{"role": "user", "content": "Reply with the word OK."}], purpose="doctor", max_tokens=1)
            return out.content

        from bot.model_servers import down_hint, shown_address

        where = shown_address(settings.llm.api_base, settings.llm.model)
        try:
            asyncio.run(ping())
            report(True, f"LLM {settings.llm.model or '(server default)'} at {where} answers")
        except Exception as exc:
            report(False, f"LLM at {where} did not answer: {str(exc)[:200]}",
                   down_hint(settings.llm.api_base, settings.llm.model))
    print("all good" if not problems else f"{problems} problem(s)")
    return 1 if problems else 0


def _database_files(settings: Settings) -> list[Path]:
    """The DuckDB file and its WAL, wherever `[store] url` puts them (none for PostgreSQL)."""
    from memory.store.url import parse_store_url

    url = parse_store_url(settings.store_url)
    if url.backend != "duckdb" or str(url.path) == ":memory:":
        return []
    db = Path(url.path)
    return [db, db.with_name(db.name + ".wal")]


# --- pairing, jobs, wechat ----------------------------------------------------------------
def cmd_pairing(settings: Settings, args) -> int:
    with _operator(settings) as op:
        if args.action == "list":
            pending = op.pending()
            for p in pending:
                print(f"{p.code}  {p.identity}  {p.display_name}")
            if not pending:
                print("no pending pairing requests")
        elif args.action == "approve":
            person = op.approve(args.code)
            print(f"approved {person.identity} as {person.role}")
        else:
            op.deny(args.code)
            print("denied")
    return 0


def cmd_public(settings: Settings, args) -> int:
    """The public space, for the server's admin (the running gateway holds the database: stop it first)."""
    app = _engine(settings)
    public = app.access.PUBLIC_SPACE
    words = " ".join(args.words).strip()
    try:
        if args.action == "list":
            rows = asyncio.run(app.engine.list([public], kinds=("fact", "chunk"), limit=args.limit))
            for r in rows:
                print(f"[{r.id}] ({r.kind}, {r.created_at:%Y-%m-%d}) {r.text[:200]}")
            if not rows:
                print("no public memories")
        elif args.action == "add":
            if not words:
                raise MemgateError("memgate public add needs the TEXT to share")
            rec = asyncio.run(app.engine.remember(words, public, source="public"))
            print(f"shared [{rec.id}]")
        else:
            if not args.id:
                raise MemgateError(f"memgate public {args.action} needs a memory ID (see memgate public list)")
            if args.action == "edit":
                if not words:
                    raise MemgateError("memgate public edit needs the ID and the new TEXT")
                rec = asyncio.run(app.engine.edit(args.id, words, [public]))
                if rec is None:
                    raise MemgateError(f"[{args.id}] is not a public memory (see memgate public list)")
                print(f"edited [{args.id}] -> [{rec.id}]")
            else:
                if not asyncio.run(app.engine.forget([args.id], [public])).forgotten:
                    raise MemgateError(f"[{args.id}] is not a public memory (see memgate public list)")
                print(f"forgot [{args.id}]")
    finally:
        app.store.close()
    return 0


def cmd_jobs(settings: Settings, args) -> int:
    from bot.job_views import format_jobs

    with _operator(settings) as op:
        print(format_jobs(op.jobs()))
    return 0


def cmd_keys(settings: Settings, args) -> int:
    """API keys: create (printed once), list, revoke."""
    from bot.api.key_views import format_keys, parse_duration

    with _operator(settings) as op:
        if args.action == "list":
            print(format_keys(op.keys(), op.now()))
        elif args.action == "revoke":
            rec = op.revoke_key(args.prefix)
            print(f"revoked {rec.prefix}… ({rec.scope}, {rec.space_id or 'admin'})")
        else:
            scope = "admin" if args.admin else args.scope
            expires = parse_duration(args.expires) if args.expires else None
            key, rec = op.create_key(scope, args.space, args.user, expires, args.name)
            print(key)
            print(f"(shown once; {rec.scope} key for {rec.space_id or 'the admin routes'}, prefix {rec.prefix})",
                  file=sys.stderr)
    return 0


def cmd_onboard(args) -> int:
    """The guided first run (bot/onboard.py): checks each answer, writes the config, says how to start."""
    from bot.onboard import OnboardFlags, TerminalAsker, run_onboard

    flags = OnboardFlags(config=Path(args.config or os.environ.get("MEMGATE_CONFIG") or "~/.config/memgate/memgate.toml"),
                         data_dir=args.data_dir, llm_api_base=args.llm_api_base or "", llm_model=args.llm_model or "",
                         llm_key_env=args.llm_key_env or "", probe=tuple(args.probe or ()),
                         channels=tuple(c.strip() for c in (args.channels or "").split(",") if c.strip()),
                         telegram_token_env=args.telegram_token_env or "", telegram_api_base=args.telegram_api_base or "",
                         owner=tuple(args.owner or ()), console_user=args.user or "", force=args.force)
    if not args.non_interactive and not sys.stdin.isatty():
        raise ConfigError("memgate onboard asks questions in a terminal; in a script pass --non-interactive and flags "
                          "(memgate onboard --help)")

    async def wechat_login(data_dir: Path) -> str:
        from adapters.wechat.ilink.login import login
        from adapters.wechat.ilink.protocol import DEFAULT_BASE_URL

        creds = await login(args.wechat_api_base or DEFAULT_BASE_URL, data_dir)
        return f"  logged in as WeChat bot {creds.ilink_bot_id}"

    asker = None if args.non_interactive else TerminalAsker()
    outcome = asyncio.run(run_onboard(flags, asker, wechat_login=wechat_login))
    print("\nDone.")
    for line in outcome.summary:
        print(f"  {line}")
    print(f"\nStart it with:\n  {outcome.start_command}\n"
          f"Keep it running after you log out: memgate --config {outcome.config} service install --user")
    return 0


def cmd_service(settings: Settings, args) -> int:
    """memgate as a systemd service (bot/service.py)."""
    from bot import service

    place = service.unit_place(args.user, args.unit_dir)
    if args.action == "install":
        config = service.config_for_service(args.config)
        settings.data_path.mkdir(parents=True, exist_ok=True)
        text = service.render_unit(service.memgate_command(), config, user=args.user,
                                   run_as=os.environ.get("SUDO_USER") or getpass.getuser(), workdir=settings.data_path)
        lines = service.install(place, text, start=not args.no_start)
    elif args.action == "uninstall":
        lines = service.uninstall(place)
    else:
        lines = service.status(place)
    print("\n".join(lines))
    return 0


def cmd_wechat(settings: Settings, args) -> int:
    from adapters.wechat.ilink.login import login

    setup_logging(settings, to_file=False)
    from adapters.wechat.ilink.protocol import DEFAULT_BASE_URL

    creds = asyncio.run(login(settings.channels.wechat.base_url or DEFAULT_BASE_URL, settings.data_path))
    print(f"logged in as bot {creds.ilink_bot_id}; credentials saved in {settings.data_path}")
    return 0


# --- entry point --------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="memgate", description="A chat-bot gateway whose agent never forgets.")
    p.add_argument("--config", help="TOML config file (default: $MEMGATE_CONFIG, ./memgate.toml, ~/.config/memgate/memgate.toml)")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("chat", help="talk to the bot in this terminal")
    c.add_argument("--user", help="your name (each name has its own memory)")
    c.add_argument("--api", action="store_true", help="also serve the HTTP API ([api] host and port) while chatting")
    c.set_defaults(func=cmd_chat)
    sub.add_parser("run", help="start every enabled channel").set_defaults(func=cmd_run)
    m = sub.add_parser("memory", help="search, list, export or import memories")
    msub = m.add_subparsers(dest="action", required=True)
    s = msub.add_parser("search", help="hybrid search, best first, with scores")
    s.add_argument("query", nargs="+", help="what to look for (several words are one query)")
    s.add_argument("--limit", type=int, default=10, help="at most this many results (default 10)")
    ls = msub.add_parser("list", help="the newest memories")
    ls.add_argument("--kind", action="append", default=None, choices=["fact", "chunk", "task", "skill"],
                    help="only this kind (repeat for several; default: fact)")
    ls.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    ex = msub.add_parser("export", help="one JSON line per live memory")
    ex.add_argument("file", nargs="?", default="-", help="write to this file (default: - for standard output)")
    im = msub.add_parser("import", help="import an export (ids kept: running it again adds nothing)")
    im.add_argument("file", help="a file written by memgate memory export")
    for sp in (s, ls, ex, im):
        who = sp.add_mutually_exclusive_group()
        who.add_argument("--user", help="the person (as in memgate chat --user NAME, or channel:id)")
        who.add_argument("--space", help="a space id")
    m.set_defaults(func=cmd_memory)
    sub.add_parser("reembed", help="re-embed every memory with the configured model").set_defaults(func=cmd_reembed)
    sub.add_parser("doctor", help="check the installation").set_defaults(func=cmd_doctor)
    mg = sub.add_parser("migrate", help="copy the database to another (DuckDB -> PostgreSQL), resumable")
    mg.add_argument("--from", dest="source", required=True, help="duckdb:///path.duckdb or postgresql://user@host/db")
    mg.add_argument("--to", dest="target", required=True, help="an empty database (password: MEMGATE_STORE_PASSWORD)")
    mg.add_argument("--batch", type=int, default=2000, help="rows per transaction (default 2000)")
    mg.set_defaults(func=cmd_migrate)
    pa = sub.add_parser("pairing", help="pending DM pairing requests")
    pa.add_argument("action", choices=["list", "approve", "deny"], help="list the waiting requests, approve or deny one")
    pa.add_argument("code", nargs="?", help="the pairing code the person was given (approve, deny)")
    pa.set_defaults(func=cmd_pairing)
    pu = sub.add_parser("public", help="list, add, edit or forget the public (shared) memories")
    pu.add_argument("action", choices=["list", "add", "edit", "forget"], help="what to do with the public memories")
    pu.add_argument("id", nargs="?", help="the memory id (edit, forget); for add, the first word of the text")
    pu.add_argument("words", nargs="*", help="the text (add, edit)")
    pu.add_argument("--limit", type=int, default=50, help="list: at most this many (default 50)")
    pu.set_defaults(func=cmd_public)
    sub.add_parser("jobs", help="background jobs").set_defaults(func=cmd_jobs)
    k = sub.add_parser("keys", help="API keys (hashed; a key is printed once, at creation)")
    ksub = k.add_subparsers(dest="action", required=True)
    kc = ksub.add_parser("create", help="create a key and print it once")
    who = kc.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", help="the person whose space the key reaches (channel:id or display name)")
    who.add_argument("--space", help="the space id the key reaches")
    who.add_argument("--admin", action="store_true", help="an admin key: the admin routes, no space")
    kc.add_argument("--scope", choices=["read", "write"], default="read", help="read (default) or write")
    kc.add_argument("--expires", help="lifetime such as 30d, 12h, 2w, 90m (default: never)")
    kc.add_argument("--name", help="a note to tell keys apart in `keys list`")
    ksub.add_parser("list", help="every key: prefix, scope, space, state, expiry (never the key)")
    kr = ksub.add_parser("revoke", help="revoke the key whose prefix starts with PREFIX")
    kr.add_argument("prefix", help="the key's prefix as `keys list` shows it (mg_...)")
    k.set_defaults(func=cmd_keys)
    o = sub.add_parser("onboard", help="guided first run: model, channels, owner; writes the config")
    o.add_argument("--config", default=argparse.SUPPRESS,
                   help="the config file to write (default: $MEMGATE_CONFIG or ~/.config/memgate/memgate.toml)")
    o.add_argument("--non-interactive", action="store_true", help="ask nothing: take every answer from the flags below")
    o.add_argument("--data-dir", default="~/.local/share/memgate", help="where the database and logs go (default %(default)s)")
    o.add_argument("--llm-api-base", help="an OpenAI-compatible server (default: look for Ollama, llama.cpp, vLLM here)")
    o.add_argument("--llm-model", help="the model name (default: the first one the server lists)")
    o.add_argument("--llm-key-env", metavar="VAR", help="the environment variable holding the model's API key")
    o.add_argument("--probe", action="append", metavar="URL", help="also look for a model server at this address")
    o.add_argument("--channels", help="comma-separated: console (always on), telegram, wechat (default: console)")
    o.add_argument("--telegram-token-env", metavar="VAR", help="the variable holding the bot token (default TELEGRAM_BOT_TOKEN)")
    o.add_argument("--telegram-api-base", metavar="URL", help="a Bot API server other than api.telegram.org (…/bot)")
    o.add_argument("--wechat-api-base", metavar="URL", help="an iLink server other than WeChat's own, for the QR login")
    o.add_argument("--owner", action="append", metavar="CHANNEL:ID", help="an owner, e.g. telegram:123456789 (repeatable)")
    o.add_argument("--user", help="your name in the terminal chat (default: $USER)")
    o.add_argument("--force", action="store_true", help="replace an existing config file")
    o.set_defaults(func=None)
    sv = sub.add_parser("service", help="run memgate always-on as a systemd service")
    sv.add_argument("action", choices=["install", "uninstall", "status"],
                    help="install (write, enable and start the unit), uninstall, or status")
    sv.add_argument("--user", action="store_true", help="a user service (~/.config/systemd/user), no root needed")
    sv.add_argument("--unit-dir", metavar="DIR",
                    help="write the unit here instead (also $MEMGATE_SYSTEMD_DIR); systemctl is then not called")
    sv.add_argument("--no-start", action="store_true", help="install: enable it for the next boot, do not start it now")
    sv.set_defaults(func=cmd_service)
    w = sub.add_parser("wechat", help="WeChat iLink bot")
    w.add_argument("action", choices=["login"], help="login: show a QR code to scan with the bot's WeChat account")
    w.set_defaults(func=cmd_wechat)
    return p


def main(argv: list[str] | None = None) -> int:
    restrict_umask()  # every file memgate writes is its owner's alone, whatever umask it was started with
    args = parser().parse_args(argv)
    if args.command == "memory" and args.action == "list" and args.kind is None:
        args.kind = ["fact"]
    if args.command == "public" and args.action == "add" and args.id:
        args.words, args.id = [args.id, *args.words], None   # `add` takes text only
    if args.command == "pairing" and args.action != "list" and not args.code:
        print("memgate pairing approve|deny needs a CODE", file=sys.stderr)
        return 2
    try:
        if args.command == "onboard":   # it writes the config: there is none to load yet
            return cmd_onboard(args)
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


if __name__ == "__main__":
    raise SystemExit(main())
