"""The checks `memgate onboard` makes (bot/cli/onboarding.py), each one real I/O and each failure one
line: one short call to the model, the Telegram token (getMe, directly or through a proxy), and
the owner's id from their first private message (getUpdates)."""

from __future__ import annotations

import asyncio
import os
import time

from bot.config import load_settings
from bot.errors import MemgateError
from bot.model_servers import down_hint, shown_address


async def test_model(api_base: str, model: str, key: str | None) -> str:
    """One short call to the model; returns its answer or raises MemgateError saying what to run."""
    from bot.model_clients import make_llm
    from bot.cli.doctor_llm import refusal
    from bot.model_servers import probe, route_fix, route_problem
    from memory.errors import ModelSilent, ModelUnreachable
    from memory.llm import set_offline_env

    set_offline_env()
    problem = route_problem(model, api_base)
    if problem:  # a name to fix, not a server to start: nothing would be sent
        raise MemgateError(f"the model name {model!r} names no provider litellm knows (litellm: {problem}): "
                           + route_fix(model))
    env = {"MEMGATE_CONFIG": os.devnull, "MEMGATE_LLM_API_BASE": api_base, "MEMGATE_LLM_MODEL": model,
           "MEMGATE_LLM_RETRIES": "0", "MEMGATE_LLM_TIMEOUT": "60"}
    if key:
        env["MEMGATE_LLM_API_KEY"] = key
    settings = load_settings(None, env=env)
    llm = make_llm(settings, None)
    try:
        out = await llm.complete([{"role": "user", "content": "Reply with the word OK."}], purpose="onboard", max_tokens=5)
    except (ModelUnreachable, ModelSilent) as exc:  # it was tried: nothing, or silence, came back
        raise MemgateError(f"the model at {shown_address(api_base, model)} did not answer ({str(exc)[:160]}); "
                           f"{down_hint(api_base, model)}") from None
    except Exception as exc:  # it answered with a refusal or an error: what it said, and what to change
        found = await probe(api_base) if api_base else None
        _, what, fix = refusal("the model", model, "--llm-model", settings, exc, found.models if found else ())
        raise MemgateError(f"{what}; {fix}") from None
    return (out.content or "").strip()[:60]


class BotApiUnreachable(MemgateError):
    """The Bot API did not answer at all (blocked, no route, timed out): a proxy may help."""


def _telegram_http(proxy: str, timeout: float):
    import httpx

    # An explicit proxy, or none: never one from the environment that the gateway would not use.
    return httpx.AsyncClient(proxy=proxy or None, timeout=timeout, trust_env=False)


async def telegram_get_me(base: str, token: str, proxy: str = "") -> str:
    """The bot's @username for this token (getMe), or MemgateError (BotApiUnreachable when no
    answer came at all)."""
    import httpx

    try:
        async with _telegram_http(proxy, 15) as http:
            resp = await http.get(f"{base}{token}/getMe")
        body = resp.json()
    except (httpx.HTTPError, ValueError, OSError) as exc:
        # The URL holds the token: only the kind of failure is shown.
        how = f" through the proxy {proxy}" if proxy else ""
        raise BotApiUnreachable(f"could not reach the Telegram Bot API at {base.removesuffix('/bot')}{how}: "
                                f"{type(exc).__name__}") from None
    if not isinstance(body, dict) or not body.get("ok"):
        why = body.get("description") if isinstance(body, dict) else "no answer"
        raise MemgateError(f"Telegram refused the token ({why}): copy it again from @BotFather")
    return "@" + str(body["result"].get("username", "?"))


async def telegram_first_sender(base: str, token: str, wait: float, proxy: str = "") -> tuple[int, str] | None:
    """The id and name of the first person who writes to the bot in private (getUpdates, nothing
    confirmed: the gateway answers that message later as any other)."""
    import httpx

    deadline = time.monotonic() + wait
    async with _telegram_http(proxy, 40) as http:
        while time.monotonic() < deadline:
            try:
                resp = await http.get(f"{base}{token}/getUpdates", params={"timeout": "5"})
                body = resp.json()
            except (httpx.HTTPError, ValueError, OSError):
                await asyncio.sleep(1)
                continue
            for update in body.get("result") or () if isinstance(body, dict) else ():
                msg = update.get("message") or {}
                if (msg.get("chat") or {}).get("type") == "private" and msg.get("from"):
                    who = msg["from"]
                    return int(who["id"]), str(who.get("first_name") or who.get("username") or who["id"])
    return None
