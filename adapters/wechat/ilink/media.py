"""What came with an iLink message, and fetching it from WeChat's CDN.

An image or file item names its bytes by a CDN media descriptor: `encrypt_query_param` (or a
`full_url`) to download, and the AES-128 key the download is encrypted with (ECB, PKCS#7),
given as base64 of the 16 raw bytes or of their 32-character hex (an image item may also carry
the hex as `aeskey`, which wins). The descriptor travels as the Media's opaque `ref` (JSON), so
the gateway never sees a URL. A voice item's transcript is WeChat's own and is used as it is;
its audio (SILK) is never fetched.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from adapters.download import fetch_url
from adapters.wechat.ilink.protocol import ItemType, as_int, as_str, sub_object
from bot.errors import MediaError
from bot.message import Kind, Media

__all__ = ["CDN_BASE_URL", "fetch_cdn", "media_of"]

CDN_BASE_URL = "https://novac2c.cdn.weixin.qq.com/c2c"


def media_of(items: list[Any]) -> tuple[Media, ...]:
    """The attachments of an item list: images and files with their CDN descriptor, voice notes
    with WeChat's transcript (no ref: there is nothing we can play), videos named only."""
    found: list[Media] = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        kind = as_int(item.get("type"))
        if kind == ItemType.IMAGE:
            image = sub_object(item, "image_item")
            found.append(Media(Kind.PHOTO, _ref(sub_object(image, "media"), as_str(image.get("aeskey"))),
                               size=as_int(image.get("mid_size")) or None))
        elif kind == ItemType.FILE:
            file = sub_object(item, "file_item")
            found.append(Media(Kind.FILE, _ref(sub_object(file, "media"), ""), name=as_str(file.get("file_name")),
                               size=as_int(file.get("len")) or None))
        elif kind == ItemType.VOICE:
            voice = sub_object(item, "voice_item")
            playtime = as_int(voice.get("playtime"))
            found.append(Media(Kind.VOICE, "", transcript=as_str(voice.get("text")),
                               duration=playtime / 1000 if playtime else None))
        elif kind == ItemType.VIDEO:
            found.append(Media(Kind.VIDEO, ""))
    return tuple(found)


def _ref(media: Mapping[str, Any], hex_key: str) -> str:
    param = as_str(media.get("encrypt_query_param")) or as_str(media.get("encrypted_query_param"))
    if not (param or as_str(media.get("full_url"))):
        return ""
    return json.dumps({"param": param, "url": as_str(media.get("full_url")),
                       "key": hex_key or as_str(media.get("aes_key"))}, separators=(",", ":"))


def _aes_key(text: str) -> bytes:
    if len(text) == 32 and all(c in "0123456789abcdefABCDEF" for c in text):
        return bytes.fromhex(text)
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise MediaError("the media key is not base64") from None
    if len(raw) == 16:
        return raw
    decoded = raw.decode("ascii", "replace")
    if len(decoded) == 32:
        try:
            return bytes.fromhex(decoded)
        except ValueError:
            pass
    raise MediaError("the media key is not an AES-128 key")


def decrypt(data: bytes, key: bytes) -> bytes:
    """AES-128-ECB with PKCS#7 padding, as WeChat's CDN serves media."""
    if len(data) % 16:
        raise MediaError("the CDN answer is not whole AES blocks")
    decryptor = Cipher(algorithms.AES(key), modes.ECB()).decryptor()  # noqa: S305 - WeChat's format, not our choice
    padded = decryptor.update(data) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        return unpadder.update(padded) + unpadder.finalize()
    except ValueError:
        raise MediaError("the media key does not open this file") from None


async def fetch_cdn(http: aiohttp.ClientSession, media: Media, *, cdn_base: str, max_bytes: int, timeout: float) -> bytes:
    """Download and decrypt one attachment, stopping as soon as it is over `max_bytes`."""
    try:
        ref = json.loads(media.ref) if media.ref else None
    except ValueError:
        ref = None
    if not isinstance(ref, dict) or not (ref.get("param") or ref.get("url")):
        raise MediaError("WeChat gave no download reference for this attachment")
    url = ref.get("url") or f"{cdn_base}/download?encrypted_query_param={quote(ref['param'], safe='')}"
    key = _aes_key(str(ref.get("key") or ""))
    # The padding may add one block to what the cap allows.
    body = await fetch_url(http, url, max_bytes=max_bytes + 16, timeout=timeout, what="WeChat's CDN")
    data = decrypt(bytes(body), key)
    if len(data) > max_bytes:
        raise MediaError(f"{len(data)} bytes, over the {max_bytes}-byte cap", too_large=True)
    return data
