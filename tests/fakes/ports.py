"""A loopback port: the address of a server that is down, or one for a server about to start."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port on 127.0.0.1 nobody listens on now (bound, then released): a connection is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
