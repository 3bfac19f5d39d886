"""Per-KB settings that several processes read: the api validates and stores them, the worker applies them.

Stored as JSON on the KB row; the defaults here are the only chunking defaults."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, Field, field_validator, model_validator

from ragkb_core.formats import EXTENSION_MEDIA_TYPES

# What a document is: knowledge (answers) or reference (long authoritative originals, e.g. regulations).
DocType = Literal["knowledge", "reference"]
# The precision a KB's passages are embedded in (its queries: the retriever's RAGKB_RETRIEVER__QUERY_PRECISION).
PassagePrecision = Literal["auto", "float32", "int8", "int8-mixed", "int8-block"]
MAX_NOISE_PATTERNS = 50
MAX_PATTERN_CHARS = 500


class KbChunking(BaseModel):
    """How a KB's documents are cut and embedded. Changing it applies to documents ingested afterwards."""

    target_tokens: int = Field(default=256, ge=16, le=510)
    max_tokens: int = Field(default=400, ge=16, le=510)
    overlap_tokens: int = Field(default=32, ge=0, le=255)
    # Lines matching any of these regular expressions (boilerplate: page headers, disclaimers) are dropped.
    noise_patterns: list[str] = Field(default_factory=list, max_length=MAX_NOISE_PATTERNS)
    # OCR (Japanese and English) of PDF pages without a text layer and of images; off: a scan fails with
    # that reason and images are refused at ingestion. Read when a document is parsed.
    ocr: bool = True
    # The graph the packaged e5 embeds this KB's passages with (other models run on torch in float32 whatever
    # this says). auto, the default for new KBs: float32 or int8-block, whichever the worker's CPU runs faster,
    # measured once per CPU (ragkb_models.precision_choice). int8-block (every MatMul with int8 weights and
    # activations per block of 128, ragkb_models.onnx_encoder.BLOCK_INT8) is ~10× closer to float32's vectors
    # than int8-mixed (1 − cosine ~0.0001) and scored within 0.0013 of float32 in every mode on SciFact and JSQuAD
    # (README, Benchmarks: int8-block); it ran ~1.3× float32's speed on CPUs with AVX-512 VNNI and ~0.8× on an
    # AVX2-only one, hence auto. int8 and int8-mixed (dynamic int8: one activation scale per run) encode at
    # ~1.4–1.8× float32's speed on both but lost up to 0.0057 / 0.0033. KBs created before int8-block became the
    # default have float32 written into their chunking (migration 0016, then the API's full settings), those
    # created while it was have int8-block: the default applies to new KBs only. Each graph's vectors are ≥ 0.99
    # cosine to float32's, so a KB switched any way keeps answering while its documents are ingested again.
    passage_precision: PassagePrecision = "auto"
    # A second embedding model (a name of EmbeddingSettings.model_names, e.g. the packaged "all-MiniLM-L6-v2")
    # whose passage vectors form a third leg of hybrid searches, fused beside the dense and keyword legs with
    # KbRetrieval.second_weight. For English KBs only: measured held out (bench/feedback.py "second model leg",
    # README *A second model's dense leg*), MiniLM's leg raised SciFact's hybrid nDCG@10 by ~0.009–0.011 and lost
    # on every Japanese collection (the model knows no Japanese). It costs a second encoder on every chunk and
    # question. Fixed when the KB is created (its index holds a vector of this model's size); changed only by
    # re-indexing, like the embedding model. None: no third leg.
    second_model: str | None = Field(default=None, min_length=1, max_length=200)

    @field_validator("noise_patterns")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            if len(pattern) > MAX_PATTERN_CHARS:
                raise ValueError(f"a noise pattern may have at most {MAX_PATTERN_CHARS} characters")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc
        return patterns

    @model_validator(mode="after")
    def _sizes_are_ordered(self) -> KbChunking:
        if self.target_tokens > self.max_tokens:
            raise ValueError("target_tokens must not exceed max_tokens")
        if self.overlap_tokens >= self.target_tokens:
            raise ValueError("overlap_tokens must be smaller than target_tokens")
        return self

    def compiled_noise_patterns(self) -> list[re.Pattern[str]]:
        return [re.compile(pattern) for pattern in self.noise_patterns]

    def keeping_second_model(self, stored: KbChunking) -> KbChunking:
        """These settings as a change of `stored` means them: a request that leaves `second_model` out keeps the
        KB's (a client that predates it must not drop a KB's third leg by sending its chunking)."""
        if "second_model" in self.model_fields_set:
            return self
        return self.model_copy(update={"second_model": stored.second_model})


# -- sync ----------------------------------------------------------------------------------------------

MAX_SYNC_PATTERNS = 100
MAX_INCLUDE_PREFIXES = 100
MAX_PREFIX_CHARS = 1024
# Matched with a search anywhere in the source_id (a path with `/` separators): hidden files and folders,
# editor and OS leftovers, dependency and cache folders.
DEFAULT_EXCLUDE_PATTERNS: tuple[str, ...] = (
    r"(^|/)\.",
    r"~$",
    r"\.tmp$",
    r"(^|/)Thumbs\.db$",
    r"(^|/)node_modules/",
    r"(^|/)__pycache__/",
)
# Every extension the service can parse (ragkb_core.formats is the one list).
ELIGIBLE_EXTENSIONS: tuple[str, ...] = tuple(sorted(EXTENSION_MEDIA_TYPES))


class KbSync(BaseModel):
    """Which files of a synced folder belong in the KB. A manifest entry is kept when its source_id starts
    with one of `include_prefixes` (none: every path), matches none of `exclude_patterns` (regular
    expressions searched anywhere in the source_id) and ends with one of `extensions`."""

    include_prefixes: list[Annotated[str, Field(min_length=1, max_length=MAX_PREFIX_CHARS)]] = Field(
        default_factory=list, max_length=MAX_INCLUDE_PREFIXES
    )
    exclude_patterns: list[str] = Field(
        default_factory=lambda: list(DEFAULT_EXCLUDE_PATTERNS), max_length=MAX_SYNC_PATTERNS
    )
    extensions: list[str] = Field(default_factory=lambda: list(ELIGIBLE_EXTENSIONS), max_length=200)

    @field_validator("exclude_patterns")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            _check_pattern(pattern, "an exclude pattern")
        return patterns

    @field_validator("extensions")
    @classmethod
    def _extensions_are_parseable(cls, extensions: list[str]) -> list[str]:
        normalised = [ext.lower() if ext.startswith(".") else f".{ext.lower()}" for ext in extensions]
        unknown = sorted(set(normalised) - set(EXTENSION_MEDIA_TYPES))
        if unknown:
            raise ValueError(f"ragkb cannot parse these extensions: {', '.join(unknown)}")
        return list(dict.fromkeys(normalised))


def _check_pattern(pattern: str, what: str) -> None:
    if not pattern or len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"{what} must have 1 to {MAX_PATTERN_CHARS} characters")
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc


# -- retrieval -----------------------------------------------------------------------------------------

# How the dense and keyword legs are fused: Reciprocal Rank Fusion (ranks only), or distribution-based score
# fusion (each leg's scores normalised by their mean ± 3 standard deviations, then summed).
FusionMethod = Literal["rrf", "dbsf"]
MAX_TOP_K = 200
MAX_BLOCKS = 200
MAX_CANDIDATE_MULTIPLIER = 50
MAX_FEEDBACK_PASSAGES = 20
MAX_FEEDBACK_WEIGHT = 5.0
# The similarity floor a KB applies unless it sets its own (KbRetrieval.min_relevance): off. Cross-validation
# across collections (bench/relevance.py, SciFact train and JSQuAD dev) recommends 0.00045 for question-style
# KBs (a dense cosine of ~0.815 with the packaged e5: held-out recall@10 loss 0.0049 on SciFact, 0.0036 on
# JSQuAD), but a floor on the dense cosine also drops a passage only the keyword leg found (an error code, a
# name: it carries the dense leg's lowest cosine), and terse keyword queries over short documents lose their
# answers (11 tests of the suite did), so a KB opts in (README, Relevance and the similarity floor).
DEFAULT_MIN_RELEVANCE = 0.0
# FEEDBACK_DEFAULTS: dense pseudo-relevance feedback (KbRetrieval.feedback_passages, feedback_weight), chosen by
# cross-validation across SciFact train, JSQuAD dev and a JaQuAD passage set (bench/feedback.py; README,
# Benchmarks): k 2, β 0.5 won on every fold's training part; held out, SciFact +0.005 nDCG@10 (leave-one-
# collection-out 95 % CI [+0.0001, +0.0103]), JSQuAD +0.0005, JaQuAD −0.0004 to −0.0014 (CIs across 0). It costs
# a second retrieval round (the retriever's search p50 8.7 → 18.4 ms on SciFact, loaded machine). Off by default
# (0 passages): a held-out +0.005 on English, nothing on Japanese (most of ragkb's KBs), is not worth doubling every
# KB's retrieval time unasked, nor changing the answers of every existing KB on upgrade; an English KB opts in
# with `feedback_passages` 2 (the weight's default is the cross-validated one).
FEEDBACK_PASSAGES = 0
FEEDBACK_WEIGHT = 0.5
# The second model's leg weight (KbRetrieval.second_weight), for KBs that have one (KbChunking.second_model).
SECOND_WEIGHT = 1.5


class RelevanceCalibration(BaseModel):
    """How a passage's dense cosine with the question becomes its 0–1 relevance (SearchHit.relevance):
    1 / (1 + exp(−steepness × (cosine − midpoint))). A cosine has no fixed meaning across models (e5's
    unrelated pairs score ~0.75, MiniLM's ~0.1), so each model has its own (EmbeddingSettings.relevance_of),
    and a KB may set one fitted on its own questions."""

    midpoint: float = Field(ge=-1, le=1)
    steepness: float = Field(gt=0, le=1000)
    # The question's keyword evidence in the passage (ragkb_core.fusion.keyword_coverage: the IDF-weighted share
    # of the question's terms the passage holds, 0–1), added to the cosine with this weight, around `coverage_neutral`:
    # 1 / (1 + exp(−steepness × (cosine + coverage_weight × (coverage − coverage_neutral) − midpoint))). A passage whose
    # coverage is unknown (an external store's) counts as neutral, so 0 (the default) is the cosine alone.
    coverage_weight: float = Field(default=0.0, ge=0, le=1)
    coverage_neutral: float = Field(default=0.0, ge=0, le=1)


# multilingual-e5-small's: P(relevant | cosine) over each question's 100 nearest passages, fitted on SciFact train
# and JSQuAD dev pooled, each weighing the same (bench/relevance.py: midpoint 0.9078, steepness 83.0).
PACKAGED_E5_RELEVANCE = RelevanceCalibration(midpoint=0.9078, steepness=83.0)
# The same model's with the question's keyword coverage, and the floor to pair it with, for a KB whose questions
# use its documents' words and must hear "nothing relevant" (set both: `relevance_calibration`, `min_relevance`).
# bench/relevance.py: the logistic fitted on SciFact train and JSQuAD dev answers, the coverage weight chosen on
# half of the out-of-domain questions; the floor is the highest whose recall@10 loss stays under 0.005 on both
# (0.0025 and 0.0045; held out, each collection's floor chosen on the other, 0.0062 and 0.0047). It leaves 93–100 %
# of the out-of-domain questions (English and Japanese, in both KBs) without a passage, where a cosine floor
# leaves 67 % of English ones in an English KB and 30 % of Japanese ones in a Japanese KB. Not the default: a
# question sharing no word with its answer loses it (`--paraphrases`: 7 of 12 paraphrases of a small handbook and
# 0 of 5 cross-language questions kept, against 12 and 4 with the cosine floor), and ragkb's KBs are asked across
# Japanese and English.
PACKAGED_E5_COVERAGE_RELEVANCE = RelevanceCalibration(
    midpoint=0.9377, steepness=42.24, coverage_weight=0.125, coverage_neutral=0.2688
)
COVERAGE_MIN_RELEVANCE = 0.008489
MAX_RERANK_BUDGET_MS = 60_000


class RetrievalOverrides(BaseModel):
    """What a search request may change of a KB's retrieval settings, within the same bounds.

    Every field left out (None) keeps the KB's own value."""

    top_k: int | None = Field(default=None, ge=1, le=MAX_TOP_K)
    hybrid: bool | None = None
    fusion: FusionMethod | None = None
    rrf_k: int | None = Field(default=None, ge=1, le=1000)
    dense_weight: float | None = Field(default=None, ge=0, le=10)
    keyword_weight: float | None = Field(default=None, ge=0, le=10)
    second_weight: float | None = Field(default=None, ge=0, le=10)
    rerank: bool | None = None
    candidate_multiplier: int | None = Field(default=None, ge=1, le=MAX_CANDIDATE_MULTIPLIER)
    score_threshold: float | None = Field(default=None, ge=0, le=1)
    rerank_budget_ms: int | None = Field(default=None, ge=0, le=MAX_RERANK_BUDGET_MS)
    rerank_weight: float | None = Field(default=None, ge=0, le=1)
    min_relevance: float | None = Field(default=None, ge=0, le=1)
    feedback_passages: int | None = Field(default=None, ge=0, le=MAX_FEEDBACK_PASSAGES)
    feedback_weight: float | None = Field(default=None, ge=0, le=MAX_FEEDBACK_WEIGHT)
    max_blocks: int | None = Field(default=None, ge=1, le=MAX_BLOCKS)
    doc_type_quotas: dict[DocType, Annotated[int, Field(ge=0, le=MAX_BLOCKS)]] | None = None


class KbRetrieval(BaseModel):
    """How a KB answers a question. Every field may be changed at any time (nothing is re-indexed)."""

    # Passages a KB contributes to an answer.
    top_k: int = Field(default=12, ge=1, le=MAX_TOP_K)
    # Dense + BM25 fused (see `fusion`); off: dense only. A request's `mode` overrides it.
    hybrid: bool = True
    # How hybrid fuses its legs (see FusionMethod). DBSF with equal leg weights, chosen by cross-validation across
    # SciFact, JSQuAD and a JaQuAD passage set (bench/fusion.py, leave one collection out and 5 folds within them;
    # README, Benchmarks): RRF (any k, any weights) lost to DBSF on every collection, most where one leg is far
    # stronger than the other (JSQuAD). A keyword weight of 1.5 measured 0.0005 better on average (less than the
    # noise of ties) but 0.005 worse for KBs still on analyzer version 1 (SciFact), which follow this default.
    fusion: FusionMethod = "dbsf"
    # Reciprocal Rank Fusion constant in the paper's convention: score = Σ 1 / (k + rank / weight), rank from 1
    # (Qdrant's rank-scaling weights; weight 1 is plain RRF).
    rrf_k: int = Field(default=60, ge=1, le=1000)
    # Leg weights: RRF scales a leg's ranks (above); DBSF multiplies a leg's normalised scores (the engine's DBSF
    # has none, so weighted DBSF is fused by the retriever from the engine's two legs). 0 drops the leg.
    dense_weight: float = Field(default=1.0, ge=0, le=10)
    keyword_weight: float = Field(default=1.0, ge=0, le=10)
    # The weight of the second model's leg (KbChunking.second_model; nothing without one) in hybrid searches.
    # 1.5: chosen on PubMedQA alone and held out on SciFact (bench/feedback.py "second model leg at 700",
    # 0.7421 → 0.7509 nDCG@10); 0 drops the leg.
    second_weight: float = Field(default=SECOND_WEIGHT, ge=0, le=10)
    # None: rerank when the server has a reranker model configured (RAGKB_RERANKER__MODEL).
    rerank: bool | None = None
    # A sentence-transformers cross-encoder id or folder; None: the server's default reranker. It must be
    # one the server allows (RAGKB_RERANKER__MODEL or RAGKB_RERANKER__ALLOWED_MODELS).
    reranker_model: str | None = Field(default=None, min_length=1, max_length=500)
    # Reranking reads top_k × this many fused candidates; without reranking each leg still fetches that many.
    candidate_multiplier: int = Field(default=7, ge=1, le=MAX_CANDIDATE_MULTIPLIER)
    # Minimum reranker score (0–1) a passage needs; applied only when the reranker ran.
    score_threshold: float = Field(default=0.0, ge=0, le=1)
    # Time the reranker may take for one request; over it, the fused order is returned marked degraded.
    rerank_budget_ms: int = Field(default=1500, ge=0, le=MAX_RERANK_BUDGET_MS)
    # How much of a reranked answer's order is the reranker's: the served score is this × the reranker's
    # score + the rest × the fused score scaled to 0–1 over the candidates (ragkb_models.cross_encoder
    # .blend_scores). 1: the reranker's order alone. score_threshold still reads the reranker's own score.
    rerank_weight: float = Field(default=1.0, ge=0, le=1)
    # The similarity floor: a passage whose relevance (0–1, SearchHit.relevance) is under it is left out, with
    # or without a reranker, so a question about something the KB does not hold is answered with nothing.
    # 0: no floor. Passages without a relevance (a keyword-only search, a model without a calibration) pass.
    min_relevance: float = Field(default=DEFAULT_MIN_RELEVANCE, ge=0, le=1)
    # The mapping from dense cosine to relevance for this KB; None: its embedding model's default.
    relevance_calibration: RelevanceCalibration | None = None
    # Dense pseudo-relevance feedback (Rocchio), in hybrid searches (where it was measured): after a first pass,
    # the question's vector is moved towards the mean vector of the first pass's `feedback_passages` best fused
    # passages (q + feedback_weight × mean, then normalised) and the KB is searched again with it: one more
    # retrieval round. 0 passages or weight 0: off. FEEDBACK_DEFAULTS says how the defaults were chosen.
    feedback_passages: int = Field(default=FEEDBACK_PASSAGES, ge=0, le=MAX_FEEDBACK_PASSAGES)
    feedback_weight: float = Field(default=FEEDBACK_WEIGHT, ge=0, le=MAX_FEEDBACK_WEIGHT)
    # Passages in an answer across all KBs searched together.
    max_blocks: int = Field(default=12, ge=1, le=MAX_BLOCKS)
    # Per document type, the most passages of that type an answer holds, filled from that type's own
    # candidates (so long reference documents cannot crowd out knowledge, or the reverse).
    doc_type_quotas: dict[DocType, Annotated[int, Field(ge=0, le=MAX_BLOCKS)]] | None = None

    @property
    def feeds_back(self) -> bool:
        return self.feedback_passages > 0 and self.feedback_weight > 0

    @model_validator(mode="after")
    def _one_leg_counts(self) -> KbRetrieval:
        if self.dense_weight == 0 and self.keyword_weight == 0:
            raise ValueError("dense_weight and keyword_weight cannot both be 0")
        return self

    def with_overrides(self, overrides: RetrievalOverrides) -> KbRetrieval:
        changes = overrides.model_dump(exclude_none=True)
        return self.model_validate(self.model_dump() | changes)


# -- keyword analysis ----------------------------------------------------------------------------------

# Languages with a Snowball stemmer (PyStemmer's names).
StemLanguage = Literal[
    "english", "french", "german", "spanish", "italian", "portuguese", "dutch", "swedish", "norwegian", "danish",
    "finnish", "hungarian", "romanian", "turkish", "indonesian", "catalan", "basque", "irish", "lithuanian",
    "czech", "polish", "estonian", "russian", "greek", "arabic", "hindi", "nepali", "tamil", "armenian", "yiddish",
]  # fmt: skip
_OTHER_SCRIPTS: dict[str, str] = {
    "russian": "cyrillic",
    "greek": "greek",
    "arabic": "arabic",
    "hindi": "devanagari",
    "nepali": "devanagari",
    "tamil": "tamil",
    "armenian": "armenian",
    "yiddish": "hebrew",
}
# The script each language stems (ragkb_analyzer.scripts names them): a KB stems each word by the language it
# configured for that word's script, so it may configure at most one language per script.
LANGUAGE_SCRIPTS: dict[str, str] = {
    language: _OTHER_SCRIPTS.get(language, "latin") for language in get_args(StemLanguage)
}
MAX_LANGUAGES = 4
MAX_TITLE_WEIGHT = 4
MAX_BM25_K1 = 3.0
# Lucene's k1 and b: every KB created before BM25 was set per KB was indexed with them (migration 0017).
LEGACY_BM25: dict[str, float] = {"bm25_k1": 1.2, "bm25_b": 0.75}


def _english() -> list[StemLanguage]:
    return ["english"]


class KbAnalyzer(BaseModel):
    """How a KB's text becomes BM25 terms. Fixed when the KB is created; changed only by re-indexing.

    `japanese`: "sudachi" — Sudachi split mode C, normalized forms; "char-bigram" — overlapping
    character bigrams of Japanese runs (the plain baseline). `words`: how every other script becomes terms
    (see the field)."""

    japanese: Literal["sudachi", "char-bigram"] = "sudachi"
    # With sudachi: also index the mode A sub-words of long compounds (recall for partial-word queries).
    sudachi_mode_a_subwords: bool = False
    # With sudachi: also index character bigrams of Japanese runs as extra terms. On by default for new KBs:
    # measured on JSQuAD (bench/analyzers.py), nDCG@10 0.9468 against 0.9420 for Sudachi alone and 0.9389 for
    # plain bigrams. KBs created before this setting existed are stored with it off (migration 0005).
    char_bigrams: bool = True
    # "unicode" (analyzer version 2, the default for new KBs): words of every script by Unicode word
    # segmentation, case- and accent-folded, stop words removed and stemmed per `languages`; Thai, Lao,
    # Myanmar and Khmer as grapheme bigrams, Korean words whole plus syllable bigrams. "ascii-lower"
    # (version 1): runs of a-z and 0-9, lower-cased, and nothing of other scripts ("Müller" → m, ller). Every
    # KB created before version 2 is stored with "ascii-lower" (migration 0010) and keeps it until re-indexed.
    words: Literal["ascii-lower", "unicode"] = "unicode"
    # Snowball stemmers (and stop words, where `stop_words`), at most one language per script: a word is
    # stemmed by the language of its script, so ["english", "russian"] stems both in a mixed KB.
    languages: list[StemLanguage] = Field(default_factory=_english, max_length=MAX_LANGUAGES)
    # Drop each language's stop words (English: Lucene's 33; others: Snowball's lists).
    stop_words: bool = True
    # How many times the document's title counts in each chunk's keyword terms (every chunk is indexed after its
    # title and heading path, as it is embedded; 2 adds the title once more). 2 by default: chosen by
    # cross-validation across SciFact, JSQuAD and JaQuAD (bench/fusion.py), better than 1 and than none.
    title_weight: int = Field(default=2, ge=1, le=MAX_TITLE_WEIGHT)
    # BM25's term saturation (k1) and length normalisation (b) of a chunk's term weights
    # (ragkb_analyzer.Bm25Encoder). 0.9 and 0.6 by default, where Lucene has 1.2 and 0.75: chosen by
    # cross-validation across SciFact, PubMedQA, JSQuAD and JaQuAD (bench/bm25_params.py, README Benchmarks) on
    # the keyword leg and on both search modes together; the hybrid answer did not lose on any of the four.
    bm25_k1: float = Field(default=0.9, gt=0, le=MAX_BM25_K1)
    bm25_b: float = Field(default=0.6, ge=0, le=1)

    @property
    def version(self) -> str:
        """Stamped on every indexed chunk: a change of terms needs a re-index. Version 1 keeps the stamps
        indexes were built with before analyzers were configurable."""
        if self.words == "ascii-lower":
            if self.japanese == "char-bigram":
                return "cjk-bigram+latin-lower/1"
            return f"sudachi-c-norm+latin-lower/1{self._extras()}"
        japanese = "cjk-bigram" if self.japanese == "char-bigram" else "sudachi-c-norm"
        stemming = "".join(f"-{language}" for language in self.languages)
        title = f"+title{self.title_weight}" if self.title_weight != 1 else ""
        # Lucene's k1 and b leave the stamp as it was before they were set per KB, so that no index needs a re-index.
        bm25 = "" if self._bm25() == LEGACY_BM25 else f"+bm25-k{self.bm25_k1:g}-b{self.bm25_b:g}"
        stop = "-stop" if self.stop_words else ""
        return f"{japanese}+uax29-fold{stop}{stemming}{title}{bm25}/2{self._extras()}"

    def _bm25(self) -> dict[str, float]:
        return {"bm25_k1": self.bm25_k1, "bm25_b": self.bm25_b}

    def _extras(self) -> str:
        return ("+mode-a-sub" if self.sudachi_mode_a_subwords else "") + ("+cjk-bigram" if self.char_bigrams else "")

    @model_validator(mode="before")
    @classmethod
    def _defaults_of_the_variant(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        # char_bigrams defaults to on for Sudachi; for the plain bigram analyzer it is not an extra at all.
        if data.get("japanese") == "char-bigram":
            data = {"char_bigrams": False, **data}
        # Version 1 had no stemming or stop words, indexed the title once and weighed terms with Lucene's k1 and b.
        if data.get("words") == "ascii-lower":
            data = {"languages": [], "stop_words": False, "title_weight": 1, **LEGACY_BM25, **data}
        return data

    @model_validator(mode="after")
    def _extras_need_sudachi(self) -> KbAnalyzer:
        if self.japanese != "sudachi" and (self.sudachi_mode_a_subwords or self.char_bigrams):
            raise ValueError("sudachi_mode_a_subwords and char_bigrams add terms to the sudachi analyzer only")
        return self

    @model_validator(mode="after")
    def _languages_need_unicode_words(self) -> KbAnalyzer:
        if self.words == "ascii-lower" and (
            self.languages or self.stop_words or self.title_weight != 1 or self._bm25() != LEGACY_BM25
        ):
            raise ValueError('languages, stop_words, title_weight, bm25_k1 and bm25_b apply to words: "unicode" only')
        scripts = [LANGUAGE_SCRIPTS[language] for language in self.languages]
        if len(set(scripts)) < len(scripts):
            raise ValueError("languages: at most one language per script (a word is stemmed by its script's)")
        return self


def with_legacy_bm25(analyzer: Any) -> Any:
    """A KB analyzer stored before k1 and b were set per KB (it has no bm25_k1) was indexed with Lucene's: how
    migration 0017 rewrites the database's and how an archive written then is read. Migrations call it: never
    change what it returns."""
    if isinstance(analyzer, dict) and "bm25_k1" not in analyzer:
        return {**analyzer, **LEGACY_BM25}
    return analyzer


# -- index layout on a Qdrant cluster ------------------------------------------------------------------

MAX_SHARDS = 128
MAX_REPLICATION = 16


class KbIndexLayout(BaseModel):
    """How a KB's index is laid out on a Qdrant cluster (the server backend), chosen when the KB is created and
    kept by every generation a re-index builds. A field left out takes the retriever's default
    (RAGKB_QDRANT__SHARD_NUMBER, __REPLICATION_FACTOR, __WRITE_CONSISTENCY_FACTOR). Qdrant Edge, the embedded
    index, has one shard and one copy: it refuses any other layout."""

    shard_number: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SHARDS,
        description="Shards the KB's points are spread over (by point id); more shards spread one KB over more "
        "Qdrant nodes. BM25 statistics are per shard, so keep 1 for KBs under a few million chunks.",
    )
    replication_factor: int | None = Field(
        default=None,
        ge=1,
        le=MAX_REPLICATION,
        description="Copies of each shard on different nodes: 2 keeps the KB searchable and writable while a "
        "node is down.",
    )
    write_consistency_factor: int | None = Field(
        default=None,
        ge=1,
        le=MAX_REPLICATION,
        description="Copies that must have applied a write before it is acknowledged (at most "
        "replication_factor); more is safer against a node lost right after a write, and refuses writes while "
        "fewer copies are up.",
    )

    @model_validator(mode="after")
    def _consistency_within_replication(self) -> KbIndexLayout:
        if self.write_consistency_factor is not None and self.replication_factor is not None:
            check_write_consistency(self.write_consistency_factor, self.replication_factor)
        return self

    def filled(self, defaults: KbIndexLayout) -> KbIndexLayout:
        """This layout with every field left out taken from `defaults` (a complete layout); ValueError when the
        result asks more copies to acknowledge a write than there are."""
        merged = defaults.model_dump() | self.model_dump(exclude_none=True)
        check_write_consistency(merged["write_consistency_factor"], merged["replication_factor"])
        return KbIndexLayout(**merged)

    @property
    def is_single_copy(self) -> bool:
        """One shard, one copy: the only layout an embedded (Edge) index has. Fields left out count as 1."""
        return all(value in (None, 1) for value in self.model_dump().values())


def check_write_consistency(write_consistency_factor: int, replication_factor: int) -> None:
    if write_consistency_factor > replication_factor:
        raise ValueError(
            f"write_consistency_factor ({write_consistency_factor}) cannot exceed replication_factor "
            f"({replication_factor}): no write could ever be acknowledged"
        )
