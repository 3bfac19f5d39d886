"""OCR of a page image with Tesseract (Debian's `tesseract-ocr` with the jpn, jpn_vert and eng data).

Tesseract runs as one subprocess per page: a hostile or pathological image can only cost that process, which
is killed at the page timeout, and its environment caps OpenMP at one thread (measured on this 2-core machine
under load: 2.3 s for an A4 page at 300 dpi with one thread, 6.7 s with OpenMP's default, which oversubscribes
the cores the worker's other processes use). pytesseract cannot set the child's environment, and tesserocr's
wheel runs a bundled Tesseract in-process, so the command line is called directly (TSV output: words with
their confidence and block, paragraph and line numbers).

Pages are read as horizontal Japanese + English first; a page read with low confidence is read again with the
vertical Japanese model first and the better reading kept (vertical text read as horizontal scored 44, read
with jpn_vert 88; horizontal pages score ~90, and jpn_vert on every page would double the time).
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import time
from dataclasses import dataclass, replace

from PIL import Image

from ragkb_core.errors import ParseFailed
from ragkb_worker.parsers.layout import is_wide
from ragkb_worker.parsers.model import ParseOptions

LANGUAGES = "jpn+eng"
VERTICAL_LANGUAGES = "jpn_vert+jpn+eng"
RETRY_BELOW_CONFIDENCE = 70.0
# Confidence (0–100) under which a page is listed as doubtful in the ingest report.
LOW_CONFIDENCE = 60.0
# Rendering resolution of PDF pages: Tesseract reads Japanese best from about 300 dpi.
DPI = 300
# Tesseract's TSV columns: level … conf, text. Level 5 is a word.
_WORD_LEVEL = "5"
_DEPENDENCIES = "tesseract-ocr, tesseract-ocr-jpn, tesseract-ocr-jpn-vert and tesseract-ocr-eng"


@dataclass(frozen=True)
class OcrText:
    text: str
    confidence: float | None  # mean word confidence weighted by characters; None: no word was read
    seconds: float
    languages: str = LANGUAGES  # the Tesseract languages of the reading kept


def recognise(image: Image.Image, options: ParseOptions, what: str) -> OcrText:
    """The text of one page image; `what` names the page in error messages ("page 3")."""
    started = time.monotonic()
    pixels = _as_pnm(image)
    reading = _read(pixels, LANGUAGES, options, what)
    if reading.confidence is None or reading.confidence < RETRY_BELOW_CONFIDENCE:
        vertical = _read(pixels, VERTICAL_LANGUAGES, options, what)
        if (vertical.confidence or 0.0) > (reading.confidence or 0.0):
            reading = vertical
    return OcrText(reading.text, reading.confidence, round(time.monotonic() - started, 3), reading.languages)


def check_time_left(options: ParseOptions, done: int, total: int) -> None:
    if options.ocr_deadline is not None and time.monotonic() >= options.ocr_deadline:
        raise ParseFailed(
            f"OCR did not finish within its time budget of {options.limits.ocr_time_budget_s:g} s "
            f"(RAGKB_LIMITS__OCR_TIME_BUDGET_S): {done} of {total} pages read"
        )


def _as_pnm(image: Image.Image) -> bytes:
    """Uncompressed grayscale: the fastest format to hand over (PNG encoding cost ~0.1 s a page)."""
    buffer = io.BytesIO()
    image.convert("L").save(buffer, format="PPM")
    return buffer.getvalue()


def _read(pixels: bytes, languages: str, options: ParseOptions, what: str) -> OcrText:
    timeout = options.limits.ocr_page_timeout_s
    left = options.ocr_deadline - time.monotonic() if options.ocr_deadline is not None else timeout
    command = ["tesseract", "stdin", "stdout", "-l", languages, "--psm", "3", "tsv"]
    try:
        done = subprocess.run(
            command,
            check=False,
            input=pixels,
            capture_output=True,
            timeout=max(0.1, min(timeout, left)),
            env=_environment(),
        )
    except FileNotFoundError as exc:
        raise ParseFailed(f"OCR is not available on this server: install {_DEPENDENCIES}") from exc
    except subprocess.TimeoutExpired as exc:
        if left < timeout:
            raise ParseFailed(
                f"OCR did not finish within its time budget of {options.limits.ocr_time_budget_s:g} s "
                f"(RAGKB_LIMITS__OCR_TIME_BUDGET_S): stopped while reading {what}"
            ) from exc
        raise ParseFailed(f"OCR of {what} took longer than {timeout:g} s (RAGKB_LIMITS__OCR_PAGE_TIMEOUT_S)") from exc
    if done.returncode != 0:
        raise _failure(done.stderr.decode(errors="replace"), what)
    return replace(_text(done.stdout.decode(errors="replace")), languages=languages)


def _environment() -> dict[str, str]:
    return {**os.environ, "OMP_THREAD_LIMIT": "1"}


def _failure(stderr: str, what: str) -> ParseFailed:
    if "Failed loading language" in stderr or "Error opening data file" in stderr:
        return ParseFailed(
            f"OCR is not available on this server: its language data is missing (install {_DEPENDENCIES})"
        )
    last = stderr.strip().splitlines()[-1] if stderr.strip() else "no message"
    return ParseFailed(f"OCR could not read {what}: {last[:200]}")


def _text(tsv: str) -> OcrText:
    """Words → lines (by Tesseract's block, paragraph and line numbers) → text; blocks apart by a blank line."""
    blocks: list[list[str]] = []
    line_key: tuple[str, str, str] | None = None
    words: list[str] = []
    weighted = 0.0
    chars = 0
    for row in csv.DictReader(io.StringIO(tsv), delimiter="\t", quoting=csv.QUOTE_NONE):
        word = (row.get("text") or "").strip()
        if row.get("level") != _WORD_LEVEL or not word:
            continue
        key = (row["block_num"], row["par_num"], row["line_num"])
        if key != line_key:
            _flush_line(blocks, words, line_key, key)
            line_key, words = key, []
        words.append(word)
        confidence = float(row.get("conf") or -1)
        if confidence >= 0:
            weighted += confidence * len(word)
            chars += len(word)
    _flush_line(blocks, words, line_key, None)
    text = "\n\n".join("\n".join(lines) for lines in blocks)
    return OcrText(text, round(weighted / chars, 1) if chars else None, 0.0)


def _flush_line(
    blocks: list[list[str]], words: list[str], key: tuple[str, str, str] | None, following: tuple[str, str, str] | None
) -> None:
    if key is None or not words:
        return
    if not blocks:
        blocks.append([])
    blocks[-1].append(join_words(words))
    if following is not None and following[0] != key[0]:
        blocks.append([])


def join_words(words: list[str]) -> str:
    """Tesseract cuts Japanese into short runs as if they were words: a space goes between two runs only when
    neither side of the gap is a wide (CJK, kana, full-width) character."""
    text = words[0]
    for word in words[1:]:
        text += ("" if is_wide(text[-1]) or is_wide(word[0]) else " ") + word
    return text
