"""Official Account crypto: signatures, PKCS#7 to 32, safe-mode AES round trips and rejections."""

from __future__ import annotations

import base64
import itertools
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.wechat.mp.crypto import (
    BLOCK_SIZE,
    Envelope,
    WechatCryptoError,
    aes_key_from_encoding,
    check_signature,
    decrypt,
    encrypt,
    open_envelope,
    pkcs7_pad,
    pkcs7_unpad,
    seal,
    sha1_signature,
)

keys = st.binary(min_size=32, max_size=32)
app_ids = st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=24)
xml_texts = st.text(max_size=600)  # any Unicode (hypothesis excludes lone surrogates)
tokens = st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=32)
digits = st.text(alphabet=string.digits, min_size=1, max_size=12)


def encoding_of(key: bytes) -> str:
    return base64.b64encode(key).decode().rstrip("=")


# -- signatures -------------------------------------------------------------------------------------


def test_signature_matches_the_documented_example():
    # From the platform's access guide: Token "AAAAA", timestamp 1714037059, nonce 486452656.
    assert sha1_signature("AAAAA", "1714037059", "486452656") == "899cf89e464efb63f54ddac96b0a0a235f53aa78"


@given(st.lists(st.text(max_size=20), min_size=1, max_size=4))
def test_signature_ignores_argument_order(parts):
    expected = sha1_signature(*parts)
    for perm in itertools.permutations(parts):
        assert sha1_signature(*perm) == expected


@given(tokens, digits, digits, st.text(min_size=1, max_size=40))
def test_check_signature_accepts_the_right_one_only(token, timestamp, nonce, encrypted):
    good = sha1_signature(token, timestamp, nonce, encrypted)
    assert check_signature(good, token, timestamp, nonce, encrypted)
    assert check_signature(good.upper(), token, timestamp, nonce, encrypted)
    assert not check_signature(good, token + "x", timestamp, nonce, encrypted)
    assert not check_signature(good, token, timestamp, nonce, encrypted + "x")
    assert not check_signature("", token, timestamp, nonce)
    flipped = ("0" if good[0] != "0" else "1") + good[1:]
    assert not check_signature(flipped, token, timestamp, nonce, encrypted)


# -- PKCS#7 ------------------------------------------------------------------------------------------


@given(st.binary(max_size=200))
def test_pkcs7_pads_to_whole_blocks_of_32_and_round_trips(data):
    padded = pkcs7_pad(data)
    assert len(padded) % BLOCK_SIZE == 0
    added = len(padded) - len(data)
    assert 1 <= added <= BLOCK_SIZE
    assert padded[:len(data)] == data
    assert padded[len(data):] == bytes([added]) * added
    assert pkcs7_unpad(padded) == data


def test_pkcs7_adds_a_full_block_to_aligned_data():
    assert pkcs7_pad(b"x" * 32) == b"x" * 32 + bytes([32]) * 32
    assert pkcs7_pad(b"") == bytes([32]) * 32


@given(st.binary(min_size=32, max_size=32) | st.binary(min_size=64, max_size=64), st.integers(0, 255))
def test_pkcs7_unpad_accepts_exactly_the_consistent_paddings(blocks, last):
    padded = blocks[:-1] + bytes([last])
    if 1 <= last <= BLOCK_SIZE and padded.endswith(bytes([last]) * last):
        assert pkcs7_unpad(padded) == padded[:-last]
    else:
        with pytest.raises(WechatCryptoError):
            pkcs7_unpad(padded)


def test_pkcs7_rejects_partial_blocks():
    with pytest.raises(WechatCryptoError):
        pkcs7_unpad(b"\x01" * 31)
    with pytest.raises(WechatCryptoError):
        pkcs7_unpad(b"")


# -- keys -------------------------------------------------------------------------------------------


@given(keys)
def test_encoding_aes_key_decodes_to_the_key(key):
    encoding = encoding_of(key)
    assert len(encoding) == 43
    assert aes_key_from_encoding(encoding) == key


@pytest.mark.parametrize("bad", ["", "short", "a" * 42, "a" * 44, "!" * 43])
def test_bad_encoding_aes_key_is_rejected(bad):
    with pytest.raises(WechatCryptoError):
        aes_key_from_encoding(bad)


# -- AES round trips ---------------------------------------------------------------------------------


@settings(max_examples=150)
@given(xml_texts, app_ids, keys)
def test_encrypt_decrypt_round_trip(xml, app_id, key):
    encrypted = encrypt(xml, app_id, key)
    raw = base64.b64decode(encrypted)
    assert len(raw) % BLOCK_SIZE == 0
    assert decrypt(encrypted, app_id, key) == xml


@given(xml_texts, app_ids, keys, st.binary(min_size=16, max_size=16))
def test_layout_is_random_length_xml_appid(xml, app_id, key, prefix):
    """Decrypting by hand shows random(16) + big-endian length + xml + app id."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    encrypted = encrypt(xml, app_id, key, random_prefix=prefix)
    d = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    plain = pkcs7_unpad(d.update(base64.b64decode(encrypted)) + d.finalize())
    body = xml.encode()
    assert plain == prefix + len(body).to_bytes(4, "big") + body + app_id.encode()


@given(xml_texts, app_ids, app_ids, keys)
def test_wrong_app_id_is_rejected(xml, app_id, other, key):
    encrypted = encrypt(xml, app_id, key)
    if other == app_id:
        assert decrypt(encrypted, other, key) == xml
    else:
        with pytest.raises(WechatCryptoError):
            decrypt(encrypted, other, key)


@given(xml_texts, app_ids, keys, st.data())
def test_tampering_with_the_last_block_is_rejected(xml, app_id, key, data):
    """The last AES block carries the app id and padding: any change there is caught by decrypt alone."""
    raw = bytearray(base64.b64decode(encrypt(xml, app_id, key)))
    pos = data.draw(st.integers(min_value=len(raw) - 16, max_value=len(raw) - 1))
    raw[pos] ^= data.draw(st.integers(min_value=1, max_value=255))
    with pytest.raises(WechatCryptoError):
        decrypt(base64.b64encode(bytes(raw)).decode(), app_id, key)


@given(st.text(max_size=200), app_ids, keys, tokens, digits, digits, st.data())
def test_sealed_envelope_round_trips_and_any_tamper_is_rejected(xml, app_id, key, token, timestamp, nonce, data):
    envelope = seal(xml, token=token, app_id=app_id, key=key, timestamp=timestamp, nonce=nonce)
    assert open_envelope(envelope, token=token, app_id=app_id, key=key) == xml
    # CBC alone is malleable; the msg_signature over the ciphertext is what catches any change.
    raw = bytearray(base64.b64decode(envelope.encrypt))
    pos = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    raw[pos] ^= data.draw(st.integers(min_value=1, max_value=255))
    tampered = Envelope(base64.b64encode(bytes(raw)).decode(), envelope.msg_signature, timestamp, nonce)
    with pytest.raises(WechatCryptoError):
        open_envelope(tampered, token=token, app_id=app_id, key=key)
    with pytest.raises(WechatCryptoError):
        open_envelope(envelope, token=token + "x", app_id=app_id, key=key)


@given(xml_texts, app_ids, keys, keys)
def test_wrong_key_is_rejected(xml, app_id, key, other):
    encrypted = encrypt(xml, app_id, key)
    if other == key:
        return
    with pytest.raises(WechatCryptoError):
        decrypt(encrypted, app_id, other)


@pytest.mark.parametrize("garbage", ["", "not base64!", base64.b64encode(b"x" * 15).decode(), base64.b64encode(b"x" * 32).decode()])
def test_garbage_ciphertext_is_rejected(garbage):
    with pytest.raises(WechatCryptoError):
        decrypt(garbage, "wxapp", bytes(range(32)))
