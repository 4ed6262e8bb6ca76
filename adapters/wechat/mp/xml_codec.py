"""Official Account callback XML: parse inbound pushes safely, build passive replies (pure functions).

Parsing goes through defusedxml with DTDs forbidden outright: WeChat never sends a DTD, so any
DOCTYPE (billion laughs, external entities) is hostile and rejected before expansion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from xml.etree.ElementTree import ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

__all__ = [
    "MAX_XML_BYTES",
    "InboundXml",
    "SafeEnvelope",
    "XmlError",
    "build_encrypted_reply",
    "build_text_reply",
    "cdata",
    "parse_envelope",
    "parse_inbound",
]

# Far above any real push (text content is capped at 2048 bytes by WeChat); bounds parser work.
MAX_XML_BYTES = 256 * 1024
# Characters XML 1.0 cannot carry at all, even inside CDATA; a reply containing one would be unreadable.
_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


class XmlError(ValueError):
    """The body is not well-formed XML of the expected shape, or it tries entity tricks."""


@dataclass(frozen=True, slots=True)
class SafeEnvelope:
    """The outer XML of a safe-mode push: the account it is for and the ciphertext."""

    to_user: str
    encrypt: str


@dataclass(frozen=True, slots=True)
class InboundXml:
    """The fields of one decrypted push that the adapter uses; absent fields are ""."""

    to_user: str  # the account's original id (gh_...)
    from_user: str  # the sender's openid
    create_time: int
    msg_type: str  # text, image, voice, video, shortvideo, location, link, file, event
    content: str = ""
    msg_id: str = ""
    event: str = ""
    recognition: str = ""  # speech-to-text of a voice message, when the account enabled it
    pic_url: str = ""      # an image's download URL (WeChat's own image host)
    media_id: str = ""     # the temporary media id of an image, voice or video (3 days)
    format: str = ""       # a voice message's audio format (amr, speex)


def _root(body: bytes | str):
    """Parse body with DTDs and entities forbidden; XmlError on anything else than one <xml> root."""
    raw = body.encode("utf-8") if isinstance(body, str) else body
    if not raw.strip():
        raise XmlError("empty body")
    if len(raw) > MAX_XML_BYTES:
        raise XmlError("body too large")
    try:
        root = fromstring(raw, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except DefusedXmlException as exc:
        raise XmlError(f"forbidden XML construct: {type(exc).__name__}") from exc
    except (ParseError, ValueError, LookupError) as exc:  # LookupError: unknown encoding declared
        raise XmlError("malformed XML") from exc
    if root.tag != "xml":
        raise XmlError("root element is not <xml>")
    return root


def _fields(root) -> dict[str, str]:
    """Top-level child tag -> stripped text (WeChat pushes are flat)."""
    return {child.tag: (child.text or "").strip() for child in root}


def parse_envelope(body: bytes | str) -> SafeEnvelope:
    """Read the outer safe-mode XML (<ToUserName>, <Encrypt>); XmlError if Encrypt is missing."""
    fields = _fields(_root(body))
    if not fields.get("Encrypt"):
        raise XmlError("no <Encrypt> in a safe-mode body")
    return SafeEnvelope(to_user=fields.get("ToUserName", ""), encrypt=fields["Encrypt"])


def parse_inbound(body: bytes | str) -> InboundXml:
    """Read a plain (or decrypted) push; XmlError if a required field is missing or CreateTime is no integer."""
    fields = _fields(_root(body))
    missing = [name for name in ("ToUserName", "FromUserName", "CreateTime", "MsgType") if not fields.get(name)]
    if missing:
        raise XmlError(f"missing fields: {', '.join(missing)}")
    try:
        create_time = int(fields["CreateTime"])
    except ValueError as exc:
        raise XmlError("CreateTime is not an integer") from exc
    return InboundXml(
        to_user=fields["ToUserName"],
        from_user=fields["FromUserName"],
        create_time=create_time,
        msg_type=fields["MsgType"].lower(),
        # Content keeps its inner whitespace; only the XML indentation around it was stripped.
        content=fields.get("Content", ""),
        msg_id=fields.get("MsgId", "") or fields.get("MsgID", ""),
        event=fields.get("Event", ""),
        recognition=fields.get("Recognition", ""),
        pic_url=fields.get("PicUrl", ""),
        media_id=fields.get("MediaId", ""),
        format=fields.get("Format", ""),
    )


def cdata(text: str) -> str:
    """Wrap text in CDATA; a literal "]]>" is split across two sections so it cannot close the first.

    Characters XML 1.0 forbids (most C0 controls) are dropped.
    """
    return "<![CDATA[" + _NOT_XML.sub("", text).replace("]]>", "]]]]><![CDATA[>") + "]]>"


def build_text_reply(*, to_user: str, from_user: str, create_time: int, content: str) -> str:
    """The passive text reply: to the user's openid, from the account's original id."""
    return (
        "<xml>"
        f"<ToUserName>{cdata(to_user)}</ToUserName>"
        f"<FromUserName>{cdata(from_user)}</FromUserName>"
        f"<CreateTime>{int(create_time)}</CreateTime>"
        "<MsgType><![CDATA[text]]></MsgType>"
        f"<Content>{cdata(content)}</Content>"
        "</xml>"
    )


def build_encrypted_reply(*, encrypt: str, msg_signature: str, timestamp: str, nonce: str) -> str:
    """The safe-mode passive reply wrapping an encrypted text reply."""
    return (
        "<xml>"
        f"<Encrypt>{cdata(encrypt)}</Encrypt>"
        f"<MsgSignature>{cdata(msg_signature)}</MsgSignature>"
        f"<TimeStamp>{int(timestamp)}</TimeStamp>"
        f"<Nonce>{cdata(nonce)}</Nonce>"
        "</xml>"
    )
