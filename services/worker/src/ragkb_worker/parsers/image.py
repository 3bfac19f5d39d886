"""Images (PNG, JPEG, TIFF, WebP): their text by OCR, one page per frame of a multi-page TIFF (page 1 otherwise).

The pixel count is checked from the header before anything is decoded (decompression bombs), and only the
four formats' decoders are tried.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterator

from PIL import Image, ImageOps, UnidentifiedImageError

from ragkb_core.errors import ParseFailed, PayloadTooLarge
from ragkb_worker.parsers.builder import OutlineBuilder
from ragkb_worker.parsers.model import ParsedDocument, ParseOptions
from ragkb_worker.parsers.ocr import OcrText, check_time_left, recognise
from ragkb_worker.parsers.ocr_report import ocr_report

_DECODERS = ["PNG", "JPEG", "TIFF", "WEBP"]
# Tesseract reads text best at 20–40 px per line: screenshots (about 96 dpi) are enlarged twice.
_SMALL_WIDTH = 1600
_ENLARGE = 2


def parse_image(data: bytes, options: ParseOptions) -> ParsedDocument:
    if not options.ocr:
        raise ParseFailed("OCR is off for this knowledge base (chunking.ocr): an image has no text without it")
    options = options.with_deadline()
    image = _open(data, options)
    frames = getattr(image, "n_frames", 1) if image.format == "TIFF" else 1
    _check_frames(frames, options)
    builder = OutlineBuilder(options.limits.max_text_chars)
    readings: list[tuple[int, OcrText]] = []
    for number, frame in enumerate(_frames(image, frames, options), start=1):
        check_time_left(options, number - 1, frames)
        reading = recognise(_prepared(frame), options, f"frame {number}" if frames > 1 else "the image")
        readings.append((number, reading))
        options.beat()
        builder.reset_path([], page=number)
        builder.block(reading.text)
    parsed = builder.build()
    if not parsed.text.strip():
        raise ParseFailed(f"OCR found no text in the image ({frames} page(s))")
    return ParsedDocument(parsed.text, parsed.sections, {"ocr": ocr_report(readings)})


def _open(data: bytes, options: ParseOptions) -> Image.Image:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=_DECODERS)
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as exc:
        raise PayloadTooLarge(f"the image is too large to decode: {exc}") from exc
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise ParseFailed("the image cannot be read: it is damaged or not a PNG, JPEG, TIFF or WebP file") from exc
    _check_pixels(image.size, options)
    return image


def _check_pixels(size: tuple[int, int], options: ParseOptions) -> None:
    width, height = size
    if width * height > options.limits.max_image_pixels:
        raise PayloadTooLarge(
            f"the image has {width}×{height} pixels, more than the limit of {options.limits.max_image_pixels} "
            "(RAGKB_LIMITS__MAX_IMAGE_PIXELS)"
        )


def _check_frames(frames: int, options: ParseOptions) -> None:
    limit = min(options.limits.max_pages, options.limits.max_ocr_pages)
    if frames > limit:
        raise PayloadTooLarge(
            f"the image has {frames} pages, more than the {limit} that are OCRed in one document "
            "(RAGKB_LIMITS__MAX_OCR_PAGES, RAGKB_LIMITS__MAX_PAGES)"
        )


def _frames(image: Image.Image, frames: int, options: ParseOptions) -> Iterator[Image.Image]:
    for index in range(frames):
        try:
            image.seek(index)
            _check_pixels(image.size, options)
            image.load()
        except (OSError, ValueError, EOFError, SyntaxError) as exc:
            what = f"page {index + 1} of the image" if frames > 1 else "the image"
            raise ParseFailed(f"{what} cannot be decoded: the file is damaged or truncated") from exc
        yield image


def _prepared(frame: Image.Image) -> Image.Image:
    """Upright (EXIF orientation), grayscale, and enlarged when small."""
    upright = ImageOps.exif_transpose(frame.convert("RGB")) or frame
    gray = upright.convert("L")
    if gray.width < _SMALL_WIDTH:
        gray = gray.resize((gray.width * _ENLARGE, gray.height * _ENLARGE), Image.Resampling.LANCZOS)
    return gray
