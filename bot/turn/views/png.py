"""A PNG encoder for RGB images, stdlib only (zlib + struct): enough to send a chart as a photo
without an imaging library. Pixels are rows of (r, g, b) bytes; no palette, no alpha, no filters."""

from __future__ import annotations

import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_rgb(width: int, height: int, rows: list[bytearray]) -> bytes:
    """PNG bytes of a width x height image; `rows` holds height rows of 3 * width bytes each."""
    if width <= 0 or height <= 0 or len(rows) != height or any(len(r) != 3 * width for r in rows):
        raise ValueError("rows must be height rows of 3 * width bytes")
    # Filter type 0 (none) before each row: charts are flat colours, zlib packs them well as is.
    raw = b"".join(b"\x00" + bytes(r) for r in rows)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, deflate, no interlace
    return SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, 9)) + _chunk(b"IEND", b"")
