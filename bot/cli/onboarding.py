"""`memgate onboard`: from "installed" to a config that `memgate run` starts with.

It finds the model (a local Ollama / llama.cpp / vLLM on its usual port, an address given, or a
litellm model name and its key), tests it with one short call, walks through the channels
(Telegram: the token checked with getMe and the owner's id read from their first message;
WeChat: the QR login now or later), makes the owner, writes the config with comments and the
secrets into a private env file, and ends with the exact command to start. The checks it makes
(the model's one call, the Telegram token, the owner's first message) are in onboard_checks.py.

Interactive (questions on the terminal, plain `input`) or `--non-interactive` (flags only: a
missing answer is one line naming the flag). The terminal user and, with Telegram, the Telegram
account given become owners, so the first pairing needs no CLI.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from bot.cli.onboard_checks import BotApiUnreachable, telegram_first_sender, telegram_get_me, test_model
from bot.cli.setup_files import SetupChoices, write_private, write_setup
from bot.config import load_settings
from bot.errors import ConfigError, MemgateError
from bot.model_servers import KNOWN_SERVERS, OLLAMA, FoundServer, detect, probe, shown_address
from bot.settings import check_proxy_url

TELEGRAM_API = "https://api.telegram.org/bot"
YES, NO = frozenset({"y", "yes"}), frozenset({"n", "no"})
SKIP_WORDS = frozenset({"skip", "s", "later"})
OWNER_WAIT_SECONDS = 120.0


@dataclass(frozen=True, slots=True)
class OnboardFlags:
    """The command line's answers (any of them may be missing in interactive mode)."""

    config: Path
    data_dir: str = "~/.local/share/memgate"
    llm_api_base: str = ""
    llm_model: str = ""
    llm_key_env: str = ""
    probe: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()
    telegram_token_env: str = ""
    telegram_api_base: str = ""
    telegram_proxy: str = ""
    owner: tuple[str, ...] = ()
    console_user: str = ""
    force: bool = False


class TerminalAsker:
    """Plain `input()` questions: works on any terminal, in a pty, over ssh."""

    def say(self, text: str) -> None:
        print(text, flush=True)

    def ask(self, question: str, default: str = "") -> str:
        shown = f"{question} [{default}]: " if default else f"{question}: "
        try:
            answer = input(shown).strip()
        except EOFError:
            raise MemgateError("onboarding stopped (no more input); nothing was written") from None
        return answer or default

    def secret(self, question: str) -> str:
        try:
            return getpass.getpass(f"{question} (hidden): ").strip()
        except EOFError:
            raise MemgateError("onboarding stopped (no more input); nothing was written") from None

    def yes(self, question: str, default: bool) -> bool:
        while True:
            answer = self.ask(f"{question} {'[Y/n]' if default else '[y/N]'}", "").lower()
            if not answer:
                return default
            if answer in YES or answer in NO:
                return answer in YES
            self.say("  please answer y or n")

    def pick(self, question: str, count: int, default: str = "1", *, names: tuple[str, ...] = ()) -> int | str | None:
        """A menu of `count` numbered items: the 0-based index picked, one of `names` typed out,
        or None for "skip". Anything else is refused and asked again ("9" of 3 is not item 3)."""
        while True:
            answer = self.ask(question, default)
            if answer.lower() in SKIP_WORDS:
                return None
            if answer.isdigit() and 1 <= int(answer) <= count:
                return int(answer) - 1
            if answer in names:
                return answer
            self.say(f"  {answer!r} is not on the list: a number from 1 to {count}"
                     + (", a name shown" if names else "") + ", or skip")


@dataclass(frozen=True, slots=True)
class Outcome:
    config: Path
    env_file: Path | None
    start_command: str
    summary: tuple[str, ...]


# --- the flow -----------------------------------------------------------------------------------
async def _choose_model(flags: OnboardFlags, asker: TerminalAsker | None) -> tuple[str, str, str, str | None]:
    """(api_base, model, what was found there, key) — tested with one call."""
    key = os.environ.get(flags.llm_key_env) if flags.llm_key_env else None
    if flags.llm_key_env and not key:
        raise ConfigError(f"--llm-key-env {flags.llm_key_env}: that environment variable is not set")
    if asker is None:
        api_base, model, found = flags.llm_api_base, flags.llm_model, ""
        if api_base:
            server = await probe(api_base)
            if server is None:
                server = await probe(api_base, server=OLLAMA)
            if server is not None:
                found = server.label
                model = _as_listed(model or (server.models[0] if server.models else ""), server)
        elif not model:
            servers = await detect(flags.probe)
            if not servers:
                raise ConfigError(_nothing_found() + " Or pass --llm-api-base URL / --llm-model NAME.")
            api_base, found = servers[0].api_base, servers[0].label
            model = _as_listed(servers[0].models[0] if servers[0].models else "", servers[0])
        if not model:
            raise ConfigError("no model name: pass --llm-model NAME (the server listed none)")
        await test_model(api_base, model, key)
        return api_base, model, found, key
    while True:
        api_base, model, found, key = await _ask_model(flags, asker, key)
        if not model:
            asker.say("  no model for now: memgate answers commands only until one is set "
                      "(`memgate onboard` again, or MEMGATE_LLM_MODEL / MEMGATE_LLM_API_BASE)")
            return api_base, model, found, key
        asker.say(f"Testing {model} at {shown_address(api_base, model)} with one short call...")
        try:
            answer = await test_model(api_base, model, key)
        except MemgateError as exc:
            asker.say(f"  it failed: {exc}")
            if asker.yes("Keep it anyway (start the server later)?", False):
                return api_base, model, found, key
            continue
        asker.say(f"  ok, it answered: {answer!r}")
        return api_base, model, found, key


def _as_listed(model: str, server: FoundServer | None) -> str:
    """The name to write for a model the server lists: its id as it is, unless litellm would read
    the id's first part as a provider (memory/model_route.py); any other name as typed."""
    if not model or server is None or model not in server.models:
        return model
    from memory.llm import import_litellm
    from memory.model_route import listed_name, litellm_providers

    return listed_name(model, litellm_providers(import_litellm()))


def _nothing_found() -> str:
    ports = ", ".join(f"{s.port} ({s.name})" for s in KNOWN_SERVERS)
    return (f"No model server answers on this machine's usual ports ({ports}). For Ollama: `{OLLAMA.start}`, "
            f"then `{OLLAMA.pull.format(model='qwen2.5')}`.")


async def _ask_model(flags: OnboardFlags, asker: TerminalAsker, key: str | None) -> tuple[str, str, str, str | None]:
    asker.say("Looking for a model server on this machine...")
    servers: list[FoundServer] = await detect(flags.probe + ((flags.llm_api_base,) if flags.llm_api_base else ()))
    if servers:
        for n, s in enumerate(servers, 1):
            models = ", ".join(s.models[:8]) or "no models yet"
            asker.say(f"  {n}) {s.label}: {models}")
        asker.say(f"  {len(servers) + 1}) something else (another address, or a hosted model through litellm)")
        index = asker.pick("Which one? (or skip: no model for now)", len(servers) + 1, "1")
        if index is None:
            return "", "", "", key
        if isinstance(index, int) and index < len(servers):
            s = servers[index]
            if not s.models:
                asker.say(f"  it has no model yet: {OLLAMA.pull.format(model='qwen2.5')} (for Ollama), then run onboard again")
                return s.api_base, "", s.label, key
            for n, m in enumerate(s.models, 1):
                asker.say(f"    {n}) {m}")
            choice = asker.pick("Which model? (number or name)", len(s.models), "1", names=tuple(s.models))
            if choice is None:
                return "", "", "", key
            model = s.models[choice] if isinstance(choice, int) else choice
            return s.api_base, _as_listed(model, s), s.label, key
    else:
        asker.say("  " + _nothing_found())
    where = asker.ask("An OpenAI-compatible address (http://...), a litellm model name (e.g. openai/gpt-4o-mini), "
                      "or Enter to skip (no model for now)")
    if not where or where.lower() in SKIP_WORDS:
        return "", "", "", key
    if where.startswith(("http://", "https://")):
        server = await probe(where)
        listed = ", ".join(server.models[:8]) if server and server.models else ""
        if listed:
            asker.say(f"  it lists: {listed}")
        model = asker.ask("Model name", server.models[0] if server and server.models else "")
        return where, _as_listed(model, server), server.label if server else "", key
    if not key:
        key = asker.secret(f"API key for {where} (kept in a private env file, never in the config)") or None
    return "", where, "", key


async def run_onboard(flags: OnboardFlags, asker: TerminalAsker | None,
                      wechat_login: Callable[[Path], Awaitable[str]] | None = None,
                      now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> Outcome:
    """Ask (or read the flags), check each answer for real, write the files; returns what to run."""
    say = asker.say if asker else (lambda text: None)
    config = flags.config.expanduser()
    previous = None
    if config.exists() and not flags.force:
        if asker is None:
            raise ConfigError(f"{config} exists: pass --force to replace it, or --config PATH for another file")
        previous = _previous(config)
        if previous is None and not asker.yes(f"{config} exists but cannot be read. Replace it?", False):
            raise ConfigError(f"{config} exists: pass --force to replace it, or --config PATH for another file")
    if asker is not None:
        say("memgate onboard: a few questions, each answer checked; nothing is written until the end. A step can be\n"
            "skipped and done later by running `memgate onboard` again; Ctrl-C stops with nothing written.\n")
        if previous is not None:
            say(f"{config} exists: picking up from it (Enter keeps each answer; it is kept as {config.name}.before-onboard).\n")
    data_dir = flags.data_dir if previous is None else previous.data_dir
    data_dir = asker.ask("Where should memgate keep its data?", data_dir) if asker else data_dir
    if (asker is not None and previous is not None and previous.llm_configured
            and asker.yes(f"Keep the model {previous.llm.model} at {shown_address(previous.llm.api_base, previous.llm.model)}?",
                          True)):
        api_base, model, found, key = previous.llm.api_base, previous.llm.model, "", previous.secret("llm_api_key")
    else:
        api_base, model, found, key = await _choose_model(flags, asker)
    secrets: dict[str, str] = {"MEMGATE_LLM_API_KEY": key} if key else {}
    user = flags.console_user or (previous.channels.console.user if previous else "") or os.environ.get("USER") or "me"
    if asker is not None:
        user = asker.ask("\nYour name in the terminal chat", user)
    kept_owners = tuple(previous.access.owners) if previous is not None else ()
    choices = SetupChoices(data_dir=data_dir, llm_api_base=api_base, llm_model=model, llm_found=found, console_user=user,
                           owners=tuple(dict.fromkeys((f"console:{user}", *flags.owner, *kept_owners))))
    channels = set(flags.channels)
    if previous is not None:
        channels |= {name for name, on in (("telegram", previous.channels.telegram.enabled),
                                           ("wechat", previous.channels.wechat.enabled)) if on}
    if asker is not None:
        say("\nChannels: the terminal is always there. Others:")
        if asker.yes("Telegram?", "telegram" in channels):
            channels.add("telegram")
        else:
            channels.discard("telegram")
        if asker.yes("WeChat (personal account, iLink QR login)?", "wechat" in channels):
            channels.add("wechat")
        else:
            channels.discard("wechat")
    unknown = channels - {"console", "telegram", "wechat"}
    if unknown:
        raise ConfigError(f"--channels: unknown channel {', '.join(sorted(unknown))} (console, telegram, wechat)")
    later: list[str] = []
    if "telegram" in channels:
        kept = previous.secret("telegram_token") if previous is not None else None
        if kept and asker is not None and asker.yes("Keep the Telegram bot as it is (its token is set)?", True):
            tg = previous.channels.telegram
            choices, token = replace(choices, telegram=True, telegram_base_url=tg.base_url, telegram_proxy=tg.proxy), kept
        else:
            choices, token = await _telegram(flags, asker, choices)
        if token is None:
            channels.discard("telegram")
            later.append(f"Telegram: skipped; add it later with `memgate --config {config} onboard` (it keeps the rest)")
        else:
            secrets["TELEGRAM_BOT_TOKEN"] = token
    if "wechat" in channels:
        choices = replace(choices, wechat=True)
        if asker is not None and wechat_login is not None and asker.yes("Log the WeChat bot in now (QR code)?", True):
            say(await wechat_login(Path(os.path.expanduser(data_dir))))
        else:
            later.append(f"WeChat: log the bot in first with `memgate --config {config} wechat login`")
    choices = replace(choices, secrets=secrets)
    if previous is not None:
        # Keys onboarding does not ask about are not carried over: the old file stays beside it.
        write_private(config.with_name(config.name + ".before-onboard"), config.read_text(encoding="utf-8"))
    env_path = write_setup(choices, config, now())
    # What was written must start: read it back exactly as `memgate run` will.
    load_settings(config, env={k: v for k, v in os.environ.items() if not k.startswith(("MEMGATE_", "TELEGRAM_"))})
    start = f"memgate --config {config} run"
    if not model:
        later.append(f"model: none yet; set it with `memgate --config {config} onboard` or MEMGATE_LLM_MODEL")
    summary = (f"model: {model} at {shown_address(api_base, model)}" if model else "model: none yet",
               f"channels: {', '.join(['console', *sorted(channels - {'console'})])}",
               f"owners: {', '.join(choices.owners)}",
               f"config: {config}" + (f" (secrets in {env_path}, mode 600)" if env_path else ""), *later)
    return Outcome(config, env_path, start, summary)


def _previous(config: Path):
    """The settings an earlier (perhaps partly skipped) onboarding wrote, its secrets included;
    None when the file cannot be read as a config."""
    try:
        return load_settings(config, env={k: v for k, v in os.environ.items()
                                          if not k.startswith(("MEMGATE_", "TELEGRAM_", "WECHAT_"))})
    except (ConfigError, OSError):
        return None


async def _telegram(flags: OnboardFlags, asker: TerminalAsker | None,
                    choices: SetupChoices) -> tuple[SetupChoices, str | None]:
    """Telegram's part of the choices and the token; token None: skipped, for later."""
    base = flags.telegram_api_base or TELEGRAM_API
    try:
        proxy = check_proxy_url(flags.telegram_proxy)
    except ValueError as exc:
        raise ConfigError(f"--telegram-proxy: {exc}") from None
    if asker is None:
        var = flags.telegram_token_env or "TELEGRAM_BOT_TOKEN"
        token = os.environ.get(var, "")
        if not token:
            raise ConfigError(f"Telegram: set the bot token in ${var} (or name another variable with --telegram-token-env)")
        try:
            bot = await telegram_get_me(base, token, proxy)
        except BotApiUnreachable as exc:
            raise MemgateError(f"{exc}" + ("" if proxy else "; where Telegram is blocked pass --telegram-proxy "
                                           "socks5://HOST:PORT (or http://HOST:PORT)")) from None
    else:
        asker.say("  Make a bot with @BotFather in Telegram (/newbot) and paste its token (Enter alone: skip Telegram for now).")
        token = ""
        while True:
            if not token:
                token = asker.secret("  Telegram bot token")
                if not token:
                    return choices, None
            try:
                bot = await telegram_get_me(base, token, proxy)
                break
            except BotApiUnreachable as exc:
                asker.say(f"  {exc}")
                proxy = _ask_proxy(asker, proxy)
                if not proxy:
                    return choices, None        # unreachable and no proxy: Telegram waits for later
            except MemgateError as exc:        # the token was refused: paste it again
                asker.say(f"  {exc}")
                token = ""
        asker.say(f"  ok: the token belongs to {bot}")
    owners = tuple(o for o in flags.owner if o.startswith("telegram:"))
    if asker is not None and not owners:
        typed = asker.ask(f"  Your Telegram user id (numbers), or press Enter and send any message to {bot}", "")
        if typed.isdigit():
            owners = (f"telegram:{typed}",)
        else:
            asker.say(f"  Waiting up to {OWNER_WAIT_SECONDS:.0f} s for your message to {bot}...")
            found = await telegram_first_sender(base, token, OWNER_WAIT_SECONDS, proxy)
            if found is None:
                asker.say("  No message came: the first person you approve with `memgate pairing approve CODE` "
                          "becomes the owner.")
            else:
                asker.say(f"  got it: {found[1]} (id {found[0]}) is the owner")
                owners = (f"telegram:{found[0]}",)
    new_owners = tuple(dict.fromkeys((*choices.owners, *owners)))
    return replace(choices, telegram=True, telegram_bot=bot, owners=new_owners,
                   telegram_base_url=flags.telegram_api_base, telegram_proxy=proxy), token


def _ask_proxy(asker: TerminalAsker, current: str) -> str:
    """Offered when the Bot API did not answer: a proxy address, checked (Enter keeps `current`)."""
    asker.say("  Telegram is blocked in some places (mainland China among them); memgate can reach it through a\n"
              "  proxy: http://HOST:PORT or socks5://HOST:PORT (Enter alone: none, and Telegram waits for later).")
    while True:
        answer = asker.ask("  Proxy for Telegram", current)
        try:
            return check_proxy_url(answer)
        except ValueError as exc:
            asker.say(f"  {exc}")
