"""Which embedding models a server runs (RAGKB_EMBEDDING__MODEL and __ALLOWED_MODELS), with which prefixes,
and what a request for another model is told."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from ragkb_api.settings import ApiSettings
from ragkb_core.errors import InvalidInput
from ragkb_core.settings import EmbeddingModelSpec, EmbeddingSettings
from ragkb_retriever.settings import RetrieverSettings
from ragkb_worker.settings import WorkerSettings

MINILM_FOLDER = "/models/all-MiniLM-L6-v2"


def test_by_default_the_packaged_e5_runs_with_its_prefixes_and_the_packaged_minilm_without() -> None:
    settings = EmbeddingSettings()
    assert settings.model_names == ["multilingual-e5-small", "all-MiniLM-L6-v2"]
    minilm = settings.for_model("all-MiniLM-L6-v2")
    assert (minilm.model, minilm.query_prefix, minilm.passage_prefix, minilm.relevance) == (
        "all-MiniLM-L6-v2",
        "",
        "",
        None,
    )
    default = settings.for_model(None)
    assert (default.model, default.query_prefix, default.passage_prefix) == (
        "multilingual-e5-small",
        "query: ",
        "passage: ",
    )
    assert settings.for_model("multilingual-e5-small") == default


def test_another_model_takes_no_prefixes_unless_configured() -> None:
    settings = EmbeddingSettings(
        allowed_models={
            "all-MiniLM-L6-v2": EmbeddingModelSpec(path=MINILM_FOLDER),
            "intfloat/e5-base-v2": EmbeddingModelSpec(query_prefix="query: ", passage_prefix="passage: "),
        }
    )
    minilm = settings.for_model("all-MiniLM-L6-v2")
    assert (minilm.model, minilm.query_prefix, minilm.passage_prefix) == (MINILM_FOLDER, "", "")
    e5_base = settings.for_model("intfloat/e5-base-v2")
    assert (e5_base.model, e5_base.query_prefix, e5_base.passage_prefix) == (
        "intfloat/e5-base-v2",
        "query: ",
        "passage: ",
    )
    # The runtime options are the server's, the list is not part of a model's own settings.
    assert minilm.batch_size == settings.batch_size and minilm.allowed_models == {}


def test_the_packaged_e5_keeps_its_prefixes_when_it_is_not_the_default() -> None:
    settings = EmbeddingSettings(
        model=MINILM_FOLDER, query_prefix="", passage_prefix="", allowed_models={"multilingual-e5-small": {}}
    )
    e5 = settings.for_model("multilingual-e5-small")
    assert (e5.query_prefix, e5.passage_prefix) == ("query: ", "passage: ")
    assert (settings.for_model().query_prefix, settings.for_model().passage_prefix) == ("", "")


def test_a_model_not_on_the_list_is_invalid_input_naming_the_allowed_ones() -> None:
    settings = EmbeddingSettings(allowed_models={"all-MiniLM-L6-v2": {"path": MINILM_FOLDER}})
    with pytest.raises(InvalidInput) as refused:
        settings.for_model("some/other-model")
    assert refused.value.status == 422
    assert "multilingual-e5-small, all-MiniLM-L6-v2" in refused.value.detail
    assert refused.value.extra["allowed_models"] == ["multilingual-e5-small", "all-MiniLM-L6-v2"]
    settings.require_allowed("all-MiniLM-L6-v2")  # no error


def test_the_default_model_may_not_be_listed_again() -> None:
    with pytest.raises(ValidationError, match="always allowed"):
        EmbeddingSettings(allowed_models={"multilingual-e5-small": {}})


def test_api_worker_and_retriever_read_one_list_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "RAGKB_EMBEDDING__ALLOWED_MODELS",
        json.dumps({"all-MiniLM-L6-v2": {"path": MINILM_FOLDER}, "e5-base": {"query_prefix": "query: "}}),
    )
    for embedding in (ApiSettings().embedding, WorkerSettings().embedding, RetrieverSettings().embedding):
        assert embedding.model_names == ["multilingual-e5-small", "all-MiniLM-L6-v2", "e5-base"]
        assert embedding.for_model("all-MiniLM-L6-v2").model == MINILM_FOLDER
        assert embedding.for_model("e5-base").query_prefix == "query: "


def test_a_plain_list_names_models_that_load_by_their_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGKB_EMBEDDING__ALLOWED_MODELS", json.dumps([MINILM_FOLDER]))
    embedding = WorkerSettings().embedding
    assert embedding.model_names == ["multilingual-e5-small", MINILM_FOLDER, "all-MiniLM-L6-v2"]
    loaded = embedding.for_model(MINILM_FOLDER)
    assert (loaded.model, loaded.query_prefix, loaded.passage_prefix) == (MINILM_FOLDER, "", "")


@pytest.mark.parametrize(("cores", "processes", "threads"), [(2, 2, 1), (8, 2, 4), (4, 1, 4), (2, 4, 1)])
def test_each_task_process_embeds_with_its_share_of_the_cores(
    monkeypatch: pytest.MonkeyPatch, cores: int, processes: int, threads: int
) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: set(range(cores)))
    monkeypatch.setenv("RAGKB_TASKS__CONCURRENCY", str(processes))
    settings = WorkerSettings()
    assert settings.embedding.threads == 0
    assert settings.task_embedding().threads == threads


def test_threads_set_by_the_operator_are_kept_in_task_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGKB_EMBEDDING__THREADS", "3")
    monkeypatch.setenv("RAGKB_TASKS__CONCURRENCY", "2")
    assert WorkerSettings().task_embedding().threads == 3
