"""`memgate onboard`: from "installed" to a config that `memgate run` starts with.

It finds the model (a local Ollama / llama.cpp / vLLM on its usual port, an address given, or a
litellm model name and its key), tests it with one short call, walks through the channels
(Telegram: the token checked with getMe and the owner's id read from their first message;
WeChat: the QR login now or later), makes the owner, writes the config with comments and the
secrets into a private env file, and ends with the exact command to start.

Interactive (questions on the terminal, plain `input`) or `--non-interactive` (flags only: a
missing answer is one line naming the flag). The terminal user and, with Telegram, the Telegram
account given become owners, so the first pairing needs no CLI.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from bot.cli.setup_files import SetupChoices, write_setup
from bot.config import load_settings
from bot.errors import ConfigError, MemgateError
from bot.model_servers import KNOWN_SERVERS, OLLAMA, FoundServer, detect, down_hint, probe, shown_address

TELEGRAM_API = "https://api.telegram.org/bot"
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
        answer = self.ask(f"{question} {'[Y/n]' if default else '[y/N]'}", "").lower()
        return default if not answer else answer.startswith("y")


@dataclass(frozen=True, slots=True)
class Outcome:
    config: Path
    env_file: Path | None
    start_command: str
    summary: tuple[str, ...]


# --- the checks (each one real I/O, each failure one line) -------------------------------------
async def test_model(api_base: str, model: str, key: str | None) -> str:
    """One short call to the model; returns its answer or raises MemgateError saying what to run."""
    from bot.app import make_llm
    from memory.llm import set_offline_env

    set_offline_env()
    env = {"MEMGATE_CONFIG": os.devnull, "MEMGATE_LLM_API_BASE": api_base, "MEMGATE_LLM_MODEL": model,
           "MEMGATE_LLM_RETRIES": "0", "MEMGATE_LLM_TIMEOUT": "60"}
    if key:
        env["MEMGATE_LLM_API_KEY"] = key
    settings = load_settings(None, env=env)
    llm = make_llm(settings, None)
    try:
        out = await llm.complete([{"role": "user", "content": "Reply with the word OK."}], purpose="onboard", max_tokens=5)
    except Exception as exc:  # litellm's errors vary by provider: the line says what to do
        raise MemgateError(f"the model at {shown_address(api_base, model)} did not answer ({str(exc)[:160]}); "
                           f"{down_hint(api_base, model)}") from None
    return (out.content or "").strip()[:60]


async def telegram_get_me(base: str, token: str) -> str:
    """The bot's @username for this token (getMe), or MemgateError."""
    import aiohttp

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http, \
                http.get(f"{base}{token}/getMe") as resp:
            body = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError, OSError) as exc:
        raise MemgateError(f"could not reach the Telegram Bot API at {base.removesuffix('/bot')}: {exc}") from None
    if not isinstance(body, dict) or not body.get("ok"):
        why = body.get("description") if isinstance(body, dict) else "no answer"
        raise MemgateError(f"Telegram refused the token ({why}): copy it again from @BotFather")
    return "@" + str(body["result"].get("username", "?"))


async def telegram_first_sender(base: str, token: str, wait: float) -> tuple[int, str] | None:
    """The id and name of the first person who writes to the bot in private (getUpdates, nothing
    confirmed: the gateway answers that message later as any other)."""
    import aiohttp

    deadline = time.monotonic() + wait
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=40)) as http:
        while time.monotonic() < deadline:
            try:
                async with http.get(f"{base}{token}/getUpdates", params={"timeout": "5"}) as resp:
                    body = await resp.json(content_type=None)
            except (aiohttp.ClientError, TimeoutError, ValueError, OSError):
                await asyncio.sleep(1)
                continue
            for update in body.get("result") or () if isinstance(body, dict) else ():
                msg = update.get("message") or {}
                if (msg.get("chat") or {}).get("type") == "private" and msg.get("from"):
                    who = msg["from"]
                    return int(who["id"]), str(who.get("first_name") or who.get("username") or who["id"])
    return None


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
                model = model or (server.models[0] if server.models else "")
        elif not model:
            servers = await detect(flags.probe)
            if not servers:
                raise ConfigError(_nothing_found() + " Or pass --llm-api-base URL / --llm-model NAME.")
            api_base, found = servers[0].api_base, servers[0].label
            model = servers[0].models[0] if servers[0].models else ""
        if not model:
            raise ConfigError("no model name: pass --llm-model NAME (the server listed none)")
        await test_model(api_base, model, key)
        return api_base, model, found, key
    while True:
        api_base, model, found, key = await _ask_model(flags, asker, key)
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
        pick = asker.ask("Which one?", "1")
        index = int(pick) - 1 if pick.isdigit() else -1
        if 0 <= index < len(servers):
            s = servers[index]
            if not s.models:
                asker.say(f"  it has no model yet: {OLLAMA.pull.format(model='qwen2.5')} (for Ollama), then run onboard again")
            for n, m in enumerate(s.models, 1):
                asker.say(f"    {n}) {m}")
            choice = asker.ask("Which model? (number or name)", "1")
            model = s.models[int(choice) - 1] if choice.isdigit() and 0 < int(choice) <= len(s.models) else choice
            return s.api_base, model, s.label, key
    else:
        asker.say("  " + _nothing_found())
    where = asker.ask("An OpenAI-compatible address (http://...), or a litellm model name (e.g. openai/gpt-4o-mini)")
    if where.startswith(("http://", "https://")):
        server = await probe(where)
        listed = ", ".join(server.models[:8]) if server and server.models else ""
        if listed:
            asker.say(f"  it lists: {listed}")
        model = asker.ask("Model name", server.models[0] if server and server.models else "")
        return where, model, server.label if server else "", key
    if not key:
        key = asker.secret(f"API key for {where} (kept in a private env file, never in the config)") or None
    return "", where, "", key


async def run_onboard(flags: OnboardFlags, asker: TerminalAsker | None,
                      wechat_login: Callable[[Path], Awaitable[str]] | None = None,
                      now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> Outcome:
    """Ask (or read the flags), check each answer for real, write the files; returns what to run."""
    say = asker.say if asker else (lambda text: None)
    config = flags.config.expanduser()
    if config.exists() and not flags.force:
        if asker is None or not asker.yes(f"{config} exists. Replace it?", False):
            raise ConfigError(f"{config} exists: pass --force to replace it, or --config PATH for another file")
    if asker is not None:
        say("memgate onboard: a few questions, each answer checked; nothing is written until the end.\n")
    data_dir = asker.ask("Where should memgate keep its data?", flags.data_dir) if asker else flags.data_dir
    api_base, model, found, key = await _choose_model(flags, asker)
    secrets: dict[str, str] = {"MEMGATE_LLM_API_KEY": key} if key else {}
    user = flags.console_user or os.environ.get("USER") or "me"
    if asker is not None:
        user = asker.ask("\nYour name in the terminal chat", user)
    choices = SetupChoices(data_dir=data_dir, llm_api_base=api_base, llm_model=model, llm_found=found,
                           console_user=user, owners=(f"console:{user}", *flags.owner))
    channels = set(flags.channels)
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
    if "telegram" in channels:
        choices, token = await _telegram(flags, asker, choices)
        secrets["TELEGRAM_BOT_TOKEN"] = token
    later: list[str] = []
    if "wechat" in channels:
        choices = replace(choices, wechat=True)
        if asker is not None and wechat_login is not None and asker.yes("Log the WeChat bot in now (QR code)?", True):
            say(await wechat_login(Path(os.path.expanduser(data_dir))))
        else:
            later.append(f"WeChat: log the bot in first with `memgate --config {config} wechat login`")
    choices = replace(choices, secrets=secrets)
    env_path = write_setup(choices, config, now())
    # What was written must start: read it back exactly as `memgate run` will.
    load_settings(config, env={k: v for k, v in os.environ.items() if not k.startswith(("MEMGATE_", "TELEGRAM_"))})
    start = f"memgate --config {config} run"
    summary = (f"model: {model} at {shown_address(api_base, model)}",
               f"channels: {', '.join(['console', *sorted(channels - {'console'})])}",
               f"owners: {', '.join(choices.owners)}",
               f"config: {config}" + (f" (secrets in {env_path}, mode 600)" if env_path else ""), *later)
    return Outcome(config, env_path, start, summary)


async def _telegram(flags: OnboardFlags, asker: TerminalAsker | None, choices: SetupChoices) -> tuple[SetupChoices, str]:
    base = flags.telegram_api_base or TELEGRAM_API
    if asker is None:
        var = flags.telegram_token_env or "TELEGRAM_BOT_TOKEN"
        token = os.environ.get(var, "")
        if not token:
            raise ConfigError(f"Telegram: set the bot token in ${var} (or name another variable with --telegram-token-env)")
        bot = await telegram_get_me(base, token)
    else:
        asker.say("  Make a bot with @BotFather in Telegram (/newbot) and paste its token.")
        while True:
            token = asker.secret("  Telegram bot token")
            try:
                bot = await telegram_get_me(base, token)
                break
            except MemgateError as exc:
                asker.say(f"  {exc}")
        asker.say(f"  ok: the token belongs to {bot}")
    owners = tuple(o for o in flags.owner if o.startswith("telegram:"))
    if asker is not None and not owners:
        typed = asker.ask(f"  Your Telegram user id (numbers), or press Enter and send any message to {bot}", "")
        if typed.isdigit():
            owners = (f"telegram:{typed}",)
        else:
            asker.say(f"  Waiting up to {OWNER_WAIT_SECONDS:.0f} s for your message to {bot}...")
            found = await telegram_first_sender(base, token, OWNER_WAIT_SECONDS)
            if found is None:
                asker.say("  No message came: the first person you approve with `memgate pairing approve CODE` "
                          "becomes the owner.")
            else:
                asker.say(f"  got it: {found[1]} (id {found[0]}) is the owner")
                owners = (f"telegram:{found[0]}",)
    new_owners = tuple(dict.fromkeys((*choices.owners, *owners)))
    return replace(choices, telegram=True, telegram_bot=bot, owners=new_owners,
                   telegram_base_url=flags.telegram_api_base), token
