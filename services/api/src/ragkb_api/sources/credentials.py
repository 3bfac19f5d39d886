"""A source's credentials sealed at rest with Fernet (AES-128-CBC + HMAC-SHA256), under the key an operator
sets (RAGKB_SOURCES__CREDENTIALS_KEY). Only the runner opens them, to send them to the source."""

from __future__ import annotations

import json

from cryptography.fernet import Fernet, InvalidToken
from pydantic import SecretStr

from ragkb_api.sources.base import SourceUnreadable
from ragkb_core.errors import InvalidInput


class CredentialVault:
    def __init__(self, key: SecretStr | None) -> None:
        self._fernet = _fernet(key)

    def seal(self, credentials: dict[str, str]) -> str:
        if self._fernet is None:
            raise InvalidInput(
                "this server keeps no credentials: an operator sets RAGKB_SOURCES__CREDENTIALS_KEY to a Fernet key"
            )
        return self._fernet.encrypt(json.dumps(credentials).encode()).decode()

    def open(self, sealed: str | None) -> dict[str, str]:
        if sealed is None:
            return {}
        if self._fernet is None:
            raise SourceUnreadable("the source's credentials cannot be read: RAGKB_SOURCES__CREDENTIALS_KEY is unset")
        try:
            opened: dict[str, str] = json.loads(self._fernet.decrypt(sealed.encode()))
        except InvalidToken:
            raise SourceUnreadable(
                "the source's credentials cannot be read with this RAGKB_SOURCES__CREDENTIALS_KEY (was it changed?)"
            ) from None
        return opened


def _fernet(key: SecretStr | None) -> Fernet | None:
    if key is None:
        return None
    try:
        return Fernet(key.get_secret_value().encode())
    except ValueError:
        raise ValueError(
            "RAGKB_SOURCES__CREDENTIALS_KEY must be a Fernet key (32 url-safe base64-encoded bytes)"
        ) from None
