from __future__ import annotations

import pytest

from ragkb_core.errors import UnsupportedMediaType
from ragkb_core.formats import MARKDOWN, PLAIN_TEXT, detect_media_type


@pytest.mark.parametrize(
    ("filename", "declared", "expected"),
    [
        ("notes.md", None, MARKDOWN),
        ("README.MARKDOWN", "application/octet-stream", MARKDOWN),
        ("a.txt", None, PLAIN_TEXT),
        (None, "text/plain; charset=utf-8", PLAIN_TEXT),
        (None, None, PLAIN_TEXT),
    ],
)
def test_text_formats_are_recognised(filename: str | None, declared: str | None, expected: str) -> None:
    assert detect_media_type(filename, b"hello", declared) == expected


def test_binary_content_is_refused_whatever_the_name() -> None:
    # PDFs and PNG images are supported now (recognised by their content): a GIF stands for unsupported binaries.
    with pytest.raises(UnsupportedMediaType) as caught:
        detect_media_type("report.txt", b"GIF89a...")
    assert ".md" in caught.value.extra["supported_extensions"]


def test_unknown_extension_is_refused_with_the_supported_list() -> None:
    with pytest.raises(UnsupportedMediaType) as caught:
        detect_media_type("photo.heic", b"text-like")
    assert caught.value.status == 415
    assert caught.value.extra["supported_extensions"]
