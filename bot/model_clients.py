"""The model clients the settings name: the reply LLM and the memory LLM, each behind the priority
gate of its model server (memory/llm_gate.py), and the embedder. Built by the composition root
(bot/app.py), and alone by `memgate doctor`, `onboard`, `mcp` and `reach` (no gate there: one
call at a time anyway).
"""

from __future__ import annotations

from bot.model_servers import is_local
from bot.settings import Settings
from bot.usage import UsageRecorder
from memory.embed import Embedder, LiteLLMEmbedder, LocalE5Embedder
from memory.llm import LiteLLM, LLMSettings
from memory.llm_gate import GatePolicy, ModelGates, default_slots, endpoint_of


def make_embedder(settings: Settings) -> Embedder:
    e, m = settings.embedding, settings.memory
    bounds = {"piece_chars": m.embed_piece_chars, "max_pieces": m.embed_max_pieces}
    if e.provider == "litellm":
        return LiteLLMEmbedder(e.model, e.dim, api_base=e.api_base or None, api_key=settings.secret("embedding_api_key"),
                               **bounds)
    return LocalE5Embedder(**bounds)


# The answer length of a memory call that names none of its own (each ingest, task and skill call
# names its own): [llm] max_tokens is the reply's, and a short one must not cut memory's JSON.
MEMORY_ANSWER_TOKENS = 1024


def make_llm(settings: Settings, recorder: UsageRecorder | None, *, memory: bool = False,
             gates: ModelGates | None = None) -> LiteLLM | None:
    """The reply LLM (or the memory LLM); None when no model is configured. With `gates`, its
    calls go through the priority gate of its server (memory/llm_gate.py): replies first."""
    c, m = settings.llm, settings.memory
    if not settings.llm_configured or (memory and not c.memory_llm):
        return None
    # The configured name as it is: memory/llm.py routes it (memory/model_route.py). A server at an
    # address with no model named answers with its own (llama.cpp has one).
    model = (c.memory_model if memory and c.memory_model else c.model) or "local"
    api_base, slots, key = c.api_base, c.concurrency, settings.secret("llm_api_key")
    if memory and m.llm_model:  # a model with its own address: the reply's key goes only where the reply's goes
        home = endpoint_of(model, api_base)
        model, api_base, slots = m.llm_model, m.llm_api_base, m.llm_concurrency
        key = settings.secret("memory_llm_api_key") or (key if endpoint_of(model, api_base) == home else None)
    gate = None
    if gates is not None:
        slots = slots or default_slots(is_local(api_base, model))
        gate = gates.gate(endpoint_of(model, api_base), GatePolicy(slots=slots, memory_share=c.memory_share))

    # A reply has a person waiting: streamed, so a silent server is told after first_token_timeout,
    # and an outage is not retried. Memory work runs in the background with its retries, except
    # after a timeout: the same call takes as long again, so it asks for less (memory.ingest.turn_call).
    # Memory calls share [llm]'s retries and temperature; their timeout is [memory] llm_timeout when set.
    timeout = (m.llm_timeout or c.timeout) if memory else c.timeout
    return LiteLLM(LLMSettings(model=model, api_base=api_base or None, api_key=key,
                               timeout=timeout, retries=c.retries, temperature=c.temperature,
                               max_tokens=MEMORY_ANSWER_TOKENS if memory else c.max_tokens,
                               first_token_timeout=None if memory else c.first_token_timeout,
                               retry_outages=memory, retry_timeouts=not memory), sink=recorder.add if recorder else None, gate=gate)
