"""Point ids: numbered ones round-trip between their text and the index's number; older UUID ids pass as
they are and can never be mistaken for numbered ones."""

from __future__ import annotations

import re
import uuid

import pytest

from ragkb_core import ids

UUID_TEXT = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def test_a_numbered_id_is_uuid_shaped_and_round_trips_through_its_number() -> None:
    text = ids.point_id("kb", "guide.md", 3, 7)
    number = ids.engine_point_id(text)
    assert UUID_TEXT.match(text) and text.startswith(ids.NUMBERED_PREFIX)
    assert isinstance(number, int) and 0 <= number < 2**64
    assert ids.point_id_text(number) == text
    assert uuid.UUID(text).hex[-16:] == f"{number:016x}"


@pytest.mark.parametrize("number", [0, 1, 2**48 - 1, 2**48, 2**64 - 1])
def test_every_64_bit_number_has_one_text(number: int) -> None:
    text = ids.numbered_point_id(number)
    assert UUID_TEXT.match(text)
    assert ids.engine_point_id(text) == number


def test_ids_are_deterministic_and_differ_by_every_part() -> None:
    parts = [
        ("kb", "a.md", 1, 0),
        ("kb2", "a.md", 1, 0),
        ("kb", "b.md", 1, 0),
        ("kb", "a.md", 2, 0),
        ("kb", "a.md", 1, 1),
    ]
    texts = [ids.point_id(*part) for part in parts]
    assert texts == [ids.point_id(*part) for part in parts]
    assert len(set(texts)) == len(parts)


def test_an_older_uuid_id_passes_as_it_is_and_is_never_read_as_a_number() -> None:
    older = ids.point_id("kb", "guide.md", 3, 7, numbered=False)
    assert uuid.UUID(older).version == 5
    assert not older.startswith(ids.NUMBERED_PREFIX)
    assert ids.engine_point_id(older) == older
    assert ids.point_id_text(uuid.UUID(older)) == older
    assert ids.point_id_text(older) == older


def test_a_generated_secret_never_starts_with_a_dash() -> None:
    # One in 64 of plain token_urlsafe does, and `ragkb --key -Xy…` then fails as a missing option value: among
    # 2,000 draws of it ~31 would, so new_secret meets that case here many times over.
    drawn = [ids.new_secret() for _ in range(2000)]
    assert not any(secret.startswith("-") for secret in drawn)
    assert all(len(secret) == 43 for secret in drawn)
    assert len(set(drawn)) == len(drawn)
