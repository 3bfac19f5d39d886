"""The grep engine of the grep_files tool: literal and regex matching, context, bounds, slow patterns."""

from __future__ import annotations

import time

import pytest

from ragkb_api.tools.grep import MAX_LINE_CHARS, MAX_PATTERN_CHARS, compile_pattern, grep_text
from ragkb_core.errors import InvalidInput

TEXT = "alpha\nbeta (1)\ngamma\ndelta (2)\nepsilon"


def test_a_literal_pattern_matches_its_characters_not_a_regex() -> None:
    outcome = grep_text(TEXT, compile_pattern("(1)", is_regex=False), context_lines=1, max_matches=10, budget_s=1)
    assert [(m.line_number, m.line, m.before, m.after) for m in outcome.matches] == [
        (2, "beta (1)", ["alpha"], ["gamma"])
    ]


def test_a_regex_matches_lines_with_context_clipped_at_the_edges() -> None:
    outcome = grep_text(TEXT, compile_pattern(r"\(\d\)$", is_regex=True), context_lines=2, max_matches=10, budget_s=1)
    assert [m.line_number for m in outcome.matches] == [2, 4]
    assert outcome.matches[0].before == ["alpha"] and outcome.matches[1].after == ["epsilon"]
    assert not outcome.truncated and not outcome.timed_out


def test_ignore_case() -> None:
    pattern = compile_pattern("GAMMA", is_regex=False, ignore_case=True)
    assert [m.line for m in grep_text(TEXT, pattern, context_lines=0, max_matches=5, budget_s=1).matches] == ["gamma"]


def test_output_is_bounded_by_max_matches_and_line_length() -> None:
    text = "\n".join(["x" * (MAX_LINE_CHARS * 3)] * 20)
    outcome = grep_text(text, compile_pattern("x", is_regex=False), context_lines=1, max_matches=5, budget_s=1)
    assert len(outcome.matches) == 5 and outcome.truncated
    assert all(len(m.line) == MAX_LINE_CHARS + 1 for m in outcome.matches)


def test_a_catastrophic_pattern_stops_at_the_budget() -> None:
    started = time.monotonic()
    text = "x" * 5000 + "\nfine"
    outcome = grep_text(text, compile_pattern("(x+x+)+y", is_regex=True), context_lines=0, max_matches=5, budget_s=0.3)
    assert outcome.timed_out and outcome.matches == []
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("pattern", ["", "(", "a" * (MAX_PATTERN_CHARS + 1), "[z-a]"])
def test_empty_long_and_malformed_patterns_are_invalid_input(pattern: str) -> None:
    with pytest.raises(InvalidInput):
        compile_pattern(pattern, is_regex=True)
