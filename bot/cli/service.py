"""`memgate service install [--user] | uninstall | status`: memgate always on, as a systemd service
(the unit itself is bot.cli.systemd's)."""

from __future__ import annotations

import argparse
import getpass
import os

from bot.settings import Settings


def cmd_service(settings: Settings, args) -> int:
    """memgate as a systemd service (bot/cli/systemd.py)."""
    from bot.cli import systemd

    place = systemd.unit_place(args.user, args.unit_dir)
    if args.action == "install":
        config = systemd.config_for_service(args.config)
        settings.data_path.mkdir(parents=True, exist_ok=True)
        text = systemd.render_unit(systemd.memgate_command(), config, user=args.user,
                                   run_as=os.environ.get("SUDO_USER") or getpass.getuser(), workdir=settings.data_path,
                                   writable=systemd.store_folder(settings.store_url))
        lines = systemd.install(place, text, start=not args.no_start)
    elif args.action == "uninstall":
        lines = systemd.uninstall(place)
    else:
        lines = systemd.status(place)
    print("\n".join(lines))
    return 0


def add_service(sub: argparse._SubParsersAction) -> None:
    """`memgate service install|uninstall|status [--user] [--unit-dir DIR] [--no-start]`."""
    sv = sub.add_parser("service", help="run memgate always-on as a systemd service")
    sv.add_argument("action", choices=["install", "uninstall", "status"],
                    help="install (write, enable and start the unit), uninstall, or status")
    sv.add_argument("--user", action="store_true", help="a user service (~/.config/systemd/user), no root needed")
    sv.add_argument("--unit-dir", metavar="DIR",
                    help="write the unit here instead (also $MEMGATE_SYSTEMD_DIR); systemctl is then not called")
    sv.add_argument("--no-start", action="store_true", help="install: enable it for the next boot, do not start it now")
    sv.set_defaults(func=cmd_service)
