"""Where an operator's command acts: through the running gateway's admin API when one answers
(DuckDB lets one process hold the file), else on the database directly.

The first way loads no database, embedding model or LLM library (`memgate pairing list` starts in
a blink); only the second builds the app.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from bot.settings import Settings


def open_app(settings: Settings, embedder=None):
    """The app on the database itself (no channels, nothing started): for commands that act offline.
    A loaded embedding model may be handed in (`memgate mcp` opens the database once per call)."""
    from bot.app import build_app

    return build_app(settings, embedder=embedder)


@contextmanager
def open_operator(settings: Settings) -> Iterator:
    """Through the running gateway's admin API when one answers, else on the database directly.

    Only the second imports the database, the embedding model and litellm: talking to a running
    gateway stays light (bot.operator.remote imports none of them)."""
    from bot.operator.gateway_client import find_gateway
    from bot.operator.remote import RemoteOperator

    client = find_gateway(settings.data_path)
    if client is not None:
        yield RemoteOperator(client)
        return
    from bot.access.api_keys import Keys
    from bot.model_clients import make_embedder
    from bot.operator.local import LocalOperator

    app = open_app(settings)
    scheduler = app.extras.get("scheduler")
    try:
        yield LocalOperator(app.engine, app.access, app.pairing, Keys(app.store, clock=app.clock), app.clock,
                            embedder=lambda: make_embedder(settings), job_specs=scheduler.specs if scheduler else ())
    finally:
        app.store.close()
