"""A Git repository: the files at the tip of a branch, those matching the path globs, read from a shallow
clone made with the `git` command in a temporary folder for the run. Only http(s) URLs and local paths under
RAGKB_SOURCES__FOLDER_ROOTS are accepted (no ssh, no `ext::` transports that run commands). Credentials go to
git as an Authorization header through the environment, never on a command line or in a URL."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from ragkb_api.sources.base import (
    KeepAlive,
    SourceItem,
    SourceUnreadable,
    authorization_header,
    bounded,
    check_alive,
)
from ragkb_api.sources.folder import allowed_path, file_item
from ragkb_core.errors import InvalidInput

REMOTE_SCHEMES = ("http", "https")


def checked_repository(url: str, roots: Sequence[Path]) -> str:
    """The repository as git is given it: an http(s) URL without credentials in it, or a local path under the
    allowed roots; InvalidInput (422) otherwise."""
    parts = urlsplit(url)
    if parts.scheme in REMOTE_SCHEMES:
        if parts.username or parts.password:
            raise InvalidInput("put a repository's credentials in `credentials`, not in its URL")
        return url
    if parts.scheme in ("", "file"):
        return str(allowed_path(parts.path if parts.scheme == "file" else url, roots))
    raise InvalidInput(f"a git source reads http(s) URLs or local paths, not {parts.scheme}:")


class GitConnector:
    checks_extensions = True

    def __init__(
        self,
        repository: str,
        branch: str,
        paths: Sequence[str],
        credentials: Mapping[str, str],
        limits: tuple[int, int, float],
    ) -> None:
        self._repository = repository
        self._branch = branch
        self._paths = list(paths)
        self._credentials = credentials
        self._max_items, self._max_bytes, self._timeout_s = limits

    @contextmanager
    def listing(self, keep_alive: KeepAlive) -> Iterator[list[SourceItem]]:
        with tempfile.TemporaryDirectory(prefix="ragkb-git-") as folder:
            checkout = Path(folder) / "checkout"
            self._git(
                "clone",
                "--quiet",
                "--depth",
                "1",
                "--single-branch",
                "--branch",
                self._branch,
                "--",
                self._repository,
                str(checkout),
            )
            check_alive(keep_alive)
            files = self._git("-C", str(checkout), "ls-files", "-z").split("\0")
            yield bounded(self._items(checkout, files, keep_alive), self._max_items)

    def _items(self, checkout: Path, files: list[str], keep_alive: KeepAlive) -> Iterator[SourceItem]:
        for key in sorted(name for name in files if name and self._wanted(name)):
            path = checkout / key
            if path.is_symlink() or not path.is_file():
                continue  # a link could point anywhere on the server
            check_alive(keep_alive)
            yield file_item(path, key, self._max_bytes)

    def _wanted(self, key: str) -> bool:
        return not self._paths or any(fnmatch.fnmatchcase(key, pattern) for pattern in self._paths)

    def _git(self, *args: str) -> str:
        try:
            done = subprocess.run(
                ["git", *args], env=self._environment(), capture_output=True, timeout=self._timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise SourceUnreadable(f"git {args[0]} took longer than {self._timeout_s:g} s") from None
        if done.returncode != 0:
            message = done.stderr.decode(errors="replace").strip().splitlines()
            raise SourceUnreadable(f"git {args[0]} failed: {message[-1] if message else done.returncode}")
        return done.stdout.decode(errors="replace")

    def _environment(self) -> dict[str, str]:
        """No prompt, no system or user configuration, only the allowed transports; the credentials as a
        header in GIT_CONFIG_* (a command line is readable by every user of the machine)."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": tempfile.gettempdir(),
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_ALLOW_PROTOCOL": "http:https:file",
            "GIT_CONFIG_COUNT": "0",
        }
        header = authorization_header(self._credentials)
        if header:
            env.update(
                GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="http.extraHeader", GIT_CONFIG_VALUE_0=f"Authorization: {header}"
            )
        return env
