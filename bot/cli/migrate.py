"""`memgate migrate --from URL --to URL` (copy the database to another, resumable) and `memgate
reembed` (every memory again with the configured embedding model): the data moved whole."""

from __future__ import annotations

import argparse
import sys

from bot.cli.progress import ProgressBar
from bot.cli.reach import open_operator
from bot.settings import Settings


def cmd_reembed(settings: Settings, args) -> int:
    """Re-embed every memory with the configured model (through a running gateway: with its model)."""
    with open_operator(settings) as op, ProgressBar() as bar:
        n, model = op.reembed(progress=bar.update)
    print(f"re-embedded {n} memories with {model}")
    return 0


def cmd_migrate(settings: Settings, args) -> int:
    """`memgate migrate --from URL --to URL`: copy every table, resumable; counts checked at the end."""
    from bot.app import open_store
    from memory.store.migrate import check_urls, copy_store

    bars: dict[str, ProgressBar] = {}
    seen: dict[str, int] = {}

    def progress(table: str, done: int, total: int) -> None:
        if not total:
            return  # an empty table: no bar
        if table not in bars:
            for b in bars.values():
                b.__exit__()
            bars[table] = ProgressBar(total, desc=table, unit="row", tty_only=True)
            seen[table] = 0
        bars[table].update(done - seen[table])
        seen[table] = done

    def at(where) -> Settings:  # the same settings (migrations, password, dim) on another database
        return settings.model_copy(update={"store": settings.store.model_copy(update={"url": str(where)})})

    src, dst = check_urls(args.source, args.target)
    with open_store(at(src)) as source, open_store(at(dst)) as target:
        try:
            result = copy_store(source, target, str(src), batch=args.batch, progress=progress)
        finally:
            for b in bars.values():
                b.__exit__()
    width = max([len(c.table) for c in result.counts] + [5])
    print(f"{'table':<{width}} | {'source':>9} | {'target':>9} | ok")
    for c in result.counts:
        print(f"{c.table:<{width}} | {c.source:>9} | {c.target:>9} | {'yes' if c.ok else 'NO'}")
    bad = [c.table for c in result.counts if not c.ok]
    if bad:
        print(f"memgate: the row counts differ in {', '.join(bad)}: the target is not a complete copy", file=sys.stderr)
        return 1
    rate = f", {result.copied / result.copy_s:.0f} rows/s" if result.copied and result.copy_s else ""
    print(f"migrated {sum(c.target for c in result.counts)} rows ({result.copied} copied by this run in "
          f"{result.copy_s:.1f} s{rate}; indexes and keyword index {result.finish_s:.1f} s)")
    return 0


def add_reembed(sub: argparse._SubParsersAction) -> None:
    """`memgate reembed`."""
    sub.add_parser("reembed", help="re-embed every memory with the configured model").set_defaults(func=cmd_reembed)


def add_migrate(sub: argparse._SubParsersAction) -> None:
    """`memgate migrate --from URL --to URL [--batch N]`."""
    mg = sub.add_parser("migrate", help="copy the database to another (DuckDB -> PostgreSQL), resumable")
    mg.add_argument("--from", dest="source", required=True, help="duckdb:///path.duckdb or postgresql://user@host/db")
    mg.add_argument("--to", dest="target", required=True, help="an empty database (password: MEMGATE_STORE_PASSWORD)")
    mg.add_argument("--batch", type=int, default=2000, help="rows per transaction (default 2000)")
    mg.set_defaults(func=cmd_migrate)
