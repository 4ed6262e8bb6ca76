"""`memgate jobs`: the background jobs' schedule, last run, duration and last error, and the ingest queue."""

from __future__ import annotations

import argparse

from bot.cli.reach import open_operator
from bot.settings import Settings


def cmd_jobs(settings: Settings, args) -> int:
    """Print the jobs as /jobs shows them in chat (the running gateway's, else the database's record), and
    the turns waiting to become memory (/healthz's queue, with the oldest one's age)."""
    from bot.job_views import format_jobs, format_queue

    with open_operator(settings) as op:
        print(format_jobs(op.jobs()))
        print(format_queue(op.queue()))
    return 0


def add_jobs(sub: argparse._SubParsersAction) -> None:
    """`memgate jobs`."""
    sub.add_parser("jobs", help="background jobs and the turns waiting to become memory").set_defaults(func=cmd_jobs)
