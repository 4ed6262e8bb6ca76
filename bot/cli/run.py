"""`memgate run` and `memgate chat`: the channels the config enables, served by the gateway until a
signal (or, with a person at the terminal, until they leave).

The one module of the command line that knows the concrete adapters (tests/test_layers.py holds
it to that), so the WeChat QR login that `memgate wechat login` and onboarding offer is here too.
Each adapter is imported only when its channel is used.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import os
import signal
import sys
from pathlib import Path
from typing import NoReturn

from bot.errors import ConfigError, MemgateError
from bot.history_file import HISTORY_NAME
from bot.logs import log_file, log_loop_exceptions, setup_logging, terminal_session
from bot.model_servers import check_models
from bot.settings import Settings

log = logging.getLogger("memgate")
KEY_ENV = "MEMGATE_API_KEY"   # a space key: `memgate chat` (and `memgate mcp`) act as that key, through the gateway

NO_LLM_TEXT = """No language model is configured, so memgate cannot answer yet. Set one of:
  MEMGATE_LLM_MODEL=<any litellm model, e.g. openai/gpt-4o-mini> plus its key in MEMGATE_LLM_API_KEY, or
  MEMGATE_LLM_API_BASE=http://127.0.0.1:11434/v1 (Ollama, llama.cpp's server or any OpenAI-compatible server) and MEMGATE_LLM_MODEL=<its model name>."""


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
        api = app.extras.get("api")
        console = next((c for c in channels if c.name == "console"), None)
        if api is not None and api.url:
            # What a person opens next (the headless gateway's only face): on stdout, so a terminal,
            # `docker compose logs` and the journal all show it; but where stdout is a piped chat's
            # replies, one "memgate: ..." line more would read as a reply, so it goes to the log.
            shown = (f"memgate: dashboard at {dashboard_url(settings, api.url)} (log in with a key from "
                     "`memgate keys create --user NAME`)")
            if console is None or console.interactive:
                print(shown, flush=True)
            else:
                log.info("%s", shown.removeprefix("memgate: "))
        elif not channels:
            raise MemgateError("nothing to serve: no channel is running and the API could not listen (see above)")
        waiters = [asyncio.create_task(stop.wait())]
        if until_console_closes and console is not None:
            waiters.append(asyncio.create_task(console.closed.wait()))
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for w in waiters:
            w.cancel()
        # The person at the terminal left: they are not kept waiting for memory (issue 27).
        app.quick_exit = (console is not None and console.interactive and console.closed.is_set()
                          and not stop.is_set())
        if stop.is_set() or app.quick_exit:
            # Stop begins: memory's model calls stop now (their turns wait in the queue), not after
            # the replies below and a drain of the ingest queue (issue 30: a new call 34 s after
            # SIGTERM). A piped chat that ended (a script, `echo ... | memgate chat`) is not
            # stopping: it drains, so what it said is memory when the command returns.
            app.stopping()
        # Answer what is already queued before the channels go away.
        await app.gateway.idle()
    if app.quick_exit:
        leave_now(app.pending_memory)
    return 0


def dashboard_url(settings: Settings, listening: str) -> str:
    """Where a browser reaches the dashboard: [api] public_url behind a proxy, else the address the
    API published (a wildcard host, as in the container, is published as loopback)."""
    if settings.api.public_url:
        return settings.api.public_url + "/"
    return listening.rstrip("/") + "/"


def leave_now(pending_memory: int) -> NoReturn:
    """End the process once the app is closed (everything durable, the database shut), without
    waiting for what nothing needs any more: an embedding batch or model call a thread is still
    in (asyncio.run joins its threads), and the interpreter's teardown of the loaded models.
    Measured on a loaded 2-core machine these took 2-6 s of a person's exit (issue 27)."""
    if pending_memory:
        turns = "1 turn is" if pending_memory == 1 else f"{pending_memory} turns are"
        print(f"memgate: {turns} still to be added to memory; that continues at the next start "
              "(memgate chat or memgate run).")
    sys.stdout.flush()
    logging.shutdown()  # the log file gets every line written so far
    sys.stderr.flush()
    os._exit(0)


def _console(settings: Settings, user: str | None):
    from adapters.console import ConsoleAdapter

    name = user or settings.channels.console.user or os.environ.get("USER") or getpass.getuser() or "me"
    return ConsoleAdapter(name, bot_name=settings.agent.name, history_path=settings.data_path / HISTORY_NAME)


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
    """`memgate chat`: talk to the bot in this terminal (as --user NAME): through the running gateway
    when there is one, else with a gateway of its own in this process."""
    from bot.operator.gateway_client import find_gateway

    key = os.environ.get(KEY_ENV, "").strip() or None
    if key and args.user:
        raise ConfigError(f"give either {KEY_ENV} (a key names its space) or --user, not both")
    client = find_gateway(settings.data_path)
    if client is not None:
        return _attach(settings, client, args.user, key)
    if key:
        raise ConfigError(f"{KEY_ENV} is set, and a key chats through a running gateway: none answers for "
                          f"{settings.data_path} (start `memgate run`, or unset {KEY_ENV} to chat as --user NAME here)")
    if not settings.llm_configured:
        print(NO_LLM_TEXT, file=sys.stderr)
        return 2
    check_models(settings)
    setup_logging(settings, to_file=True, to_stderr=logging.ERROR)
    console = _console(settings, args.user)
    if console.interactive:
        print(chat_banner(settings, console.user))
    with terminal_session(settings, console):
        code = asyncio.run(_serve(settings, [console], until_console_closes=True,
                                  serve_api=bool(args.api) and settings.api.enabled))
    return code


def chat_banner(settings: Settings, user: str, where: str = "") -> str:
    """What `memgate chat` says first on a terminal, in-process or attached (the same keys either way)."""
    return (f"memgate: talking as {user}{where}. /help for commands (Tab completes them); /quit or Ctrl-D to leave.\n"
            "(Ctrl-C clears the line, stops a reply being written, and on an empty line leaves; arrow keys edit,\n"
            f"Up recalls earlier lines; logs go to {log_file(settings)})\n")


def _attach(settings: Settings, client, user: str | None, key: str | None) -> int:
    """`memgate chat` as one more client of the running gateway (bot/cli/attach.py), on this
    terminal's own channel: the same line editing, history and spinner."""
    from bot.cli.attach import chat_through

    console = _console(settings, user)
    setup_logging(settings, to_file=True, to_stderr=logging.ERROR)
    with terminal_session(settings, console):
        gone = asyncio.run(chat_through(settings, client, console, key, banner=chat_banner))
    if gone:
        print(f"memgate: {gone}", file=sys.stderr)
        return 1
    return 0


def build_channels(settings: Settings) -> list:
    """Every channel enabled in the config (secrets from the environment)."""
    chans = []
    c = settings.channels
    if c.telegram.enabled:
        from adapters.telegram.adapter import TelegramAdapter

        token = settings.secret("telegram_token")
        if not token:
            raise ConfigError("channels.telegram is enabled but TELEGRAM_BOT_TOKEN is not set")
        tg = c.telegram
        chans.append(TelegramAdapter(token, base_url=tg.base_url or None, base_file_url=tg.base_file_url or None,
                                     local_dir=Path(tg.local_dir).expanduser() if tg.local_mode else None,
                                     poll_timeout=tg.poll_timeout, proxy=tg.proxy or None,
                                     stream_seconds=tg.stream_seconds))
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
    # /dev/null, a container) it is left out, so the other channels and the API run on their own.
    if c.console.enabled:
        if stdin_kind() != "none":
            chans.append(_console(settings, None))
        else:
            log.info("no terminal here (stdin is not a terminal or a pipe): the terminal channel is skipped; "
                     "`memgate chat` attaches to this gateway from a terminal")
    return chans


def cmd_run(settings: Settings, args) -> int:
    """`memgate run`: every enabled channel, the ingest worker and the scheduler, until stopped."""
    check_models(settings)
    setup_logging(settings, to_file=True)
    channels = build_channels(settings)
    # The API (and the dashboard) is an entry point of its own: a memory server with no chat
    # channel is a gateway too, and so is the default config under Docker or systemd.
    if not channels and not settings.api.enabled:
        if settings.channels.console.enabled:
            raise ConfigError("the only enabled channel is the terminal (channels.console), and there is no terminal or "
                              "input to read here: run `memgate chat` in a terminal, pipe lines in, or enable Telegram "
                              "or WeChat (`memgate onboard` walks through it)")
        raise ConfigError("nothing to serve: no channel is enabled and [api] enabled = false: enable a channel under "
                          "[channels.*] or the API (or run `memgate onboard`)")
    console = next((c for c in channels if c.name == "console"), None)
    if console is not None and console.interactive:
        print(f"memgate: running {', '.join(c.name for c in channels)}; talking here as {console.user}. "
              f"/quit, Ctrl-D or Ctrl-C on an empty line stops every channel.\n(logs go to {log_file(settings)})\n")
    with terminal_session(settings, console):
        if not settings.llm_configured:
            log.warning("no LLM configured: the bot answers commands only. %s", NO_LLM_TEXT.splitlines()[0])
        log.info("starting channels: %s", ", ".join(c.name for c in channels) or "none (the API only)")
        # The person at the terminal leaving ends the run: a bot that went on silently after
        # Ctrl-D looked stopped and was not (run it as a service to keep it up: `memgate service`).
        return asyncio.run(_serve(settings, channels, until_console_closes=console is not None,
                                  serve_api=settings.api.enabled))


async def wechat_login(base_url: str | None, data_dir: Path) -> str:
    """Log the WeChat (iLink) bot in with a QR code on this terminal; its bot id (credentials saved in data_dir)."""
    from adapters.wechat.ilink.login import login
    from adapters.wechat.ilink.protocol import DEFAULT_BASE_URL

    creds = await login(base_url or DEFAULT_BASE_URL, data_dir)
    return creds.ilink_bot_id


def add_chat(sub: argparse._SubParsersAction) -> None:
    """`memgate chat [--user NAME] [--api]`."""
    c = sub.add_parser("chat", help="talk to the bot in this terminal (through the running gateway when there is one)")
    c.add_argument("--user", help="your name (each name has its own memory)")
    c.add_argument("--api", action="store_true", help="also serve the HTTP API ([api] host and port) while chatting (with no gateway running)")
    c.set_defaults(func=cmd_chat)


def add_run(sub: argparse._SubParsersAction) -> None:
    """`memgate run`."""
    sub.add_parser("run", help="start every enabled channel and the API (no terminal needed)").set_defaults(func=cmd_run)
