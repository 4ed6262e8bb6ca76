"""Official Account callback crypto: URL/body signatures and safe-mode AES (pure functions).

Safe mode ("安全模式") in short:
- AES key = base64decode(EncodingAESKey + "=") (43 chars -> 32 bytes); IV = key[:16]; AES-256-CBC.
- plaintext = random(16) + len(xml) as 4-byte big-endian + xml (UTF-8) + app_id, PKCS#7 padded
  to a multiple of 32 bytes (not AES's 16: the platform's choice), then base64.
- msg_signature = sha1(join(sorted([token, timestamp, nonce, Encrypt]))), hex.
CBC has no integrity of its own: a ciphertext is trusted only after its msg_signature checks
(`open_envelope`), and `decrypt` still rejects anything whose structure or app id is wrong.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import struct
from dataclasses import dataclass

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

__all__ = [
    "BLOCK_SIZE",
    "Envelope",
    "WechatCryptoError",
    "aes_key_from_encoding",
    "check_signature",
    "decrypt",
    "encrypt",
    "open_envelope",
    "pkcs7_pad",
    "pkcs7_unpad",
    "seal",
    "sha1_signature",
]

BLOCK_SIZE = 32  # PKCS#7 block of the WeChat scheme (K = 32), twice the AES block
_AES_BLOCK = 16
_RANDOM_LEN = 16
_LEN_FIELD = 4


class WechatCryptoError(ValueError):
    """A key, signature, ciphertext or decrypted payload is not what the protocol demands."""


@dataclass(frozen=True, slots=True)
class Envelope:
    """A sealed safe-mode payload: the base64 ciphertext and what signs it."""

    encrypt: str
    msg_signature: str
    timestamp: str
    nonce: str


def sha1_signature(*parts: str) -> str:
    """sha1 hex of the parts sorted as strings and concatenated (order of arguments is irrelevant)."""
    return hashlib.sha1("".join(sorted(parts)).encode("utf-8")).hexdigest()


def check_signature(expected: str, *parts: str) -> bool:
    """True when `expected` is the sha1_signature of parts; constant-time so it leaks nothing."""
    if not expected:
        return False
    return hmac.compare_digest(sha1_signature(*parts).encode(), expected.strip().lower().encode())


def aes_key_from_encoding(encoding_aes_key: str) -> bytes:
    """Decode a 43-character EncodingAESKey into the 32-byte AES key; WechatCryptoError if malformed."""
    if len(encoding_aes_key) != 43:
        raise WechatCryptoError("EncodingAESKey must be 43 characters")
    try:
        key = base64.b64decode(encoding_aes_key + "=", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise WechatCryptoError("EncodingAESKey is not base64") from exc
    if len(key) != 32:
        raise WechatCryptoError("EncodingAESKey does not decode to 32 bytes")
    return key


def pkcs7_pad(data: bytes, block: int = BLOCK_SIZE) -> bytes:
    """Append n = block - len(data) % block bytes of value n (1 <= n <= block, so always >= 1)."""
    if not 1 <= block <= 255:
        raise ValueError("PKCS#7 block must be 1..255")
    n = block - len(data) % block
    return data + bytes([n]) * n


def pkcs7_unpad(data: bytes, block: int = BLOCK_SIZE) -> bytes:
    """Strip PKCS#7 padding; WechatCryptoError unless the last n bytes all equal n, 1 <= n <= block."""
    if not data or len(data) % block:
        raise WechatCryptoError("padded data is not a whole number of blocks")
    n = data[-1]
    if not 1 <= n <= block or data[-n:] != bytes([n]) * n:
        raise WechatCryptoError("bad PKCS#7 padding")
    return data[:-n]


def encrypt(xml: str, app_id: str, key: bytes, *, random_prefix: bytes | None = None) -> str:
    """Encrypt xml for app_id with the 32-byte key; returns base64 text (the <Encrypt> value).

    `random_prefix` (16 bytes) exists for reproducible tests; production leaves it to os.urandom.
    """
    prefix = os.urandom(_RANDOM_LEN) if random_prefix is None else random_prefix
    if len(prefix) != _RANDOM_LEN:
        raise ValueError("random_prefix must be 16 bytes")
    body = xml.encode("utf-8")
    plain = prefix + struct.pack(">I", len(body)) + body + app_id.encode("utf-8")
    encryptor = _cipher(key).encryptor()
    cipher_bytes = encryptor.update(pkcs7_pad(plain)) + encryptor.finalize()
    return base64.b64encode(cipher_bytes).decode("ascii")


def decrypt(encrypted: str, app_id: str, key: bytes) -> str:
    """Decrypt an <Encrypt> value; returns the xml. WechatCryptoError on any structural or app id mismatch."""
    try:
        cipher_bytes = base64.b64decode(encrypted, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise WechatCryptoError("ciphertext is not base64") from exc
    if not cipher_bytes or len(cipher_bytes) % _AES_BLOCK:
        raise WechatCryptoError("ciphertext is not a whole number of AES blocks")
    decryptor = _cipher(key).decryptor()
    plain = pkcs7_unpad(decryptor.update(cipher_bytes) + decryptor.finalize())
    if len(plain) < _RANDOM_LEN + _LEN_FIELD:
        raise WechatCryptoError("decrypted payload too short")
    (xml_len,) = struct.unpack(">I", plain[_RANDOM_LEN : _RANDOM_LEN + _LEN_FIELD])
    start = _RANDOM_LEN + _LEN_FIELD
    if start + xml_len > len(plain):
        raise WechatCryptoError("decrypted length field exceeds the payload")
    body, tail = plain[start : start + xml_len], plain[start + xml_len :]
    if not hmac.compare_digest(tail, app_id.encode("utf-8")):
        raise WechatCryptoError("payload is for another app id")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WechatCryptoError("decrypted xml is not UTF-8") from exc


def seal(xml: str, *, token: str, app_id: str, key: bytes, timestamp: str, nonce: str) -> Envelope:
    """Encrypt xml and sign the ciphertext: what a safe-mode sender puts on the wire."""
    encrypted = encrypt(xml, app_id, key)
    return Envelope(encrypted, sha1_signature(token, timestamp, nonce, encrypted), timestamp, nonce)


def open_envelope(envelope: Envelope, *, token: str, app_id: str, key: bytes) -> str:
    """Check msg_signature over the ciphertext, then decrypt; WechatCryptoError if either fails."""
    if not check_signature(envelope.msg_signature, token, envelope.timestamp, envelope.nonce, envelope.encrypt):
        raise WechatCryptoError("msg_signature does not match")
    return decrypt(envelope.encrypt, app_id, key)


def _cipher(key: bytes) -> Cipher:
    """AES-256-CBC with the scheme's fixed IV (the key's first 16 bytes)."""
    if len(key) != 32:
        raise WechatCryptoError("AES key must be 32 bytes")
    return Cipher(algorithms.AES(key), modes.CBC(key[:_AES_BLOCK]))
