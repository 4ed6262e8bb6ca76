"""A forwarding proxy on 127.0.0.1 for tests: HTTP (CONNECT tunnels, and absolute-form requests
for plain http://) and SOCKS5 (no authentication), on one port.

It plays the part of a proxy that reaches what the machine cannot: `routes` maps the address a
client asks for to where the proxy really connects (the fake Bot API on loopback), so a test can
give the client an address that refuses it directly and answers only through the proxy.
`requests` records what each connection asked for ("CONNECT host:port", "GET http://...",
"SOCKS5 host:port")."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import struct
from urllib.parse import urlsplit


class FakeProxy:
    def __init__(self, routes: dict[tuple[str, int], tuple[str, int]] | None = None) -> None:
        self.routes = dict(routes or {})
        self.requests: list[str] = []
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._port = 0

    async def __aenter__(self) -> FakeProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self._port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        # Closing both ends of every connection ends its handler (cancelling a handler task
        # would make asyncio's stream callback log the CancelledError).
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    @property
    def port(self) -> int:
        return self._port

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}"

    def _target(self, host: str, port: int) -> tuple[str, int]:
        return self.routes.get((host, port), (host, port))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            first = await reader.readexactly(1)
            if first == b"\x05":
                await self._socks5(reader, writer)
            else:
                await self._http(first + await reader.readuntil(b"\r\n\r\n"), reader, writer)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError, ValueError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _http(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request_line, _, rest = head.partition(b"\r\n")
        method, target, version = request_line.decode("latin-1").split(" ", 2)
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            self.requests.append(f"CONNECT {target}")
            up_reader, up_writer = await asyncio.open_connection(*self._target(host.strip("[]"), int(port)))
            self._writers.add(up_writer)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await self._pipe(reader, writer, up_reader, up_writer)
            return
        # A plain http:// request in absolute form: sent on in origin form.
        self.requests.append(f"{method} {target}")
        url = urlsplit(target)
        up_reader, up_writer = await asyncio.open_connection(*self._target(url.hostname or "", url.port or 80))
        self._writers.add(up_writer)
        path = url.path + (f"?{url.query}" if url.query else "")
        up_writer.write(f"{method} {path or '/'} {version}\r\n".encode("latin-1") + rest)
        await self._pipe(reader, writer, up_reader, up_writer)

    async def _socks5(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        (count,) = await reader.readexactly(1)
        await reader.readexactly(count)                 # the methods offered: we take "no auth"
        writer.write(b"\x05\x00")
        _ver, cmd, _rsv, kind = await reader.readexactly(4)
        if kind == 1:
            host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
        elif kind == 4:
            host = str(ipaddress.IPv6Address(await reader.readexactly(16)))
        else:
            (size,) = await reader.readexactly(1)
            host = (await reader.readexactly(size)).decode()
        (port,) = struct.unpack("!H", await reader.readexactly(2))
        self.requests.append(f"SOCKS5 {host}:{port}")
        if cmd != 1:
            writer.write(b"\x05\x07\x00\x01" + bytes(6))  # only CONNECT
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target(host, port))
            self._writers.add(up_writer)
        except OSError:
            writer.write(b"\x05\x05\x00\x01" + bytes(6))  # connection refused
            return
        writer.write(b"\x05\x00\x00\x01" + bytes(4) + struct.pack("!H", 0))
        await writer.drain()
        await self._pipe(reader, writer, up_reader, up_writer)

    async def _pipe(self, reader, writer, up_reader, up_writer) -> None:
        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except ConnectionError:
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.write_eof()

        try:
            await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))
        finally:
            self._writers.discard(up_writer)
            up_writer.close()
