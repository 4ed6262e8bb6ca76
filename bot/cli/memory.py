"""`memgate memory search|list|export|import|erase`: the same lines through a running gateway or on the database."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bot.cli.progress import ProgressBar
from bot.cli.reach import open_operator
from bot.settings import Settings
from memory.private_files import open_private

KINDS = ("fact", "chunk", "task", "skill")

def format_memory_line(m) -> str:
    """One line of `memory search` (with its score) or `memory list`."""
    if m.score is not None:
        return f"{m.score:.2f}  [{m.id}] ({m.kind}, {m.space_id}, {m.created_at:%Y-%m-%d}) {m.text[:200]}"
    return f"[{m.id}] ({m.kind}, {m.space_id}, {m.created_at:%Y-%m-%d}){' pinned' if m.pinned else ''} {m.text[:200]}"


def cmd_memory(settings: Settings, args) -> int:
    """search, list, export, import, erase: through the running gateway when there is one, the same lines either way."""
    if args.action == "list" and args.kind is None:
        args.kind = list(KINDS)
    if args.action == "import":
        try:
            lines = Path(args.file).read_bytes().split(b"\n")
        except OSError as exc:
            print(f"memgate: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    with open_operator(settings) as op:
        if args.action == "search":
            found = op.search(" ".join(args.query), args.space, args.limit, user=args.user)
            for m in found:
                print(format_memory_line(m))
            if not found:
                print("nothing found")
        elif args.action == "list":
            listed = op.list(args.space, args.kind, args.limit, user=args.user)
            for m in listed:
                print(format_memory_line(m))
            if not listed:
                print("no memories")
        elif args.action == "export":
            _export(op, args)
        elif args.action == "erase":
            return _erase(op, args)
        else:
            return _import(op, args, lines)
    return 0


def _export(op, args) -> None:
    lines = op.export(args.space, args.user)  # an unknown --user is refused before the file is made
    out = open_private(args.file) if args.file != "-" else sys.stdout  # someone's memories: 0600
    try:
        with ProgressBar() as bar:
            for line in lines:
                out.write(line)
                if out is not sys.stdout:
                    bar.update(1)
    finally:
        if out is not sys.stdout:
            out.close()


def _erase(op, args) -> int:
    """`memgate memory erase --user NAME | --space ID [--yes]`: show what goes, ask (or --yes), erase."""
    from bot.access.erase_views import plan_text

    planned = op.erase_plan(args.space, args.user)
    print(plan_text(planned))
    if not args.yes:
        if not sys.stdin.isatty():
            print("nothing erased: run again with --yes to erase it", file=sys.stderr)
            return 1
        answer = input("Type 'erase' to erase all of it for good: ").strip().lower()
        if answer != "erase":
            print("nothing erased")
            return 1
    done = op.erase(args.space, args.user)
    print(plan_text(done))
    return 0


def _import(op, args, lines: list[bytes]) -> int:
    """`memgate memory import FILE [--user NAME | --space ID]`: idempotent, bad lines reported by number."""
    with ProgressBar(sum(1 for line in lines if line.strip())) as bar:
        summary = op.import_lines(lines, args.space, args.user, source=args.file, progress=bar.update,
                                  on_bad=lambda n, reason: bar.write(f"{args.file}: line {n}: {reason} (skipped)"))
    print(f"imported {summary.added} memories ({summary.present} already present, {len(summary.bad)} bad lines skipped)")
    return 1 if summary.bad else 0


def add_memory(sub: argparse._SubParsersAction) -> None:
    """`memgate memory search|list|export|import|erase`, each for one --user or --space (default: every space)."""
    m = sub.add_parser("memory", help="search, list, export, import or erase memories")
    msub = m.add_subparsers(dest="action", required=True)
    s = msub.add_parser("search", help="hybrid search, best first, with scores")
    s.add_argument("query", nargs="+", help="what to look for (several words are one query)")
    s.add_argument("--limit", type=int, default=10, help="at most this many results (default 10)")
    ls = msub.add_parser("list", help="the newest memories of every kind")
    ls.add_argument("--kind", action="append", default=None, choices=list(KINDS),
                    help="only this kind (repeat for several; default: every kind, messages included)")
    ls.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    ex = msub.add_parser("export", help="one JSON line per live memory")
    ex.add_argument("file", nargs="?", default="-", help="write to this file (default: - for standard output)")
    im = msub.add_parser("import", help="import an export (ids kept: running it again adds nothing)")
    im.add_argument("file", help="a file written by memgate memory export")
    er = msub.add_parser("erase", help="erase a person: every memory, message, task, skill, reminder and file of "
                                       "their space; they become a stranger (groups keep their own memory)")
    er.add_argument("--yes", action="store_true", help="erase without asking (the plan is still printed)")
    for sp in (s, ls, ex, im, er):
        who = sp.add_mutually_exclusive_group(required=sp is er)
        who.add_argument("--user", help="the person (as in memgate chat --user NAME, or channel:id)")
        who.add_argument("--space", help="a space id")
    m.set_defaults(func=cmd_memory)
