"""Build-once artefacts in the model cache: complete ones are reused, partial or stale ones rebuilt."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragkb_models.cache import build_file, build_folder, file_is_complete, folder_is_complete

PROVENANCE = {"source_sha256": "abc", "converter": 1}


def write_two_files(folder: Path) -> None:
    (folder / "sub").mkdir(parents=True)
    (folder / "weights.bin").write_bytes(b"x" * 100)
    (folder / "sub" / "config.json").write_text("{}")


def test_a_built_folder_is_complete_for_its_own_provenance_only(tmp_path: Path) -> None:
    target = tmp_path / "model"
    assert not folder_is_complete(target, PROVENANCE)
    build_folder(target, PROVENANCE, write_two_files)
    assert folder_is_complete(target, PROVENANCE)
    assert not folder_is_complete(target, {**PROVENANCE, "converter": 2})
    # Nothing of the temporary build is left next to it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


@pytest.mark.parametrize("damage", ["truncate", "delete", "unmark"])
def test_a_damaged_folder_is_not_complete_and_is_replaced_by_a_rebuild(tmp_path: Path, damage: str) -> None:
    target = tmp_path / "model"
    build_folder(target, PROVENANCE, write_two_files)
    if damage == "truncate":
        (target / "weights.bin").write_bytes(b"x" * 10)
    elif damage == "delete":
        (target / "sub" / "config.json").unlink()
    else:
        (target / ".ragkb-build.json").unlink()
    assert not folder_is_complete(target, PROVENANCE)
    build_folder(target, PROVENANCE, write_two_files)
    assert folder_is_complete(target, PROVENANCE)
    assert (target / "weights.bin").stat().st_size == 100


def test_a_failed_build_leaves_the_previous_folder_and_no_leftovers(tmp_path: Path) -> None:
    target = tmp_path / "model"
    build_folder(target, PROVENANCE, write_two_files)

    def fail_halfway(folder: Path) -> None:
        folder.mkdir()
        (folder / "weights.bin").write_bytes(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        build_folder(target, {**PROVENANCE, "converter": 2}, fail_halfway)
    assert folder_is_complete(target, PROVENANCE)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_built_file_is_complete_until_it_changes_size(tmp_path: Path) -> None:
    target = tmp_path / "onnx" / "model.onnx"
    build_file(target, PROVENANCE, lambda tmp: tmp.write_bytes(b"graph"))
    assert target.read_bytes() == b"graph"
    assert file_is_complete(target, PROVENANCE)
    assert not file_is_complete(target, {**PROVENANCE, "source_sha256": "def"})
    target.write_bytes(b"gra")
    assert not file_is_complete(target, PROVENANCE)


def test_an_int8_graph_is_stale_once_its_quantisation_recipe_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recipe is part of an int8 graph's provenance, so changing it needs no manual version bump."""
    from ragkb_models import onnx_encoder
    from ragkb_models.cache import MARKER_NAME

    (tmp_path / MARKER_NAME).write_text('{"provenance": {"weights": "e5"}}')
    graph = tmp_path / "model_int8_mixed.onnx"
    built = onnx_encoder.graph_provenance(tmp_path, "int8-mixed")
    build_file(graph, built, lambda tmp: tmp.write_bytes(b"graph"))
    assert file_is_complete(graph, onnx_encoder.graph_provenance(tmp_path, "int8-mixed"))

    changed = onnx_encoder.Int8Recipe(float_weights=(r"encoder\.layer\.4\.output\.dense\.weight",))
    monkeypatch.setitem(onnx_encoder.INT8_RECIPES, "int8-mixed", changed)
    assert not file_is_complete(graph, onnx_encoder.graph_provenance(tmp_path, "int8-mixed"))
    block = tmp_path / "model_int8_block.onnx"
    build_file(block, onnx_encoder.graph_provenance(tmp_path, "int8-block"), lambda tmp: tmp.write_bytes(b"graph"))
    monkeypatch.setitem(onnx_encoder.INT8_RECIPES, "int8-block", onnx_encoder.BlockInt8Recipe(block_size=32))
    assert not file_is_complete(block, onnx_encoder.graph_provenance(tmp_path, "int8-block"))
    # The float32 graph carries no recipe: a recipe change never rebuilds it.
    assert "recipe" not in onnx_encoder.graph_provenance(tmp_path, "fp32")
