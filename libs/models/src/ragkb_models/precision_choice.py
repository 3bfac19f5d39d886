"""The `auto` precision of the packaged e5: float32 or int8-block, whichever this CPU runs faster, measured once.

Why measure rather than pick one: int8-block (ONNX Runtime's MatMulNBits, int8 activations per block) ran ~1.3×
float32's speed on CPUs with int8 dot-product instructions (AVX-512 VNNI), and 0.75–0.82× on an AVX2-only EPYC
(README, Benchmarks: *Which graph is faster depends on the CPU*). The two graphs answer alike (int8-block within
0.0013 nDCG@10 of float32 in every mode), so the choice is speed alone, and only a run on the CPU itself says
which is faster: the kernels ONNX Runtime picks depend on its version and on the instructions present.

The measurement (a few seconds) is made once per CPU, ONNX Runtime version and graph pair, and kept beside the
graphs (`onnx/precision-choice.json`, written like a graph: whole, with a build marker), so every process on the
machine, and every start, makes the same choice. Passages and queries are measured apart: a batch of passages and
a single short question do not stress the kernels alike."""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import onnxruntime

from ragkb_models.cache import build_file, build_lock, file_is_complete
from ragkb_models.onnx_encoder import graph_provenance

logger = logging.getLogger(__name__)

Shape = Literal["passages", "queries"]
Choice = Literal["float32", "int8-block"]
CHOICES: tuple[Choice, ...] = ("float32", "int8-block")
_GRAPH_OF: dict[Choice, Literal["fp32", "int8-block"]] = {"float32": "fp32", "int8-block": "int8-block"}
CHOICE_FILE = "onnx/precision-choice.json"
# int8-block only where it saves at least this share of the CPU: near a tie, float32's exact vectors.
MIN_SAVING = 0.10
# Bump when the workload or the rule changes, so that kept choices are measured again.
METHOD_VERSION = 1
ROUNDS = 3
# What is timed: a batch of passages about the length of a short document's chunk, in both scripts the
# service mostly sees, and short questions one at a time (the retriever embeds each question alone).
_PASSAGE = (
    "The retention policy keeps customer records for seven years after the contract ends, unless a court "
    "order requires longer. 顧客記録は契約終了後7年間保管し、裁判所の命令がある場合はそれ以上保管します。"
)
PASSAGES = [f"{_PASSAGE} ({number})" for number in range(8)]
QUESTIONS = [
    "how long are customer records kept",
    "顧客記録の保管期間は何年ですか",
    "what is the boiling point of water at altitude",
    "有給休暇は何日取得できますか",
] * 2


class Encodes(Protocol):
    def embed_passages(self, texts: Sequence[str]) -> Any: ...

    def embed_query(self, text: str) -> Any: ...


# The embedder of the graph at a path, on one thread (so that the thread's CPU clock counts all of a run).
LoadGraph = Callable[[Path], Encodes]


@dataclass(frozen=True)
class Measured:
    choice: dict[Shape, Choice]
    cpu_ms: dict[Shape, dict[Choice, float]]


def choose(model_dir: Path, shape: Shape, load: LoadGraph, graphs: dict[Choice, Path]) -> Choice:
    """The faster precision for `shape` on this CPU: the kept measurement, or a new one kept for next time."""
    key = (model_dir, tuple(sorted(graphs.items())))
    with _memo_lock:
        if key not in _memo:
            _memo[key] = _measured(model_dir, load, graphs)
            _log_choices(_memo[key])
        return _memo[key].choice[shape]


# Per process, by model folder and graphs: a choice is read (or measured) once.
_memo: dict[tuple[Path, tuple[tuple[Choice, Path], ...]], Measured] = {}
_memo_lock = threading.Lock()


def forget() -> None:
    """Drop the choices this process holds (tests: a kept file changed underneath)."""
    with _memo_lock:
        _memo.clear()


def _measured(model_dir: Path, load: LoadGraph, graphs: dict[Choice, Path]) -> Measured:
    target = model_dir / CHOICE_FILE
    provenance = choice_provenance(model_dir)
    if (kept := _kept(target, provenance)) is not None:
        return kept
    with build_lock(model_dir, target.name):
        if (kept := _kept(target, provenance)) is not None:
            return kept
        measured = measure(load, graphs)
        build_file(target, provenance, lambda tmp: tmp.write_text(json.dumps(_as_json(measured)), encoding="utf-8"))
    return measured


def _log_choices(measured: Measured) -> None:
    for shape, choice in measured.choice.items():
        logger.info(
            "precision auto for %s on this CPU: %s (least CPU per run: %s)",
            shape,
            choice,
            ", ".join(f"{name} {ms:.1f} ms" for name, ms in measured.cpu_ms[shape].items()),
        )


def measure(load: LoadGraph, graphs: dict[Choice, Path]) -> Measured:
    """Each graph's least CPU time per run over ROUNDS rounds, the graphs alternating within a round."""
    embedders = {name: load(path) for name, path in graphs.items()}
    runs: dict[Shape, Callable[[Encodes], object]] = {
        "passages": lambda embedder: embedder.embed_passages(PASSAGES),
        "queries": lambda embedder: [embedder.embed_query(question) for question in QUESTIONS],
    }
    cpu_ms: dict[Shape, dict[Choice, float]] = {shape: {} for shape in runs}
    for shape, run in runs.items():
        for embedder in embedders.values():
            run(embedder)  # warm-up: the first run allocates
        for round_number in range(ROUNDS):
            order = list(embedders.items()) if round_number % 2 == 0 else list(reversed(embedders.items()))
            for name, embedder in order:
                started = time.thread_time()
                run(embedder)
                spent = (time.thread_time() - started) * 1000
                cpu_ms[shape][name] = round(min(cpu_ms[shape].get(name, spent), spent), 2)
    return Measured({shape: faster(cpu_ms[shape]) for shape in runs}, cpu_ms)


def faster(cpu_ms: dict[Choice, float]) -> Choice:
    """int8-block where it saves at least MIN_SAVING of float32's CPU, else float32."""
    if cpu_ms["int8-block"] <= cpu_ms["float32"] * (1 - MIN_SAVING):
        return "int8-block"
    return "float32"


def choice_provenance(model_dir: Path) -> dict[str, Any]:
    """What a kept choice holds for: this CPU, this ONNX Runtime, these two graphs, this way of measuring."""
    return {
        "method": METHOD_VERSION,
        "cpu": cpu_signature(),
        "onnxruntime": onnxruntime.__version__,
        "graphs": {name: graph_provenance(model_dir, _GRAPH_OF[name]) for name in CHOICES},
    }


def graph_precision(choice: Choice) -> Literal["fp32", "int8-block"]:
    return _GRAPH_OF[choice]


def cpu_signature() -> str:
    """The CPU's model and instruction flags (Linux), or what the platform names: a choice made on one CPU is
    not taken on another (a model cache copied into an image, a volume shared by unlike nodes)."""
    described = f"{platform.machine()} {platform.processor()}"
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            lines = cpuinfo.read().splitlines()
    except OSError:
        lines = []
    wanted = ("model name", "flags", "Features", "CPU implementer", "CPU part")
    for key in wanted:
        value = next((line.split(":", 1)[1].strip() for line in lines if line.startswith(key)), "")
        described += f"\n{key}: {value}"
    return hashlib.sha256(described.encode()).hexdigest()[:16]


def _kept(target: Path, provenance: dict[str, Any]) -> Measured | None:
    if not file_is_complete(target, provenance):
        return None
    try:
        kept = json.loads(target.read_text(encoding="utf-8"))
        return Measured(choice=kept["choice"], cpu_ms=kept["cpu_ms"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _as_json(measured: Measured) -> dict[str, Any]:
    return {"choice": measured.choice, "cpu_ms": measured.cpu_ms}
