"""Which litellm model name a configured model is called by, given the address it is at.
(`lib` below is litellm itself, as memory/llm.py's import_litellm gives it.)

A model server lists its models by its own ids: llama.cpp the GGUF's path
(`/models/SmolLM2-135M-Instruct.Q4_1.gguf`), vLLM a Hugging Face id (`Qwen/Qwen2.5-7B-Instruct`),
Ollama `qwen2.5:7b`. litellm reads the part of a name before the first "/" as its provider, so
with an address (`[llm] api_base`, an OpenAI-compatible server) such an id is sent through the
openai protocol as it is (`openai/` + id); a name whose first part is a provider litellm knows
(`openai/gpt-4o` at a proxy, `hosted_vllm/...`, `anthropic/...`) is used as written. Which
first parts are providers is litellm's own list, never a guess from the "/".

One exception: `ollama/NAME` at an address ending in /v1 (Ollama's OpenAI-compatible root, the
one memgate's README gives) is `openai/NAME` there; litellm's Ollama protocol would call
/v1/api/generate, which Ollama does not have.
"""

from __future__ import annotations

from collections.abc import Collection
from functools import cache
from urllib.parse import urlsplit

# litellm's providers that speak Ollama's own protocol (/api/generate, /api/chat at the root).
_OLLAMA_PROTOCOL = ("ollama", "ollama_chat")


def litellm_model(model: str, api_base: str | None, providers: Collection[str]) -> str:
    """The name litellm is called with for `model` at `api_base` (none: litellm's own routing)."""
    if not api_base:
        return model
    head, slash, rest = model.partition("/")
    if not slash or head not in providers:
        return f"openai/{model}"
    if head in _OLLAMA_PROTOCOL and urlsplit(api_base).path.rstrip("/").endswith("/v1"):
        return f"openai/{rest}"
    return model


def listed_name(model_id: str, providers: Collection[str]) -> str:
    """What to configure for a model the server lists as `model_id`, so that exactly that id is
    sent: the id itself, unless its first part reads as a litellm provider (vLLM serving
    `openai/gpt-oss-20b` would otherwise be asked for `gpt-oss-20b`)."""
    head, slash, _ = model_id.partition("/")
    return f"openai/{model_id}" if slash and head in providers else model_id


@cache
def litellm_providers(lib) -> frozenset[str]:
    """The provider names of `lib` (litellm, imported by memory/llm.py's import_litellm)."""
    return frozenset(str(getattr(p, "value", p)) for p in lib.provider_list)


def route_problem(lib, model: str, api_base: str | None) -> str | None:
    """Why litellm cannot route `model` (one short line, litellm's words), or None. No network."""
    try:
        lib.get_llm_provider(model=litellm_model(model, api_base, litellm_providers(lib)), api_base=api_base or None)
    except Exception as exc:  # litellm raises BadRequestError("LLM Provider NOT provided ...") and others
        return str(exc).split("\n", 1)[0].removeprefix("litellm.BadRequestError: ").split(". ", 1)[0][:120]
    return None


def sent_name(lib, model: str, api_base: str | None) -> str:
    """The model name the server receives for `model` at `api_base` (litellm strips its provider)."""
    routed = litellm_model(model, api_base, litellm_providers(lib))
    try:
        return str(lib.get_llm_provider(model=routed, api_base=api_base or None)[0])
    except Exception:  # routes nowhere: nothing is sent (route_problem says why)
        return routed
