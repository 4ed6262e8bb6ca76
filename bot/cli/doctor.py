"""`memgate doctor`: check the extensions, the embedding model, the database and the LLM, one line
each, and say what to run or change for each that fails."""

from __future__ import annotations

import argparse
import getpass
from datetime import UTC, datetime
from pathlib import Path

from bot.cli.doctor_llm import model_lines, start_model_check
from bot.cli.run import NO_LLM_TEXT, dashboard_url
from bot.errors import StoreLockedError
from bot.model_servers import check_models
from bot.settings import Settings
from memory.private_files import loose_paths


def cmd_doctor(settings: Settings, args) -> int:
    """Each check on its own line, ok or FAIL with the fix; exit 1 when any failed."""
    problems = 0
    check_models(settings)  # a model name litellm cannot route: one line naming the key (exit 2)
    # The model is asked first, in a thread: waiting on it overlaps the embedder's and the store's work.
    model_check = start_model_check(settings) if settings.llm_configured else None

    def report(ok: bool, what: str, fix: str = "") -> None:
        nonlocal problems
        print(f"[{'ok' if ok else 'FAIL'}] {what}" + ("" if ok else f"\n       fix: {fix}"))
        problems += 0 if ok else 1

    # First, as found: opening the store below makes the database's own files private again.
    loose = loose_paths(settings.data_path, _database_files(settings))
    if loose:
        shown = ", ".join(f"{p} ({mode:o})" for p, mode in loose[:5]) + (f" and {len(loose) - 5} more" if len(loose) > 5 else "")
        report(False, f"open to other accounts on this machine: {shown}",
               f"chmod -R go-rwx {settings.data_path}" + "".join(f" {p}" for p, _ in loose
                                                                 if settings.data_path not in p.parents
                                                                 and p != settings.data_path))
    else:
        report(True, f"the data folder {settings.data_path} and the database are private to {getpass.getuser()}")
    from memory.store.connection import connect

    try:
        con = connect(":memory:")
        con.execute("SELECT array_inner_product([1.0, 0.0]::FLOAT[2], [1.0, 0.0]::FLOAT[2]), stem('running', 'porter')")
        con.close()
        report(True, "DuckDB vss and fts extensions load from their packages")
    except Exception as exc:
        report(False, f"DuckDB extensions: {exc}", "pip install duckdb==1.5.5 duckdb-extension-vss==1.5.5 duckdb-extension-fts==1.5.5")
    try:
        from bot.model_clients import make_embedder

        emb = make_embedder(settings)
        vec = emb.embed_query("hello")
        report(len(vec) == emb.dim, f"embedding model {emb.name} ({emb.dim}-d)")
    except Exception as exc:
        report(False, f"embedding model: {exc}", "check [embedding] in the config")
    try:
        from bot.app import open_store

        store = open_store(settings)
        store.write(lambda c: store.meta_set(c, "doctor", datetime.now(UTC).isoformat()))
        store.close()
        report(True, f"database {settings.store_url} is writable")
    except StoreLockedError as exc:
        report(True, f"database in use by a running gateway ({exc})")
    except Exception as exc:
        report(False, f"database {settings.store_url}: {exc}", "check data_dir (or [store] url) and its permissions")
    address = _api_address(settings) if settings.api.enabled else None
    report(True, _dashboard_line(settings, address))
    report(True, _mcp_line(settings, address))
    if not settings.llm_configured:
        report(False, "no LLM configured", NO_LLM_TEXT.replace("\n", "\n       "))
    else:
        model_check.join()
        for ok, what, fix in model_lines(settings, model_check):
            report(ok, what, fix)
    report(True, _media_line(settings))
    print("all good" if not problems else f"{problems} problem(s)")
    return 1 if problems else 0


def _api_address(settings: Settings) -> tuple[str, bool]:
    """The API's address and whether a gateway serves it now: the running gateway's, else where
    `memgate run` will listen."""
    from bot.operator.gateway_client import find_gateway

    client = find_gateway(settings.data_path)
    if client is not None:
        return client.url, True
    a = settings.api
    host = "127.0.0.1" if a.host in ("", "0.0.0.0", "::") else a.host
    return f"http://{host}:{a.port or 'PORT'}", False


def _media_line(settings: Settings) -> str:
    """What becomes of voice notes and photos with this configuration (docs/media.md)."""
    from bot.model_servers import shown_address

    sp = settings.speech
    voice = (f"voice notes are transcribed by {sp.model} at {shown_address(sp.api_base, sp.model)}" if sp.model else
             "voice notes wait for a speech endpoint ([speech] model); WeChat's own transcripts are used meanwhile")
    vision = settings.media.vision
    photos = {"on": "photos go to the reply model as images", "off": "photos reach the model as their caption",
              "auto": "photos go to the reply model as images when litellm says it sees"}[vision]
    return f"{voice}; {photos} ([media] vision = {vision})"


def _dashboard_line(settings: Settings, address: tuple[str, bool] | None) -> str:
    """Where the dashboard is: the running gateway's address, else where `memgate run` will serve it."""
    if address is None:
        return "the API and dashboard are off ([api] enabled = false)"
    url, running = address
    if running:
        return f"dashboard at {dashboard_url(settings, url)} (served by the running gateway)"
    return f"dashboard at {dashboard_url(settings, url)} once `memgate run` is up" + \
        (" (port 0: any free port, printed at start)" if not settings.api.port else "")


def _mcp_line(settings: Settings, address: tuple[str, bool] | None) -> str:
    """Where other agents reach the memory (docs/mcp.md)."""
    if address is None:
        return "MCP for other agents: `memgate mcp` (stdio); no /mcp while the API is off"
    return f"MCP for other agents: `memgate mcp` (stdio), or {dashboard_url(settings, address[0])}mcp " \
        "(streamable HTTP, an API key as Bearer); docs/mcp.md"


def _database_files(settings: Settings) -> list[Path]:
    """The DuckDB file and its WAL, wherever `[store] url` puts them (none for PostgreSQL)."""
    from memory.store.url import parse_store_url

    url = parse_store_url(settings.store_url)
    if url.backend != "duckdb" or str(url.path) == ":memory:":
        return []
    db = Path(url.path)
    return [db, db.with_name(db.name + ".wal")]


def add_doctor(sub: argparse._SubParsersAction) -> None:
    """`memgate doctor`."""
    sub.add_parser("doctor", help="check the installation").set_defaults(func=cmd_doctor)
