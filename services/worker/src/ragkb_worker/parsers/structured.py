"""Delimited tables (CSV, TSV) and data files (JSON, YAML): the text as it is, cut where it is cheap to cut.

A table is one section whose header row the chunker repeats; JSON and YAML get one section per top-level key.
"""

from __future__ import annotations

import re

from ragkb_worker.parsers.model import ParsedDocument, ParseOptions, Section
from ragkb_worker.parsers.text import decode_text

# A key of a pretty-printed JSON object, on its own line: "name": …
_JSON_KEY = re.compile(r'^(?P<indent>[ \t]+)"(?P<key>(?:[^"\\\n]|\\.)*)"[ \t]*:', re.MULTILINE)
# A top-level YAML mapping key at the start of a line (not a comment, a list item or a document marker).
_YAML_KEY = re.compile(r"^(?P<key>[^\s#\-:][^:\n]*?|\"[^\"\n]+\"|'[^'\n]+'):(?=[ \t]|$)", re.MULTILINE)


def parse_delimited(data: bytes, options: ParseOptions) -> ParsedDocument:
    text = decode_text(data)
    start = len(text) - len(text.lstrip())
    header_end = _first_record_end(text, start)
    header = text[start:header_end] if text[header_end:].strip() else None
    return ParsedDocument(text, [Section((), start, len(text), kind="table", header=header)])


def _first_record_end(text: str, start: int) -> int:
    """End of the header record: its first line, extended while a quoted field is still open."""
    end = text.find("\n", start)
    while end != -1 and text.count('"', start, end) % 2:
        end = text.find("\n", end + 1)
    return len(text) if end == -1 else end


def parse_json(data: bytes, options: ParseOptions) -> ParsedDocument:
    text = decode_text(data)
    keys: list[re.Match[str]] = []
    if text.lstrip().startswith("{"):
        matches = list(_JSON_KEY.finditer(text))
        # The first key's indentation is the top level's; deeper keys stay inside their parent's section.
        keys = [m for m in matches if m["indent"] == matches[0]["indent"]] if matches else []
    return ParsedDocument(text, _key_sections(text, [(m.start(), m["key"]) for m in keys]))


def parse_yaml(data: bytes, options: ParseOptions) -> ParsedDocument:
    text = decode_text(data)
    keys = [(m.start(), m["key"].strip("\"'")) for m in _YAML_KEY.finditer(text)]
    return ParsedDocument(text, _key_sections(text, keys))


def _key_sections(text: str, keys: list[tuple[int, str]]) -> list[Section]:
    """One section per key, from its line to the next key's; what comes before the first key stands alone."""
    if not keys:
        return [Section((), 0, len(text))]
    bounds = [*(start for start, _ in keys), len(text)]
    sections = [Section((), 0, keys[0][0])] if text[: keys[0][0]].strip() else []
    sections += [Section((key,), start, bounds[i + 1]) for i, (start, key) in enumerate(keys)]
    return sections
