"""Sources without services: schedules (interval and cron, in UTC), credentials sealed and opened, and the
requests the API refuses before anything is stored."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr, ValidationError

from ragkb_api.sources.base import SourceUnreadable, authorization_header
from ragkb_api.sources.credentials import CredentialVault
from ragkb_api.sources.schedule import check_cron, next_run
from ragkb_api.sources.schemas import SourceCreate
from ragkb_core.errors import InvalidInput

NOON = datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)


def test_next_run_by_interval_by_cron_or_only_when_asked() -> None:
    assert next_run(600, None, NOON) == NOON + timedelta(seconds=600)
    assert next_run(None, "0 3 * * *", NOON) == datetime(2026, 3, 2, 3, 0, tzinfo=UTC)
    assert next_run(None, "*/15 * * * *", NOON) == datetime(2026, 3, 1, 12, 15, tzinfo=UTC)
    assert next_run(None, None, NOON) is None


def test_an_invalid_cron_expression_is_invalid_input() -> None:
    check_cron("0 3 * * 1-5")
    for expression in ("every tuesday", "61 * * * *", "* * *"):
        with pytest.raises(InvalidInput):
            check_cron(expression)


def test_credentials_are_sealed_and_open_only_with_the_same_key() -> None:
    key = SecretStr(Fernet.generate_key().decode())
    sealed = CredentialVault(key).seal({"token": "s3cret"})
    assert "s3cret" not in sealed
    assert CredentialVault(key).open(sealed) == {"token": "s3cret"}
    assert CredentialVault(key).open(None) == {}
    with pytest.raises(SourceUnreadable, match="CREDENTIALS_KEY"):
        CredentialVault(SecretStr(Fernet.generate_key().decode())).open(sealed)
    with pytest.raises(InvalidInput, match="CREDENTIALS_KEY"):
        CredentialVault(None).seal({"token": "s3cret"})
    with pytest.raises(ValueError, match="Fernet key"):
        CredentialVault(SecretStr("not-a-key"))


def test_authorization_header_of_a_token_or_a_username_and_password() -> None:
    assert authorization_header({"token": "abc"}) == "Bearer abc"
    assert authorization_header({"username": "u", "password": "p"}) == "Basic dTpw"
    assert authorization_header({}) is None


@pytest.mark.parametrize(
    "body",
    [
        {"name": "a:b", "config": {"kind": "folder", "path": "/srv"}},
        {"name": "x", "config": {"kind": "folder", "path": "/srv"}, "interval_s": 60, "cron": "0 * * * *"},
        {"name": "x", "config": {"kind": "web", "start_url": "file:///etc/passwd"}},
        {"name": "x", "config": {"kind": "git", "repository": "r", "branch": "--upload-pack=sh"}},
        {"name": "x", "config": {"kind": "s3", "bucket": "UPPER"}},
        {"name": "x", "config": {"kind": "folder", "path": "/srv"}, "credentials": {"username": "only"}},
        {"name": "x", "config": {"kind": "ftp"}},
    ],
)
def test_source_requests_that_are_refused_before_anything_is_stored(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        SourceCreate.model_validate(body)
