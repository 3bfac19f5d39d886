"""Mail: .eml (RFC 822/MIME) and Outlook .msg — the headers that say what a mail is, its body, and the text of
its attachments.

Each attachment of a supported type is parsed by its own parser (OCR included) within the mail's limits and
written into the mail's document as sections under "Attachment: <name>", keeping the attachment's own heading
path and pages. (Attachments are not documents of their own: creating documents is the api's, and a worker
that made them would bypass its checks; see the report of the change that added mail.) An attachment that
cannot be read is listed in the ingest report with its reason and does not fail the mail.
"""

from __future__ import annotations

import email
import email.policy
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage, Message

from ragkb_core.errors import ParseFailed, PayloadTooLarge, RagkbError
from ragkb_core.formats import EML, MSG, detect_media_type
from ragkb_worker.parsers.builder import OutlineBuilder
from ragkb_worker.parsers.compound import CompoundFile, open_compound_file
from ragkb_worker.parsers.markup import read_html_into
from ragkb_worker.parsers.model import ParsedDocument, ParseOptions
from ragkb_worker.parsers.text import decode_text

# Parses an attachment: (media type, bytes, options) → document (ragkb_worker.parsing.parse).
PartParser = Callable[[str, bytes, ParseOptions], ParsedDocument]
MAX_ATTACHMENTS = 50
_HEADERS = ("Subject", "From", "To", "Cc", "Date")


@dataclass(frozen=True)
class Attachment:
    name: str
    declared_type: str | None
    data: bytes


@dataclass(frozen=True)
class Mail:
    headers: list[tuple[str, str]]
    body: str
    body_is_html: bool
    attachments: list[Attachment]


def parse_eml(data: bytes, options: ParseOptions, parse_part: PartParser) -> ParsedDocument:
    return _document(_read_eml(data), options, parse_part)


def parse_msg(data: bytes, options: ParseOptions, parse_part: PartParser) -> ParsedDocument:
    return _document(_read_msg(data), options, parse_part)


def _document(mail: Mail, options: ParseOptions, parse_part: PartParser) -> ParsedDocument:
    subject = next((value for name, value in mail.headers if name == "Subject" and value), "")
    path = [subject] if subject else []
    builder = OutlineBuilder(options.limits.max_text_chars)
    builder.reset_path(path)
    builder.block("\n".join(f"{name}: {value}" for name, value in mail.headers if value))
    if mail.body_is_html:
        read_html_into(builder, mail.body)
    else:
        for paragraph in mail.body.split("\n\n"):
            builder.block(paragraph.strip("\n"))
    report = [_attach(builder, path, attachment, options, parse_part) for attachment in mail.attachments]
    parsed = builder.build()
    return ParsedDocument(parsed.text, parsed.sections, {"attachments": report} if report else {})


def _attach(
    builder: OutlineBuilder, path: list[str], attachment: Attachment, options: ParseOptions, parse_part: PartParser
) -> dict[str, object]:
    entry: dict[str, object] = {"name": attachment.name}
    try:
        media_type = detect_media_type(attachment.name, attachment.data[:8192], attachment.declared_type)
        entry["media_type"] = media_type
        if media_type in (EML, MSG):
            raise ParseFailed("a mail attached to a mail is not read (its body is in the reply chain)")
        parsed = parse_part(media_type, attachment.data, options)
    except PayloadTooLarge:
        raise  # the mail as a whole is over a limit
    except RagkbError as exc:
        return {**entry, "indexed": False, "reason": exc.detail}
    builder.embed(parsed, [*path, f"Attachment: {attachment.name}"])
    builder.reset_path(path)
    return {**entry, "indexed": True, **({"report": parsed.report} if parsed.report else {})}


# -- .eml ----------------------------------------------------------------------------------------------------


def _read_eml(data: bytes) -> Mail:
    message = email.message_from_bytes(data, policy=email.policy.default)
    if not isinstance(message, EmailMessage) or not any(message.get(name) for name in ("From", "Subject", "Date")):
        raise ParseFailed("the file is not a mail: it has no From, Subject or Date header")
    headers = [(name, _header(message, name)) for name in _HEADERS]
    body_part = message.get_body(preferencelist=("plain", "html"))
    body, is_html = ("", False)
    if body_part is not None:
        body, is_html = _part_text(body_part), body_part.get_content_subtype() == "html"
    attachments = [
        Attachment(part.get_filename() or f"attachment-{number}", part.get_content_type(), _payload(part))
        for number, part in enumerate(_attachments(message), start=1)
    ]
    return Mail(headers, body, is_html, attachments)


def _header(message: EmailMessage, name: str) -> str:
    try:
        return " ".join(str(message.get(name) or "").split())
    except (ValueError, TypeError, LookupError):
        return ""


def _attachments(message: EmailMessage) -> Iterator[Message]:
    for number, part in enumerate(message.iter_attachments()):
        if number >= MAX_ATTACHMENTS:
            return
        yield part


def _part_text(part: Message) -> str:
    payload = _payload(part)
    charset = part.get_content_charset() or "utf-8"
    try:
        return payload.decode(charset)
    except (LookupError, UnicodeDecodeError):
        try:
            return decode_text(payload)
        except ParseFailed:
            return payload.decode("utf-8", errors="replace")


def _payload(part: Message) -> bytes:
    payload = part.get_payload(decode=True)
    if isinstance(payload, bytes):
        return payload
    inner = part.get_payload()
    if isinstance(inner, list) and inner and isinstance(inner[0], Message):
        return inner[0].as_bytes()  # an attached message/rfc822
    return b""


# -- Outlook .msg (a compound file of MAPI properties) -------------------------------------------------------

_SUBJECT, _SENDER_NAME, _SENDER_EMAIL, _TO, _CC, _BODY, _HTML = "0037", "0C1A", "5D01", "0E04", "0E03", "1000", "1013"
_ATTACH_LONG_NAME, _ATTACH_NAME, _ATTACH_DATA, _ATTACH_MIME = "3707", "3704", "3701", "370E"
_SUBMIT_TIME = 0x0039
_OLE_ERRORS = (OSError, ValueError, IndexError, KeyError, TypeError, struct.error)


def _read_msg(data: bytes) -> Mail:
    try:
        with open_compound_file(data) as compound:
            if not compound.exists("__properties_version1.0"):
                raise ParseFailed("the file is not an Outlook message: it has no MAPI property stream")
            return _msg_mail(compound)
    except _OLE_ERRORS as exc:
        raise ParseFailed("the Outlook (.msg) file is damaged: its compound-file structure cannot be read") from exc


def _msg_mail(compound: CompoundFile) -> Mail:
    sender = _string(compound, "", _SENDER_NAME)
    address = _string(compound, "", _SENDER_EMAIL)
    headers = [
        ("Subject", _string(compound, "", _SUBJECT)),
        ("From", f"{sender} <{address}>" if sender and address else sender or address),
        ("To", _string(compound, "", _TO)),
        ("Cc", _string(compound, "", _CC)),
        ("Date", _submit_time(compound)),
    ]
    body = _string(compound, "", _BODY)
    html = "" if body else _string(compound, "", _HTML)
    return Mail(headers, body or html, not body and bool(html), list(_msg_attachments(compound)))


def _msg_attachments(compound: CompoundFile) -> Iterator[Attachment]:
    storages = sorted({entry[0] for entry in compound.listdir() if entry[0].startswith("__attach_version1.0_")})
    for number, storage in enumerate(storages[:MAX_ATTACHMENTS], start=1):
        prefix = f"{storage}/"
        name = _string(compound, prefix, _ATTACH_LONG_NAME) or _string(compound, prefix, _ATTACH_NAME)
        data = _binary(compound, f"{prefix}__substg1.0_{_ATTACH_DATA}0102")
        if data:
            yield Attachment(name or f"attachment-{number}", _string(compound, prefix, _ATTACH_MIME) or None, data)


def _string(compound: CompoundFile, prefix: str, tag: str) -> str:
    """A string property, stored as UTF-16 (type 001F) or in the message's code page (001E)."""
    unicode = _binary(compound, f"{prefix}__substg1.0_{tag}001F")
    if unicode:
        return unicode.decode("utf-16-le", errors="replace").rstrip("\0").strip()
    narrow = _binary(compound, f"{prefix}__substg1.0_{tag}001E")
    if narrow:
        return _decode_narrow(narrow.rstrip(b"\0")).strip()
    html = _binary(compound, f"{prefix}__substg1.0_{tag}0102") if tag == _HTML else b""
    return _decode_narrow(html) if html else ""


def _decode_narrow(data: bytes) -> str:
    try:
        return decode_text(data)
    except ParseFailed:
        return data.decode("latin-1")


def _binary(compound: CompoundFile, path: str) -> bytes:
    if not compound.exists(path):
        return b""
    data: bytes = compound.openstream(path).read()
    return data


def _submit_time(compound: CompoundFile) -> str:
    """PR_CLIENT_SUBMIT_TIME from the fixed-size property stream (a 32-byte header, then 16-byte entries)."""
    properties = _binary(compound, "__properties_version1.0")
    for offset in range(32, len(properties) - 15, 16):
        kind, tag = struct.unpack_from("<HH", properties, offset)
        if tag == _SUBMIT_TIME and kind == 0x0040:
            (ticks,) = struct.unpack_from("<Q", properties, offset + 8)
            try:
                moment = datetime(1601, 1, 1, tzinfo=UTC) + timedelta(microseconds=ticks // 10)
            except OverflowError:
                return ""
            return moment.strftime("%a, %d %b %Y %H:%M:%S +0000")
    return ""
