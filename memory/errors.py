"""The root of memgate's exception tree (memory/ is the bottom layer, so the root lives here)."""


class MemgateError(Exception):
    """Base of every error memgate raises on purpose."""


class StoreError(MemgateError):
    """The database could not be opened, migrated or written."""


class StoreWriteError(StoreError):
    """A write could not be committed (disk full, I/O error); the same write may work later."""


class StoreUnavailableError(StoreWriteError):
    """The database server could not be reached or refused the work (down, restarting, in
    recovery): nothing was read or written, and the same work may succeed later. A subclass of
    StoreWriteError so that every caller that holds work back while the store refuses writes does
    the same while it cannot be read."""


class StoreLockedError(StoreError):
    """Another process (usually a running gateway) holds the database file."""


class LLMError(MemgateError):
    """An LLM call failed after its retries, or answered with something unusable."""


class ModelNotRouted(LLMError):
    """litellm cannot route the configured model name (no provider it knows, no address): a
    configuration problem; no request was sent, so no server is to blame."""


class ModelUnreachable(LLMError):
    """Nothing answered at the model's address (connection refused, no such host): an outage or
    a wrong address, which a retry a second later does not heal."""


class ModelTurnedDown(LLMError):
    """The model's server answered the call with a refusal a retry does not heal: no such model
    there (404), the key refused (401/403), or a request it calls bad (400)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ModelSilent(LLMError):
    """The model server took the call and sent no first token in time (`first_token_timeout`)."""

    def __init__(self, message: str, seconds: float) -> None:
        super().__init__(message)
        self.seconds = seconds


class ModelStopped(LLMError):
    """The model call was not made, or was cut, because memgate is stopping (or the gate in front
    of the model was closed): the work it was for stays queued for the next start."""


class ModelTimedOut(LLMError):
    """The call took longer than its `timeout`. On a local server with one slot the same call
    takes as long again, so background work asks for less (memory.ingest.turn_call) rather than
    the same again."""


class EmbeddingError(MemgateError):
    """The embedding provider failed or returned vectors of the wrong shape."""
