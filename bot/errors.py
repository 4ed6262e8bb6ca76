"""Errors of the gateway layer, rooted in memory's MemgateError."""

from memory.errors import LLMError, MemgateError, StoreError, StoreLockedError

__all__ = ["ChannelError", "ConfigError", "LLMError", "MemgateError", "StoreError", "StoreLockedError"]


class ConfigError(MemgateError):
    """The configuration file or environment holds an unknown, mistyped or conflicting key."""


class ChannelError(MemgateError):
    """A channel could not start, or a platform refused a call we cannot retry."""
