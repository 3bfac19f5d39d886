"""The grep engine of the `grep_files` tool: literal or regular-expression search over extracted text, line
by line, with bounded work and bounded output. Pure: no I/O.

Patterns run on the `regex` module, whose matching can be given a timeout: a catastrophic pattern
(`(a+)+$` on a long line of a's) stops at the deadline and the result says it was cut short, instead of
holding a worker thread for ever. Pattern length is bounded too."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import regex

from ragkb_core.errors import InvalidInput

MAX_PATTERN_CHARS = 500
# A matching line is shown up to this many characters (context lines too): output stays bounded.
MAX_LINE_CHARS = 500


@dataclass(frozen=True)
class LineMatch:
    line_number: int  # 1-based
    line: str
    before: list[str]
    after: list[str]


@dataclass
class GrepOutcome:
    matches: list[LineMatch] = field(default_factory=list)
    # More matches existed than were asked for.
    truncated: bool = False
    # The time budget ran out before the whole text was searched.
    timed_out: bool = False


def compile_pattern(pattern: str, *, is_regex: bool, ignore_case: bool = False) -> regex.Pattern[str]:
    """The pattern to search with: escaped when literal. InvalidInput (422) when too long or malformed."""
    if not pattern:
        raise InvalidInput("the pattern must not be empty")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidInput(f"the pattern is longer than {MAX_PATTERN_CHARS} characters")
    flags = regex.IGNORECASE if ignore_case else 0
    try:
        return regex.compile(pattern if is_regex else regex.escape(pattern), flags)
    except (regex.error, ValueError, OverflowError, RecursionError) as exc:
        raise InvalidInput(f"the pattern is not a valid regular expression: {exc}") from None


def grep_text(
    text: str, pattern: regex.Pattern[str], *, context_lines: int, max_matches: int, budget_s: float
) -> GrepOutcome:
    """Matching lines of `text` (at most `max_matches`), each with `context_lines` lines around it, within
    `budget_s` seconds of matching."""
    lines = text.splitlines()
    outcome = GrepOutcome()
    deadline = time.monotonic() + budget_s
    for index, line in enumerate(lines):
        if not _line_matches(pattern, line, deadline - time.monotonic(), outcome):
            if outcome.timed_out:
                break
            continue
        if len(outcome.matches) == max_matches:
            outcome.truncated = True
            break
        outcome.matches.append(_line_match(lines, index, context_lines))
    return outcome


def _line_matches(pattern: regex.Pattern[str], line: str, timeout_s: float, outcome: GrepOutcome) -> bool:
    if timeout_s <= 0:
        outcome.timed_out = True
        return False
    try:
        return pattern.search(line, timeout=timeout_s) is not None
    except TimeoutError:
        outcome.timed_out = True
        return False


def _line_match(lines: list[str], index: int, context_lines: int) -> LineMatch:
    start = max(0, index - context_lines)
    return LineMatch(
        line_number=index + 1,
        line=_clip(lines[index]),
        before=[_clip(line) for line in lines[start:index]],
        after=[_clip(line) for line in lines[index + 1 : index + 1 + context_lines]],
    )


def _clip(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + "…"
