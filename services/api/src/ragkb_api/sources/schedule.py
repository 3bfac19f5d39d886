"""When a source runs next: `interval_s` after now, or the cron expression's next time after now (UTC)."""

from __future__ import annotations

from datetime import datetime, timedelta

from croniter import croniter

from ragkb_core.errors import InvalidInput


def check_cron(expression: str) -> None:
    if not croniter.is_valid(expression):
        raise InvalidInput(f"cron expression {expression!r} is not valid (five fields: minute hour day month weekday)")


def next_run(interval_s: int | None, cron: str | None, after: datetime) -> datetime | None:
    """The next run time after `after` (which is timezone-aware), or None for a source run only when asked."""
    if interval_s is not None:
        return after + timedelta(seconds=interval_s)
    if cron is not None:
        following: datetime = croniter(cron, after).get_next(datetime)
        return following
    return None
