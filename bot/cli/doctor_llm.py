"""`memgate doctor`'s model checks: one short reply call, then the memory call the ingest worker
makes, on a sample turn, to see whether the memory model's JSON is usable; and, when the server
turns a call down, what it lists at /v1/models against the name memgate asked for.

The calls run in a thread started first (doctor's other checks run meanwhile); the lines are
made afterwards from what they raised. A message that blames the server (is it running?) is
given only when a call reached it and found nothing or silence.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from bot.settings import Settings
from memory.errors import ModelNotRouted, ModelSilent, ModelTimedOut, ModelTurnedDown, ModelUnreachable
from memory.llm_json import UnusableAnswer

# How long doctor waits for the reply model's first token: with the other checks (which run
# meanwhile) doctor ends within ~15 s whatever the model does (a server that hangs took 206 s).
MODEL_WAIT = 8.0

# The sample turn the memory call is tried on: one statement a usable answer keeps as a fact.
SAMPLE_USER = "My dog is called Brindlequix and she is three years old."
SAMPLE_ASSISTANT = "Brindlequix is a lovely name for a dog!"


@dataclass
class Outcome:
    """One call's result: what it raised (None: it worked), how long it took, what it found."""

    failure: BaseException | None = None
    seconds: float = 0.0
    facts: tuple[str, ...] = ()

    @property
    def no_such_model(self) -> bool:
        return isinstance(self.failure, ModelTurnedDown) and self.failure.status == 404


class ModelCheck(threading.Thread):
    """The reply call (no retries, MODEL_WAIT for the first token), then the memory call as the
    worker makes it (its own timeout, no retries) unless memory calls are off or the server did
    not answer the first call."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(name="doctor-model", daemon=True)
        self.settings = settings
        self.reply = Outcome()
        self.memory: Outcome | None = None
        self.listed: tuple[str, ...] = ()     # what the server lists, asked when it had no such model

    @property
    def failure(self) -> BaseException | None:
        return self.reply.failure

    def run(self) -> None:
        from bot.model_clients import make_llm

        try:
            llm = make_llm(self.settings, None)
            llm.warm()  # litellm's import and lazy first-call set-up are not the model's time
            asyncio.run(self._ping(llm))
        except BaseException as exc:  # reported as the model's line, whatever it is
            self.reply.failure = exc
            if isinstance(exc, (ModelUnreachable, ModelSilent, ModelNotRouted)):
                return  # the memory call would meet the same outage or name
        memory = make_llm(self.settings, None, memory=True)
        if memory is not None:
            self.memory = Outcome()
            try:
                asyncio.run(self._memory_call(memory, self.memory))
            except BaseException as exc:
                self.memory.failure = exc
        self.listed = self._listing()

    def _listing(self) -> tuple[str, ...]:
        from bot.model_servers import probe

        if not self.settings.llm.api_base or not any(o is not None and o.no_such_model for o in (self.reply, self.memory)):
            return ()
        found = asyncio.run(probe(self.settings.llm.api_base))
        return found.models if found is not None else ()

    async def _ping(self, llm) -> None:
        llm.settings = replace(llm.settings, retries=0, timeout=MODEL_WAIT,
                               first_token_timeout=min(MODEL_WAIT, llm.settings.first_token_timeout or MODEL_WAIT))
        await llm.complete([{"role": "user", "content": "Reply with the word OK."}], purpose="doctor", max_tokens=1)

    async def _memory_call(self, llm, out: Outcome) -> None:
        """The ingest worker's call for one turn (memory/ingest/worker.py `_process_turn`)."""
        from memory.ingest.capture import TurnMessage
        from memory.ingest.turn_call import ask_turn
        from memory.ingest.turn_prompt import TurnView

        llm.settings = replace(llm.settings, retries=0)
        now = datetime.now(UTC)
        view = TurnView.plain((TurnMessage("user", SAMPLE_USER), TurnMessage("assistant", SAMPLE_ASSISTANT)), now)
        t0 = time.monotonic()
        answer = await ask_turn(llm, view, now, purpose="doctor")
        out.seconds = time.monotonic() - t0
        out.facts = tuple(f.text.strip() for f in answer.facts if f.text.strip())


def start_model_check(settings: Settings) -> ModelCheck:
    check = ModelCheck(settings)
    check.start()
    return check


def model_lines(settings: Settings, check: ModelCheck) -> list[tuple[bool, str, str]]:
    """(ok, what, fix) for the reply model and the memory model, from a finished check."""
    from bot.model_servers import down_hint, shown_address

    c = settings.llm
    where = shown_address(c.api_base, c.model)
    lines = []
    exc = check.reply.failure
    if exc is None:
        lines.append((True, f"LLM {c.model or '(server default)'} at {where} answers", ""))
    elif isinstance(exc, ModelSilent):
        lines.append((False, f"LLM at {where} accepted the call but sent nothing within {exc.seconds:g} s",
                      "a model still loading can take longer (run doctor again); otherwise " + down_hint(c.api_base, c.model)))
    elif isinstance(exc, ModelUnreachable):
        lines.append((False, f"LLM at {where}: nothing answers there (connection refused or no such host)",
                      down_hint(c.api_base, c.model)))
    else:
        lines.append(refusal("LLM", c.model, "llm.model", settings, exc, check.listed))
    if check.memory is None:
        if not c.memory_llm:
            lines.append((True, "memory calls are off ([llm] memory_llm = false): turns are kept as they were said", ""))
        return lines
    model = settings.memory.llm_model or c.memory_model or c.model
    key = "memory.llm_model" if settings.memory.llm_model else "llm.memory_model" if c.memory_model else "llm.model"
    base = settings.memory.llm_api_base if settings.memory.llm_model else c.api_base
    where = shown_address(base, model)
    m = check.memory
    if m.failure is None and m.facts:
        lines.append((True, f"memory call: {model} gave usable JSON for a sample turn in {m.seconds:.1f} s "
                            f"(fact: {m.facts[0][:80]!r})", ""))
    elif m.failure is None:
        lines.append((False, f"memory call: {model} answered a sample turn that states a fact with no fact "
                             f"({m.seconds:.1f} s): memory would keep turns but learn nothing from them",
                      _memory_fix(settings)))
    elif isinstance(m.failure, (ModelSilent, ModelUnreachable, ModelTimedOut)) or "Timeout" in type(m.failure).__name__:
        timeout = settings.memory.llm_timeout or c.timeout
        named = "[memory] llm_timeout" if settings.memory.llm_timeout else "[llm] timeout"
        lines.append((False, f"memory call: {model} at {where} gave no answer within {timeout:g} s ({named})",
                      "a bigger timeout for a slow model ([memory] llm_timeout: memory calls alone), or "
                      + _memory_fix(settings)))
    elif isinstance(m.failure, UnusableAnswer):
        lines.append((False, f"memory call: {model}'s JSON for a sample turn is not usable ({m.failure.reason[:200]}): "
                             "every turn would be kept raw", _memory_fix(settings)))
    else:
        lines.append(refusal("memory call:", model, key, settings, m.failure, check.listed, api_base=base))
    return lines


def _memory_fix(settings: Settings) -> str:
    """Another model for memory work, under the key that names it now (setting both is refused)."""
    own = bool(settings.memory.llm_model)
    key = "[memory] llm_model (MEMGATE_MEMORY_LLM_MODEL)" if own else "[llm] memory_model (MEMGATE_LLM_MEMORY_MODEL)"
    return (f"a model that follows JSON instructions for memory work: {key}"
            + (" (set now)" if own or settings.llm.memory_model else "")
            + ", or [llm] memory_llm = false to keep turns raw without trying")


def refusal(label: str, model: str, key: str, settings: Settings, exc: BaseException,
            listed: tuple[str, ...] = (), *, api_base: str | None = None) -> tuple[bool, str, str]:
    """A call that reached the server and was refused, or failed otherwise: its reason in one
    sentence, and for a name the server does not have, what it lists instead (`listed`: its
    /v1/models, asked by the caller); `api_base`: the model's address when not [llm]'s."""
    from bot.model_servers import down_hint, shown_address

    c = settings.llm
    api_base = c.api_base if api_base is None else api_base
    where = shown_address(api_base, model)
    if isinstance(exc, ModelTurnedDown):
        from memory.prompts import TURNED_DOWN_WHY

        why = TURNED_DOWN_WHY.get(exc.status, f"status {exc.status}")
        fix = {401: "check the key in MEMGATE_LLM_API_KEY", 403: "check the key in MEMGATE_LLM_API_KEY"}.get(exc.status, "")
        if exc.status == 404 and api_base:
            fix = _listed_instead(api_base, model, key, listed) or down_hint(api_base, model)
        return False, f"{label} {model} at {where} turned the call down: {why} ({_first_sentence(exc)})", \
            fix or f"check {_named(key)} and the server's log"
    return False, f"{label} {model} at {where} failed: {_first_sentence(exc)}", down_hint(api_base, model)


def _listed_instead(api_base: str, model: str, key: str, listed: tuple[str, ...]) -> str:
    """When the server lists its models: the name memgate sent, what it lists, and what to set."""
    from memory.llm import import_litellm
    from memory.model_route import listed_name, litellm_providers, sent_name

    lib = import_litellm()
    sent = sent_name(lib, model, api_base)
    if not listed or sent in listed:
        return ""
    providers = litellm_providers(lib)
    best = model if model in listed else listed[0]
    shown = ", ".join(listed[:6]) + (" ..." if len(listed) > 6 else "")
    value = listed_name(best, providers)
    how = f"pass {key} {value!r}" if key.startswith("--") else f"set {key} = {value!r} ({_ENV[key]})"
    return f"memgate asked for {sent!r} and it lists {shown}: {how}"


# The environment variable of each model setting named in a fix.
_ENV = {"llm.model": "MEMGATE_LLM_MODEL", "llm.memory_model": "MEMGATE_LLM_MEMORY_MODEL",
        "memory.llm_model": "MEMGATE_MEMORY_LLM_MODEL"}


def _named(key: str) -> str:
    return f"{key} ({_ENV[key]})" if key in _ENV else key


def _first_sentence(exc: BaseException) -> str:
    """litellm's text without its class prefixes, cut at a sentence end, not mid-word."""
    text = " ".join(str(exc).split())
    for prefix in ("litellm.", "BadRequestError: ", "NotFoundError: ", "APIError: ", "OpenAIException - "):
        text = text.replace(prefix, "")
    if len(text) <= 200:
        return text
    cut = max(text.rfind(". ", 0, 200), text.rfind("; ", 0, 200))
    return text[:cut + 1] if cut > 60 else text[:200].rsplit(" ", 1)[0] + " ..."
