"""`memgate onboard`: the guided first run (bot.cli.onboarding), asked on this terminal or taken
from flags with --non-interactive; it writes the config, so it runs before any config is read."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

from bot.errors import ConfigError


def cmd_onboard(args) -> int:
    """The guided first run (bot/cli/onboarding.py): checks each answer, writes the config, says how to start."""
    from bot.cli.onboarding import OnboardFlags, TerminalAsker, run_onboard
    from bot.cli.run import wechat_login as qr_login

    flags = OnboardFlags(config=Path(args.config or os.environ.get("MEMGATE_CONFIG") or "~/.config/memgate/memgate.toml"),
                         data_dir=args.data_dir, llm_api_base=args.llm_api_base or "", llm_model=args.llm_model or "",
                         llm_key_env=args.llm_key_env or "", probe=tuple(args.probe or ()),
                         channels=tuple(c.strip() for c in (args.channels or "").split(",") if c.strip()),
                         telegram_token_env=args.telegram_token_env or "", telegram_api_base=args.telegram_api_base or "",
                         telegram_proxy=args.telegram_proxy or "",
                         owner=tuple(args.owner or ()), console_user=args.user or "", force=args.force)
    if not args.non_interactive and not sys.stdin.isatty():
        raise ConfigError("memgate onboard asks questions in a terminal; in a script pass --non-interactive and flags "
                          "(memgate onboard --help)")

    async def wechat_login(data_dir: Path) -> str:
        return f"  logged in as WeChat bot {await qr_login(args.wechat_api_base or None, data_dir)}"

    asker = None if args.non_interactive else TerminalAsker()
    # Ctrl-C stops onboarding at once, at any prompt (the hidden token one too). asyncio.run's own
    # SIGINT handler only cancels the main task, which a blocking input() or getpass() does not
    # notice until Enter; it leaves a handler of ours in place, so this one raises where we are.
    previous = signal.signal(signal.SIGINT, _interrupt)
    try:
        outcome = asyncio.run(run_onboard(flags, asker, wechat_login=wechat_login))
    except KeyboardInterrupt:
        print("\nmemgate: onboarding stopped (Ctrl-C); nothing was written. Run `memgate onboard` again "
              "to start over.", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, previous)
    print("\nDone.")
    for line in outcome.summary:
        print(f"  {line}")
    print(f"\nStart it with:\n  {outcome.start_command}\n"
          f"Keep it running after you log out: memgate --config {outcome.config} service install --user")
    return 0


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def add_onboard(sub: argparse._SubParsersAction) -> None:
    """`memgate onboard [--non-interactive] [flags]`: every answer can come from a flag."""
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
    o.add_argument("--telegram-proxy", metavar="URL",
                   help="reach the Bot API through this proxy: http://HOST:PORT or socks5://HOST:PORT")
    o.add_argument("--wechat-api-base", metavar="URL", help="an iLink server other than WeChat's own, for the QR login")
    o.add_argument("--owner", action="append", metavar="CHANNEL:ID", help="an owner, e.g. telegram:123456789 (repeatable)")
    o.add_argument("--user", help="your name in the terminal chat (default: $USER)")
    o.add_argument("--force", action="store_true", help="replace an existing config file")
    o.set_defaults(func=cmd_onboard, reads_config=False)
