"""`memgate keys create|list|revoke`: HTTP API keys, each for one space (or admin); a key is printed once."""

from __future__ import annotations

import argparse
import sys

from bot.cli.reach import open_operator
from bot.settings import Settings


def cmd_keys(settings: Settings, args) -> int:
    """API keys: create (printed once), list, revoke."""
    from bot.access.api_key_views import format_keys, parse_duration

    with open_operator(settings) as op:
        if args.action == "list":
            print(format_keys(op.keys(), op.now()))
        elif args.action == "revoke":
            rec = op.revoke_key(args.prefix)
            print(f"revoked {rec.prefix}… ({rec.scope}, {rec.space_id or 'admin'})")
        else:
            scope = "admin" if args.admin else args.scope
            expires = parse_duration(args.expires) if args.expires else None
            key, rec = op.create_key(scope, args.space, args.user, expires, args.name)
            print(key)
            print(f"(shown once; {rec.scope} key for {rec.space_id or 'the admin routes'}, prefix {rec.prefix})",
                  file=sys.stderr)
    return 0


def add_keys(sub: argparse._SubParsersAction) -> None:
    """`memgate keys create (--user NAME | --space ID | --admin) | list | revoke PREFIX`."""
    k = sub.add_parser("keys", help="API keys (hashed; a key is printed once, at creation)")
    ksub = k.add_subparsers(dest="action", required=True)
    kc = ksub.add_parser("create", help="create a key and print it once")
    who = kc.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", help="the person whose space the key reaches (channel:id or display name)")
    who.add_argument("--space", help="the space id the key reaches")
    who.add_argument("--admin", action="store_true", help="an admin key: the admin routes, no space")
    kc.add_argument("--scope", choices=["read", "write"], default="read", help="read (default) or write")
    kc.add_argument("--expires", help="lifetime such as 30d, 12h, 2w, 90m (default: never)")
    kc.add_argument("--name", help="a note to tell keys apart in `keys list`")
    ksub.add_parser("list", help="every key: prefix, scope, space, state, expiry (never the key)")
    kr = ksub.add_parser("revoke", help="revoke the key whose prefix starts with PREFIX")
    kr.add_argument("prefix", help="the key's prefix as `keys list` shows it (mg_...)")
    k.set_defaults(func=cmd_keys)
