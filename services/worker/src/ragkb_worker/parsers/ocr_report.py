"""What the ingest report says about OCR: which pages were read, how confidently, and how long it took."""

from __future__ import annotations

from ragkb_worker.parsers.ocr import LANGUAGES, LOW_CONFIDENCE, VERTICAL_LANGUAGES, OcrText


def ocr_report(readings: list[tuple[int, OcrText]]) -> dict[str, object]:
    """`readings`: (page number, reading) of every page that was OCRed."""
    confidences = [(page, r.confidence) for page, r in readings if r.confidence is not None]
    weights = [(len(r.text), r.confidence) for _, r in readings if r.confidence is not None and r.text]
    total = sum(weight for weight, _ in weights)
    mean = sum(weight * confidence for weight, confidence in weights) / total if total else None
    return {
        "engine": "tesseract",
        "languages": LANGUAGES,
        "pages": [page for page, _ in readings],
        "mean_confidence": round(mean, 1) if mean is not None else None,
        "page_confidence": {str(page): confidence for page, confidence in confidences},
        "low_confidence_pages": [page for page, confidence in confidences if confidence < LOW_CONFIDENCE],
        "pages_without_text": [page for page, r in readings if not r.text.strip()],
        "vertical_pages": [page for page, r in readings if r.languages == VERTICAL_LANGUAGES],
        "seconds": round(sum(r.seconds for _, r in readings), 2),
    }
