"""Cross-encoder reranking under a per-request latency budget.

A `RerankerPool` holds the cross-encoders this server may use (the default model and the allowed ones; ONNX or
sentence-transformers, see `ragkb_models.cross_encoder`), each loaded once, and the HTTP rerank services it may
call (`http_reranking`, RerankerSettings.http_models), and scores (query, passage) pairs with them.
Reranking is an improvement, never a requirement: when the model is not allowed, cannot load, fails,
or would not finish within the budget, the outcome carries no scores and says why (`degraded_reason`), and the
caller keeps the fused order. It never raises for any of these.

Scores are mapped to 0–1 here, not by the model's configured activation: sigmoid of the logit for a one-label
model (the usual relevance head), the softmax probability of the last label for a model with several labels
(the "relevant" class of a binary classifier). The mapping is monotone, so the order is the model's order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ragkb_models.cross_encoder import CrossEncoderModel, load_cross_encoder
from ragkb_retriever.http_reranking import HttpReranker
from ragkb_retriever.settings import RerankerSettings

logger = logging.getLogger(__name__)

# A model that failed to load is not retried for this long: a broken folder would otherwise cost a load
# attempt (and a log entry) on every request, but a fixed one (a file restored, a mount back) comes back alone.
LOAD_RETRY_AFTER_S = 300.0
# Weight of the newest run in the per-pair latency estimate: recent enough to follow load on the machine,
# smooth enough that one slow run does not switch reranking off.
ESTIMATE_WEIGHT = 0.3


@dataclass(frozen=True)
class RerankOutcome:
    # One score per text, in input order, each in 0–1; None when the texts were not reranked.
    scores: list[float] | None
    # The reranker that was asked for (the default when the request named none); None when none is configured.
    model: str | None
    # Why the texts were not reranked; None when they were.
    degraded_reason: str | None
    took_ms: float

    @property
    def degraded(self) -> bool:
        return self.degraded_reason is not None


@dataclass(frozen=True)
class RerankerStats:
    """What one model has done so far, for readiness checks, metrics and tests."""

    loaded: bool
    load_attempts: int
    load_failure: str | None
    predictions: int
    ms_per_pair: float | None


class RerankerPool:
    def __init__(self, settings: RerankerSettings) -> None:
        self._settings = settings
        self._allowed = {name for name in [settings.model, *settings.allowed_models, *settings.http_models] if name}
        self._slots: dict[str, _ModelSlot | HttpReranker] = {}
        self._slots_lock = threading.Lock()

    @property
    def default_model(self) -> str | None:
        return self._settings.model

    def is_available(self, model: str | None) -> bool:
        """Whether `model` (None: the default) is configured and allowed here; it does not load anything."""
        name = model or self.default_model
        return name is not None and name in self._allowed

    def warm_up(self) -> None:
        """Load every configured model now (at start-up: the default and the allowed ones, an operator's
        short list), so that no request pays for a load. A failure is logged and remembered: requests then
        answer degraded with its reason."""
        for name in sorted(self._allowed):
            self._slot(name).warm_up()

    def stats(self, model: str | None) -> RerankerStats | None:
        name = model or self.default_model
        if name is None or name not in self._allowed:
            return None
        slot = self._slot(name)
        if isinstance(slot, HttpReranker):
            return RerankerStats(True, 0, None, slot.calls, slot.ms_per_pair)
        return slot.stats()

    def rerank(self, model: str | None, query: str, texts: Sequence[str], budget_ms: int) -> RerankOutcome:
        """Score every text against `query` with `model` (None: the default) within `budget_ms`."""
        started = time.perf_counter()
        name = model or self.default_model
        scores, reason = self._scores(name, query, texts, budget_ms)
        return RerankOutcome(scores, name, reason, (time.perf_counter() - started) * 1000)

    def close(self) -> None:
        """Drop queued work; a prediction already running finishes in the background."""
        with self._slots_lock:
            for slot in self._slots.values():
                slot.close()

    def _scores(
        self, name: str | None, query: str, texts: Sequence[str], budget_ms: int
    ) -> tuple[list[float] | None, str | None]:
        if name is None:
            return None, "no reranker is configured on this server (RAGKB_RERANKER__MODEL)"
        if name not in self._allowed:
            return None, (
                f"reranker {name!r} is not allowed on this server "
                "(RAGKB_RERANKER__MODEL / RAGKB_RERANKER__ALLOWED_MODELS)"
            )
        if not texts:
            return [], None
        if budget_ms <= 0:
            return None, "the reranking budget is 0 ms"
        return self._slot(name).score(query, list(texts), budget_ms)

    def _slot(self, name: str) -> _ModelSlot | HttpReranker:
        with self._slots_lock:
            if name not in self._slots:
                spec = self._settings.http_models.get(name)
                self._slots[name] = HttpReranker(name, spec) if spec else _ModelSlot(name, self._settings)
            return self._slots[name]


class _LoadFailed(Exception):
    pass


class _ModelSlot:
    """One model: its lazy load, its latency estimate and the one thread that runs it.

    Predictions on one model run one at a time, on a single worker thread: the Hugging Face fast tokenizer
    behind a CrossEncoder is not safe to call from several threads at once ("Already borrowed"), and on a
    small CPU concurrent forward passes only compete for the same cores, which makes every one of them late.
    A request waits for the worker within its own budget."""

    def __init__(self, name: str, settings: RerankerSettings) -> None:
        self.name = name
        self._settings = settings
        self._load_lock = threading.Lock()
        self._encoder: CrossEncoderModel | None = None
        self._failure: str | None = None
        self._failed_at = 0.0
        self._load_attempts = 0
        self._predictions = 0
        self._ms_per_pair: float | None = None
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reranker")

    def warm_up(self) -> None:
        try:
            self._worker.submit(self._warm).result()
        except _LoadFailed:
            pass  # logged and remembered by _load
        except Exception:  # the first prediction failed: requests will say why; start-up goes on
            logger.exception("reranker %r failed its warm-up prediction", self.name)

    def _warm(self) -> None:
        # The first call allocates and initialises: not timed, so it does not skew the estimate.
        self._loaded().logits([("warm up", "warm up")], batch_size=1)

    def stats(self) -> RerankerStats:
        return RerankerStats(
            self._encoder is not None, self._load_attempts, self._failure, self._predictions, self._ms_per_pair
        )

    def score(self, query: str, texts: list[str], budget_ms: int) -> tuple[list[float] | None, str | None]:
        if self._failure is not None and time.monotonic() - self._failed_at < LOAD_RETRY_AFTER_S:
            return None, self._failure
        if (estimate := self._ms_per_pair) is not None and estimate * len(texts) > budget_ms:
            return None, (
                f"reranking {len(texts)} passages would take ~{estimate * len(texts):.0f} ms, "
                f"over the budget of {budget_ms} ms"
            )
        return self._run(query, texts, budget_ms)

    def close(self) -> None:
        self._worker.shutdown(wait=False, cancel_futures=True)

    def _run(self, query: str, texts: list[str], budget_ms: int) -> tuple[list[float] | None, str | None]:
        job: Future[list[float]] = self._worker.submit(self._predict, query, texts)
        try:
            return job.result(timeout=budget_ms / 1000), None
        except FutureTimeout:
            job.cancel()  # still queued behind another request: drop it; running: let it finish and teach
            if self._encoder is None:
                return None, f"reranker {self.name!r} is still loading (first use)"
            return None, f"the reranker exceeded the budget of {budget_ms} ms"
        except _LoadFailed as failure:
            return None, str(failure)
        except Exception as error:  # the model's own failure: degrade, never fail the search
            logger.exception("reranker %r failed on %d passages", self.name, len(texts))
            return None, f"the reranker failed: {type(error).__name__}: {error}"

    def _predict(self, query: str, texts: list[str]) -> list[float]:
        encoder = self._loaded()
        started = time.perf_counter()
        logits = encoder.logits([(query, text) for text in texts], batch_size=self._settings.batch_size)
        self._learn((time.perf_counter() - started) * 1000 / len(texts))
        return to_unit_interval(logits)

    def _learn(self, ms_per_pair: float) -> None:
        # Only the worker thread writes; a reader sees either the old or the new float.
        self._predictions += 1
        previous = self._ms_per_pair
        self._ms_per_pair = (
            ms_per_pair if previous is None else ESTIMATE_WEIGHT * ms_per_pair + (1 - ESTIMATE_WEIGHT) * previous
        )

    def _loaded(self) -> CrossEncoderModel:
        with self._load_lock:
            if self._encoder is not None:
                return self._encoder
            if self._failure is not None and time.monotonic() - self._failed_at < LOAD_RETRY_AFTER_S:
                raise _LoadFailed(self._failure)
            self._encoder = self._load()
            return self._encoder

    def _load(self) -> CrossEncoderModel:
        self._load_attempts += 1
        started = time.perf_counter()
        try:
            encoder = load_cross_encoder(self.name, self._settings.max_length, self._settings.device)
        except Exception as error:
            logger.exception("reranker %r could not be loaded", self.name)
            self._failure = f"reranker {self.name!r} could not be loaded: {type(error).__name__}: {error}"
            self._failed_at = time.monotonic()
            raise _LoadFailed(self._failure) from error
        self._failure = None
        logger.info("reranker %r loaded in %.1f s", self.name, time.perf_counter() - started)
        return encoder


def to_unit_interval(logits: NDArray[np.float32]) -> list[float]:
    """Map raw cross-encoder logits (one per pair, or one row of label logits per pair) to 0–1: sigmoid for one
    label, the softmax probability of the last label for several."""
    values = np.asarray(logits, dtype=np.float64)
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.ndim == 1:
        return [float(p) for p in 1.0 / (1.0 + np.exp(-values))]
    shifted = np.exp(values - values.max(axis=1, keepdims=True))
    return [float(p) for p in shifted[:, -1] / shifted.sum(axis=1)]
