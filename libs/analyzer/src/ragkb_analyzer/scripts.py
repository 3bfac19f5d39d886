"""Which writing system a character belongs to, as far as analysis needs to know: the script picks the stemmer
and stop words of a word, and whether its text has spaces between words at all.

Ranges are Unicode blocks; Japanese (kana, kanji) never reaches this module (Sudachi analyses it)."""

from __future__ import annotations

import bisect
from typing import Literal

Script = Literal[
    "latin", "greek", "cyrillic", "armenian", "hebrew", "arabic", "devanagari", "tamil", "hangul", "unspaced", "other"
]

# (first, last, script), sorted. "unspaced": Thai, Lao, Myanmar and Khmer, written without spaces between words.
_BLOCKS: tuple[tuple[int, int, Script], ...] = (
    (0x0041, 0x024F, "latin"),
    (0x0370, 0x03FF, "greek"),
    (0x0400, 0x052F, "cyrillic"),
    (0x0530, 0x058F, "armenian"),
    (0x0590, 0x05FF, "hebrew"),
    (0x0600, 0x06FF, "arabic"),
    (0x0750, 0x077F, "arabic"),
    (0x08A0, 0x08FF, "arabic"),
    (0x0900, 0x097F, "devanagari"),
    (0x0B80, 0x0BFF, "tamil"),
    (0x0E00, 0x0EFF, "unspaced"),
    (0x1000, 0x109F, "unspaced"),
    (0x1100, 0x11FF, "hangul"),
    (0x1780, 0x17FF, "unspaced"),
    (0x1C80, 0x1C8F, "cyrillic"),
    (0x1E00, 0x1EFF, "latin"),
    (0x1F00, 0x1FFF, "greek"),
    (0x2C60, 0x2C7F, "latin"),
    (0x2DE0, 0x2DFF, "cyrillic"),
    (0x3130, 0x318F, "hangul"),
    (0xA640, 0xA69F, "cyrillic"),
    (0xA720, 0xA7FF, "latin"),
    (0xA9E0, 0xA9FF, "unspaced"),
    (0xAA60, 0xAA7F, "unspaced"),
    (0xAB30, 0xAB6F, "latin"),
    (0xAC00, 0xD7AF, "hangul"),
    (0xFB1D, 0xFB4F, "hebrew"),
    (0xFB50, 0xFDFF, "arabic"),
    (0xFE70, 0xFEFF, "arabic"),
)
_STARTS = [first for first, _, _ in _BLOCKS]


def script_of(character: str) -> Script:
    code = ord(character)
    index = bisect.bisect_right(_STARTS, code) - 1
    if index >= 0:
        first, last, script = _BLOCKS[index]
        if first <= code <= last:
            return script
    return "other"


def word_script(word: str) -> Script:
    """The script of a word's first letter (digits and marks say nothing); "other" when it has none."""
    for character in word:
        if character.isalpha():
            return script_of(character)
    return "other"
