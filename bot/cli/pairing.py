"""`memgate pairing list|approve CODE|deny CODE` (strangers waiting to be let in) and `memgate
public list|add|edit|forget` (the shared notes every user's recall reads): the server admin's say
over who talks to the bot and what everyone's memory shares."""

from __future__ import annotations

import argparse

from bot.cli.reach import open_operator
from bot.errors import MemgateError
from bot.operator.protocol import PUBLIC_SPACE
from bot.settings import Settings


def cmd_pairing(settings: Settings, args) -> int:
    """List the pending requests, or approve or deny one by its code."""
    with open_operator(settings) as op:
        if args.action == "list":
            pending = op.pending()
            for p in pending:
                print(f"{p.code}  {p.identity}  {p.display_name}")
            if not pending:
                print("no pending pairing requests")
        elif args.action == "approve":
            person = op.approve(args.code)
            print(f"approved {person.identity} as {person.role}")
        else:
            op.deny(args.code)
            print("denied")
    return 0


def check_pairing(args) -> str | None:
    """approve and deny need the CODE (checked before the config is read)."""
    if args.action != "list" and not args.code:
        return "memgate pairing approve|deny needs a CODE"
    return None


def cmd_public(settings: Settings, args) -> int:
    """The public space, for the server's admin: through the running gateway when there is one."""
    if args.action == "add" and args.id:
        args.words, args.id = [args.id, *args.words], None   # `add` takes text only
    words = " ".join(args.words).strip()
    if args.action == "add" and not words:
        raise MemgateError("memgate public add needs the TEXT to share")
    if args.action in ("edit", "forget") and not args.id:
        raise MemgateError(f"memgate public {args.action} needs a memory ID (see memgate public list)")
    if args.action == "edit" and not words:
        raise MemgateError("memgate public edit needs the ID and the new TEXT")
    with open_operator(settings) as op:
        if args.action == "list":
            rows = op.list(PUBLIC_SPACE, ("fact", "chunk"), args.limit)
            for r in rows:
                print(f"[{r.id}] ({r.kind}, {r.created_at:%Y-%m-%d}) {r.text[:200]}")
            if not rows:
                print("no public memories")
        elif args.action == "add":
            print(f"shared [{op.public_add(words)}]")
        elif args.action == "edit":
            new = op.public_edit(args.id, words)
            if new is None:
                raise MemgateError(f"[{args.id}] is not a public memory (see memgate public list)")
            print(f"edited [{args.id}] -> [{new}]")
        else:
            if not op.public_forget(args.id):
                raise MemgateError(f"[{args.id}] is not a public memory (see memgate public list)")
            print(f"forgot [{args.id}]")
    return 0


def add_pairing(sub: argparse._SubParsersAction) -> None:
    """`memgate pairing list|approve CODE|deny CODE`."""
    pa = sub.add_parser("pairing", help="pending DM pairing requests")
    pa.add_argument("action", choices=["list", "approve", "deny"], help="list the waiting requests, approve or deny one")
    pa.add_argument("code", nargs="?", help="the pairing code the person was given (approve, deny)")
    pa.set_defaults(func=cmd_pairing, check=check_pairing)


def add_public(sub: argparse._SubParsersAction) -> None:
    """`memgate public list|add TEXT|edit ID TEXT|forget ID`."""
    pu = sub.add_parser("public", help="list, add, edit or forget the public (shared) memories")
    pu.add_argument("action", choices=["list", "add", "edit", "forget"], help="what to do with the public memories")
    pu.add_argument("id", nargs="?", help="the memory id (edit, forget); for add, the first word of the text")
    pu.add_argument("words", nargs="*", help="the text (add, edit)")
    pu.add_argument("--limit", type=int, default=50, help="list: at most this many (default 50)")
    pu.set_defaults(func=cmd_public)
