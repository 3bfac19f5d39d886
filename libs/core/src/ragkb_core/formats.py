"""Which document formats ragkb accepts, and how an upload's real type is decided.

The api answers 415 for anything else at upload time; the worker picks its parser from the same media type.
"""

from __future__ import annotations

from pathlib import PurePath

from ragkb_core.errors import UnsupportedMediaType

MARKDOWN = "text/markdown"
PLAIN_TEXT = "text/plain"

# extension → media type the worker parses it as.
EXTENSION_MEDIA_TYPES: dict[str, str] = {
    ".md": MARKDOWN,
    ".markdown": MARKDOWN,
    ".txt": PLAIN_TEXT,
    ".text": PLAIN_TEXT,
}
SUPPORTED_MEDIA_TYPES = frozenset(EXTENSION_MEDIA_TYPES.values())
# Bytes that a text file never contains: their presence means the content is binary, whatever the name says.
_BINARY_SIGNATURES = (b"%PDF-", b"PK\x03\x04", b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"\x00\x00\x01\x00")


def detect_media_type(filename: str | None, head: bytes, declared: str | None = None) -> str:
    """Decide the media type from the content first, then the name, then the declared type."""
    if _looks_binary(head):
        raise _unsupported(filename or "upload", "its content is binary")
    suffix = PurePath(filename).suffix.lower() if filename else ""
    if suffix in EXTENSION_MEDIA_TYPES:
        return EXTENSION_MEDIA_TYPES[suffix]
    base_declared = (declared or "").split(";")[0].strip().lower()
    if base_declared in SUPPORTED_MEDIA_TYPES:
        return base_declared
    if not suffix and base_declared in ("", "application/octet-stream"):
        return PLAIN_TEXT
    raise _unsupported(filename or "upload", f"type {suffix or base_declared!r} is not supported")


def _looks_binary(head: bytes) -> bool:
    return head.startswith(_BINARY_SIGNATURES) or b"\x00" in head[:8192]


def _unsupported(name: str, reason: str) -> UnsupportedMediaType:
    return UnsupportedMediaType(
        f"{name}: {reason}",
        supported_extensions=sorted(EXTENSION_MEDIA_TYPES),
        supported_media_types=sorted(SUPPORTED_MEDIA_TYPES),
    )
