"""Which callback requests count: WeChat's URL check, and a push authenticated, checked for replay,
decrypted and parsed; the passive reply sealed the way the push came (encrypted and signed in safe
mode).

With an EncodingAESKey configured only safe-mode pushes count, verified by `msg_signature` over
the ciphertext (the plain `signature` covers no body, so a plaintext push is refused); without
one the account is in plaintext mode. Either way a signed (timestamp, nonce) is accepted once,
within the replay window of our clock (replay.py). Every refusal is counted and logged with the
sender's address, never with the body.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from adapters.wechat.mp.crypto import WechatCryptoError, check_signature, decrypt, encrypt, sha1_signature
from adapters.wechat.mp.replay import ReplayGuard
from adapters.wechat.mp.xml_codec import InboundXml, XmlError, build_encrypted_reply, parse_envelope, parse_inbound

__all__ = ["AuthCounters", "CallbackAuth", "PushRefused"]

logger = logging.getLogger(__name__)


class AuthCounters(Protocol):
    """The counters a refusal bumps (adapter.WechatMpStats)."""

    bad_signature: int
    stale_timestamp: int
    replayed: int
    plaintext_refused: int
    malformed: int


class PushRefused(Exception):
    """The push does not count: the callback answers `status` with `text`."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status, self.text = status, text


def _forbidden() -> PushRefused:
    return PushRefused(403, "forbidden")


class CallbackAuth:
    """The account's token, app id and (safe mode) AES key, applied to each callback request."""

    def __init__(self, *, token: str, app_id: str, aes_key: bytes | None, replays: ReplayGuard,
                 stats: AuthCounters) -> None:
        self._token = token
        self._app_id = app_id
        self._aes_key = aes_key
        self._replays = replays
        self._stats = stats

    @property
    def safe_mode(self) -> bool:
        """An EncodingAESKey is configured: only encrypted pushes count."""
        return self._aes_key is not None

    def verify_url(self, query: Mapping[str, str], remote: str | None) -> str | None:
        """GET URL verification: the `echostr` to echo when `signature` signs token, timestamp, nonce; else None."""
        if not check_signature(query.get("signature", ""), self._token, query.get("timestamp", ""), query.get("nonce", "")):
            self._stats.bad_signature += 1
            logger.warning("wechat_mp: URL verification with a bad signature from %s", remote)
            return None
        logger.info("wechat_mp: URL verification answered")
        return query.get("echostr", "")

    async def open_push(self, query: Mapping[str, str], read: Callable[[], Awaitable[bytes | None]],
                        remote: str | None, now: float) -> tuple[InboundXml, bool]:
        """A POST push as (its parsed XML, whether it came in safe mode); PushRefused when it does not count.

        `read` gives the body (None when it is too large); it is read only once the mode is
        acceptable."""
        timestamp, nonce = query.get("timestamp", ""), query.get("nonce", "")
        safe = query.get("encrypt_type", "").lower() == "aes"
        if self._aes_key is not None and not safe:
            # The plain signature does not cover the body: with a key set, only ciphertext counts.
            self._stats.plaintext_refused += 1
            logger.warning("wechat_mp: plaintext push from %s refused (the account is in safe mode)", remote)
            raise _forbidden()
        body = await read()
        if body is None:
            raise self._malformed(remote, "body too large")
        if safe:
            if self._aes_key is None:
                raise self._malformed(remote, "safe-mode push but no encoding_aes_key configured")
            try:
                envelope = parse_envelope(body)
            except XmlError as exc:
                raise self._malformed(remote, str(exc)) from None
            signed = check_signature(query.get("msg_signature", ""), self._token, timestamp, nonce, envelope.encrypt)
        else:
            signed = check_signature(query.get("signature", ""), self._token, timestamp, nonce)
        if not signed:
            self._stats.bad_signature += 1
            logger.warning("wechat_mp: push with a bad signature from %s rejected", remote)
            raise _forbidden()
        verdict = self._replays.check(timestamp, nonce, now)
        if verdict == "stale":
            self._stats.stale_timestamp += 1
            logger.warning("wechat_mp: push with a stale timestamp %r from %s rejected", timestamp, remote)
            raise _forbidden()
        if verdict == "replayed":
            self._stats.replayed += 1
            logger.warning("wechat_mp: replayed push (timestamp %r seen with this nonce) from %s rejected",
                           timestamp, remote)
            raise _forbidden()
        try:
            xml = decrypt(envelope.encrypt, self._app_id, self._aes_key) if safe else body  # type: ignore[arg-type]
            return parse_inbound(xml), safe
        except (WechatCryptoError, XmlError) as exc:
            raise self._malformed(remote, str(exc)) from None

    def seal(self, xml: str, *, safe: bool, timestamp: str) -> str:
        """The passive reply as sent: `xml` itself in plaintext mode, encrypted and signed in safe mode."""
        if not safe or self._aes_key is None:
            return xml
        nonce = str(secrets.randbelow(10**10))
        encrypted = encrypt(xml, self._app_id, self._aes_key)
        signature = sha1_signature(self._token, timestamp, nonce, encrypted)
        return build_encrypted_reply(encrypt=encrypted, msg_signature=signature, timestamp=timestamp, nonce=nonce)

    def _malformed(self, remote: str | None, reason: str) -> PushRefused:
        self._stats.malformed += 1
        logger.warning("wechat_mp: malformed push from %s rejected: %s", remote, reason)
        return PushRefused(400, "bad request")
