"""`memgate jobs`: the background jobs' schedule, last run, duration and last error."""

from __future__ import annotations

import argparse

from bot.cli.reach import open_operator
from bot.settings import Settings


def cmd_jobs(settings: Settings, args) -> int:
    """Print the jobs as /jobs shows them in chat (the running gateway's, else the database's record)."""
    from bot.job_views import format_jobs

    with open_operator(settings) as op:
        print(format_jobs(op.jobs()))
    return 0


def add_jobs(sub: argparse._SubParsersAction) -> None:
    """`memgate jobs`."""
    sub.add_parser("jobs", help="background jobs").set_defaults(func=cmd_jobs)
