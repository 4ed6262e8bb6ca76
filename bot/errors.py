"""Errors of the gateway layer, rooted in memory's MemgateError."""

from memory.errors import LLMError, MemgateError, StoreError, StoreLockedError, StoreWriteError

__all__ = ["ChannelError", "ConfigError", "LLMError", "MediaError", "MemgateError", "StoreError",
           "StoreLockedError", "StoreWriteError"]


class ConfigError(MemgateError):
    """The configuration file or environment holds an unknown, mistyped or conflicting key."""


class ChannelError(MemgateError):
    """A channel could not start, or a platform call failed.

    The outbox decides from these two fields what to do with a reply that did not go out:
    `permanent` (blocked by the user, chat gone, message refused as such) is recorded and never
    retried; anything else is retried with backoff, no sooner than `retry_after` seconds when
    the platform said how long to wait (a 429's retry_after).
    """

    def __init__(self, message: str, *, retry_after: float | None = None, permanent: bool = False) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.permanent = permanent


class MediaError(MemgateError):
    """An attachment could not be fetched. `too_large`: over the cap (retrying cannot help);
    `size`: its size in bytes when the platform said it, None when only the cap is known (a
    download abandoned as it passed the cap: what was announced is not what came)."""

    def __init__(self, message: str, *, too_large: bool = False, size: int | None = None) -> None:
        super().__init__(message)
        self.too_large = too_large
        self.size = size
