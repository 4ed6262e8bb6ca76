"""The model servers people run on their own machine (Ollama, llama.cpp, vLLM): where each one
listens, how to find it and its models, and what to run when it is not there.

Used by `memgate onboard` (detection), by the agent's log line and by `memgate doctor` (the
hint). The address shown to people never carries credentials (user:password@ or a key in the
query string are dropped).
"""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit


@dataclass(frozen=True, slots=True)
class LocalServer:
    """One kind of local model server and its usual place."""

    name: str
    port: int
    models_path: str      # the listing that tells it is there (and which models it has)
    start: str            # the command that starts it
    pull: str             # the command that gets a model ({model} is filled in)


OLLAMA = LocalServer("Ollama", 11434, "/api/tags", "ollama serve", "ollama pull {model}")
LLAMA_CPP = LocalServer("llama.cpp", 8080, "/v1/models", "llama-server -m MODEL.gguf --port 8080",
                        "download a .gguf model and pass it with -m")
VLLM = LocalServer("vLLM", 8000, "/v1/models", "vllm serve {model} --port 8000", "vllm serve downloads {model} itself")
KNOWN_SERVERS: tuple[LocalServer, ...] = (OLLAMA, LLAMA_CPP, VLLM)


@dataclass(frozen=True, slots=True)
class FoundServer:
    """A server that answered its model listing."""

    server: LocalServer | None        # None: an OpenAI-compatible server at an address we were given
    api_base: str                     # what goes into [llm] api_base (the OpenAI-compatible root)
    models: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.server.name if self.server else 'OpenAI-compatible server'} at {self.api_base}"


def shown_address(api_base: str, model: str) -> str:
    """The address a failed call went to, safe to show: no credentials, no query string."""
    if not api_base:
        provider = model.split("/", 1)[0] if "/" in model else "openai"
        return f"{provider} (model {model})"
    parts = urlsplit(api_base.strip())
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def route_problem(model: str, api_base: str) -> str | None:
    """Why litellm cannot route this model (no provider in the name and no address), or None.

    With an address every name is routed (memory/model_route.py: the server's own id through the
    openai protocol, or as written when it starts with a provider litellm knows), and litellm is
    not imported for it (its import is seconds of the start-up); without one, litellm is asked."""
    if api_base:
        return None
    from memory.llm import import_litellm
    from memory.model_route import route_problem as litellm_route_problem

    return litellm_route_problem(import_litellm(), model, None)


def check_models(settings) -> None:
    """Refuse at start a model name litellm cannot route: one line naming the key, not a turn
    that fails 25 s later with "not answering". Nothing to check when no model is configured."""
    from bot.errors import ConfigError

    c, m = settings.llm, settings.memory
    if not settings.llm_configured:
        return
    for key, env, model, api_base, base in (
            ("llm.model", "MEMGATE_LLM_MODEL", c.model, c.api_base, "llm.api_base"),
            ("llm.memory_model", "MEMGATE_LLM_MEMORY_MODEL", c.memory_model, c.api_base, "llm.api_base"),
            ("memory.llm_model", "MEMGATE_MEMORY_LLM_MODEL", m.llm_model, m.llm_api_base, "memory.llm_api_base")):
        if key != "llm.model" and not model:
            continue
        problem = route_problem(model, api_base)
        if problem:
            raise ConfigError(f"'{key}' ({env}) = {model!r} names no provider litellm knows (litellm: {problem}): "
                              + route_fix(model, base))


def route_fix(model: str, base: str = "llm.api_base") -> str:
    """What to change when litellm cannot route a model name (a config problem, no server to blame);
    `base` is the key of the address that name goes with."""
    return (f"write it with its provider, e.g. openai/gpt-4o-mini or ollama/{bare_model(model) or 'qwen2.5'}, or set "
            f"{base} (MEMGATE_{base.replace('.', '_').upper()}) to your OpenAI-compatible server, e.g. "
            "http://127.0.0.1:11434/v1")


def is_local(api_base: str, model: str = "") -> bool:
    """The model runs on this machine (a loopback address, or litellm's ollama/ default)."""
    if not api_base:
        return model.startswith(("ollama/", "ollama_chat/"))
    host = urlsplit(api_base).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bare_model(model: str) -> str:
    """The server's own model name: `openai/qwen2.5` and `ollama/qwen2.5` are `qwen2.5` to Ollama."""
    for prefix in ("openai/", "ollama/", "ollama_chat/", "hosted_vllm/"):
        if model.startswith(prefix):
            return model[len(prefix):]
    return model


def down_hint(api_base: str, model: str) -> str:
    """One line: what to run when the model at this address does not answer."""
    name = bare_model(model) or "MODEL"
    if is_local(api_base, model):
        port = urlsplit(api_base).port if api_base else OLLAMA.port
        known = next((s for s in KNOWN_SERVERS if s.port == port), None)
        if name.lower().endswith(".gguf"):  # a GGUF's path is llama.cpp's id for its model, whatever the port
            how = f"start llama.cpp with `llama-server -m {name} --port {port}`"
        elif known is not None and known is not OLLAMA:
            how = f"start {known.name} with `{known.start.format(model=name)}`"
        else:
            how = f"for Ollama start it with `{OLLAMA.start}` and get the model with `{OLLAMA.pull.format(model=name)}`"
        return (f"is the model server at {shown_address(api_base, model)} running? {how}; "
                f"`memgate doctor` checks it again")
    return (f"check the address, the model name ({model}) and its key in MEMGATE_LLM_API_KEY; "
            f"`memgate doctor` checks it again")


async def probe(api_base: str, *, timeout: float = 1.5, server: LocalServer | None = None) -> FoundServer | None:
    """The server at `api_base` and its models, or None when nothing answers there.

    Ollama is asked for /api/tags at its root; every other server for /models under its
    OpenAI-compatible root."""
    import aiohttp

    root = api_base.rstrip("/")
    if server is OLLAMA:
        url, openai_base = root.removesuffix("/v1") + OLLAMA.models_path, root.removesuffix("/v1") + "/v1"
    else:
        url, openai_base = root + "/models", root
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as http:
            async with http.get(url) as resp:
                if resp.status != 200:
                    return None
                body = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError, OSError):
        return None
    if not isinstance(body, dict):
        return None
    items = body.get("models") if server is OLLAMA else body.get("data")
    names = tuple(str(m.get("name") or m.get("id") or m.get("model")) for m in items or () if isinstance(m, dict))
    return FoundServer(server, openai_base, tuple(n for n in names if n and n != "None"))


async def detect(extra: tuple[str, ...] = (), host: str = "127.0.0.1") -> list[FoundServer]:
    """Every known server on its usual loopback port, plus the given addresses, that answers."""
    tries = [probe(f"http://{host}:{s.port}" + ("" if s is OLLAMA else "/v1"), server=s) for s in KNOWN_SERVERS]
    tries += [probe(a) for a in extra]
    return [f for f in await asyncio.gather(*tries) if f is not None]
