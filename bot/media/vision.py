"""Whether the reply model takes images: `[media] vision` = on | off, or auto = litellm's
capability lookup for `[llm] model` (its model map; an OpenAI-compatible local server's model is
unknown to it, so such a setup says `vision = "on"` when its model sees)."""

from __future__ import annotations

import logging
from typing import Literal

from memory.llm import import_litellm

log = logging.getLogger(__name__)

__all__ = ["accepts_images"]


def accepts_images(setting: Literal["auto", "on", "off"], model: str) -> bool:
    if setting != "auto":
        return setting == "on"
    if not model:
        return False
    try:
        return bool(import_litellm().supports_vision(model=model))
    except Exception:  # an unknown model or provider: it is not known to see
        log.debug("litellm has no vision entry for %s", model, exc_info=True)
        return False
