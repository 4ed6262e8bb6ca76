"""The typed keys of the API's shared state: what the app holds (`web.AppKey`) and what auth
puts on each request (`web.RequestKey`). Handlers read these, never string keys."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from aiohttp import web

from bot.access.policy import Access
from bot.access.pairing import Pairing
from bot.access.api_keys import ApiKey, Keys
from bot.access.erasure import EraseCodes
from bot.api.attached import AttachedTerminals
from bot.api.metrics import Metrics
from bot.api.ratelimit import RateLimiter, StreamSlots
from bot.api.sessions import Sessions
from bot.reminders.desk import ReminderDesk
from memory.engine import MemoryEngine
from memory.tasks.skill_library import SkillLibrary

API_KEY = web.RequestKey("api_key", ApiKey)
KEYS = web.AppKey("keys", Keys)
LIMITER = web.AppKey("limiter", RateLimiter)
LOGINS = web.AppKey("login_limiter", RateLimiter)  # dashboard logins, per presented key and per client
SESSIONS = web.AppKey("sessions", Sessions)          # dashboard logins (cookie -> key)
ENGINE = web.AppKey("engine", MemoryEngine)
METRICS = web.AppKey("metrics", Metrics)
CLOCK = web.AppKey("clock", Callable[[], datetime])
IMPORTS = web.AppKey("imports", set)                 # running import tasks, awaited on cleanup
INSIGHT_CACHE = web.AppKey("insight_cache", dict)    # (space, limit) -> (space fingerprint, graph JSON)
ERASE_CODES = web.AppKey("erase_codes", EraseCodes)  # DELETE /api/v1/me's confirmations, per key
STREAMS = web.AppKey("streams", StreamSlots)         # the chat event streams each key holds open


@dataclass(frozen=True, slots=True)
class ApiHost:
    """The parts of the running bot the API reads or drives (built by the composition root)."""

    access: Access
    pairing: Pairing
    skills: SkillLibrary
    public_space: str
    channels: Callable[[], dict[str, bool]]           # channel name -> up
    job_statuses: Callable[[], list] = list           # the scheduler's jobs (bot.scheduler.JobStatus)
    flush_usage: Callable[[], Awaitable[int]] | None = None  # so /usage sees the latest LLM calls
    # The gateway's outbound path for a chat other than the one answered (channel, chat, recipient, text).
    tell: Callable[[str, str, str, str], Awaitable[None]] | None = None
    # Terminals attached over the API (`memgate chat` while the gateway runs): the gateway's console channel.
    chats: AttachedTerminals | None = None
    key_chats: AttachedTerminals | None = None        # the same, attached with a space key
    bot_name: str = "memgate"                         # how replies are signed in an attached terminal
    commands: tuple[str, ...] = ()                    # what Tab completes after "/" there
    # Stops the turn in flight in a chat (channel, chat id) -> whether one was: an attached terminal's Ctrl-C.
    cancel: Callable[[str, str], Awaitable[bool]] | None = None
    reminders: ReminderDesk | None = None             # set, list and cancel reminders (bot/reminders)


HOST = web.AppKey("host", ApiHost)


@dataclass(slots=True)
class LocalToken:
    """The gateway's own admin token while it is published in api.token (set by ApiServer): the
    gateway proves it holds it to the CLI (bot.gateway_client.gateway_proof), never shows it."""

    key: str | None = None


LOCAL_TOKEN = web.AppKey("local_token", LocalToken)
