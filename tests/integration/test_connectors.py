"""Each connector against a real source: a folder on disk, a web site on a local http.server, a Git repository
served over HTTP (and read from a local path), a bucket of moto's S3-compatible server process. What a run plans
from these items is in tests/e2e/test_sources.py."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import boto3
import pytest

from ragkb_api.sources.base import SourceItem, SourceUnreadable, sha256_hex
from ragkb_api.sources.folder import FolderConnector
from ragkb_api.sources.git import GitConnector, checked_repository
from ragkb_api.sources.s3 import Bucket, KnownObject, S3Connector
from ragkb_api.sources.web import CrawlLimits, WebConnector
from ragkb_core.errors import InvalidInput
from tests.support.s3_server import s3_server
from tests.support.sites import commit_files, make_repository, publish_bare, serve_folder, serve_git

MAX_BYTES = 1024 * 1024
HTML_ONLY = CrawlLimits(max_depth=3, max_pages=50, content_types=("text/html", "text/plain"), max_bytes=MAX_BYTES)


def always() -> bool:
    return True


def listed(connector: FolderConnector | WebConnector | GitConnector | S3Connector) -> dict[str, SourceItem]:
    """The items by key, each read while the listing lasts (a Git checkout is gone after it)."""
    with connector.listing(always) as items:
        return {item.key: item if item.problem else replace(item, read=constant(item.read())) for item in items}


def constant(data: bytes) -> Callable[[], bytes]:
    return lambda: data


# -- folder -------------------------------------------------------------------------------------------------


def test_folder_lists_its_files_with_checksums_and_skips_hidden_ones(tmp_path: Path) -> None:
    share = tmp_path / "shares" / "team"
    (share / "reports").mkdir(parents=True)
    (share / "reports" / "q1.md").write_text("# Q1\nRevenue grew.", encoding="utf-8")
    (share / "notes.txt").write_text("plain notes", encoding="utf-8")
    (share / ".git").mkdir()
    (share / ".git" / "config").write_text("hidden", encoding="utf-8")
    items = listed(FolderConnector(str(share), [tmp_path / "shares"], 100, MAX_BYTES))
    assert sorted(items) == ["notes.txt", "reports/q1.md"]
    assert items["notes.txt"].read() == b"plain notes"
    before = items["reports/q1.md"].sha256
    (share / "reports" / "q1.md").write_text("# Q1\nRevenue fell.", encoding="utf-8")
    assert listed(FolderConnector(str(share), [tmp_path / "shares"], 100, MAX_BYTES))["reports/q1.md"].sha256 != before


def test_folder_outside_the_allowed_roots_is_refused(tmp_path: Path) -> None:
    (tmp_path / "shares").mkdir()
    (tmp_path / "private").mkdir()
    for path in (str(tmp_path / "private"), str(tmp_path / "shares" / ".." / "private"), "relative/path", "/etc"):
        with pytest.raises(InvalidInput):
            FolderConnector(path, [tmp_path / "shares"], 100, MAX_BYTES)


def test_folder_skips_a_link_out_of_it_and_marks_a_file_too_large(tmp_path: Path) -> None:
    share = tmp_path / "shares"
    share.mkdir()
    (tmp_path / "secret.txt").write_text("not for the KB", encoding="utf-8")
    (share / "leak.txt").symlink_to(tmp_path / "secret.txt")
    (share / "big.txt").write_bytes(b"x" * 2048)
    items = listed(FolderConnector(str(share), [share], 100, max_bytes=1024))
    assert list(items) == ["big.txt"]
    assert items["big.txt"].problem is not None


def test_folder_with_more_items_than_allowed_fails_instead_of_planning_with_a_part(tmp_path: Path) -> None:
    for index in range(3):
        (tmp_path / f"{index}.txt").write_text(str(index), encoding="utf-8")
    with pytest.raises(SourceUnreadable, match="more than 2 items"):
        listed(FolderConnector(str(tmp_path), [tmp_path], 2, MAX_BYTES))


# -- web ----------------------------------------------------------------------------------------------------


def write_site(root: Path) -> None:
    pages = {
        "index.html": '<html><head><title>Home</title></head><body><a href="about.html">About</a>'
        '<a href="/deep/one.html#top">One</a><a href="http://example.invalid/x.html">elsewhere</a>'
        '<a href="private/secret.html">secret</a><a href="logo.png">logo</a></body></html>',
        "about.html": "<html><head><title>About us</title></head><body>We make kettles.</body></html>",
        "deep/one.html": '<html><body><a href="two.html">two</a></body></html>',
        "deep/two.html": '<html><body><a href="three.html">three</a></body></html>',
        "deep/three.html": "<html><body>too deep</body></html>",
        "private/secret.html": "<html><body>robots say no</body></html>",
        "orphan.txt": "only the sitemap links here",
        "robots.txt": "User-agent: *\nDisallow: /private/\n",
        "sitemap.xml": '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        "<url><loc>{base}/orphan.txt</loc></url><url><loc>http://example.invalid/other</loc></url></urlset>",
    }
    for name, text in pages.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n")


def test_web_crawls_same_origin_pages_within_depth_honouring_robots_and_sitemap(tmp_path: Path) -> None:
    write_site(tmp_path)
    with serve_folder(tmp_path) as (base, seen):
        sitemap = tmp_path / "sitemap.xml"
        sitemap.write_text(sitemap.read_text().replace("{base}", base), encoding="utf-8")
        limits = CrawlLimits(max_depth=2, max_pages=50, content_types=HTML_ONLY.content_types, max_bytes=MAX_BYTES)
        items = listed(WebConnector(f"{base}/index.html", limits, {}, timeout_s=10))
    paths = sorted(key.removeprefix(base) for key in items)
    # depth 2 stops before three.html; robots.txt keeps private/ out; the PNG is not a content type asked for.
    assert paths == ["/about.html", "/deep/one.html", "/deep/two.html", "/index.html", "/orphan.txt"]
    assert "/private/secret.html" not in seen
    assert items[f"{base}/about.html"].title == "About us"
    assert items[f"{base}/about.html"].read().startswith(b"<html>")


def test_web_stops_at_max_pages_and_refuses_a_gone_start_page(tmp_path: Path) -> None:
    write_site(tmp_path)
    with serve_folder(tmp_path) as (base, _):
        limits = CrawlLimits(max_depth=5, max_pages=2, content_types=HTML_ONLY.content_types, max_bytes=MAX_BYTES)
        assert len(listed(WebConnector(f"{base}/index.html", limits, {}, timeout_s=10))) == 2
        # A start page that is gone is an unreadable source, not a site whose every page was deleted.
        with pytest.raises(SourceUnreadable, match="start page"):
            listed(WebConnector(f"{base}/missing.html", HTML_ONLY, {}, timeout_s=10))


def test_web_sends_the_sources_credentials(tmp_path: Path) -> None:
    write_site(tmp_path)
    expected = "Basic " + base64.b64encode(b"reader:s3cret").decode()
    with serve_folder(tmp_path, required_authorization=expected) as (base, _):
        with pytest.raises(SourceUnreadable):  # the start page answers 401: nothing is read
            listed(WebConnector(f"{base}/index.html", HTML_ONLY, {}, timeout_s=10))
        credentials = {"username": "reader", "password": "s3cret"}
        assert f"{base}/about.html" in listed(WebConnector(f"{base}/index.html", HTML_ONLY, credentials, timeout_s=10))


def test_web_site_that_does_not_answer_is_unreadable() -> None:
    with pytest.raises(SourceUnreadable):
        listed(WebConnector("http://127.0.0.1:9/index.html", HTML_ONLY, {}, timeout_s=5))


# -- git ----------------------------------------------------------------------------------------------------


def test_git_over_http_lists_the_branch_files_matching_the_globs(tmp_path: Path) -> None:
    work = make_repository(tmp_path / "work", {"docs/guide.md": "# Guide", "docs/api.md": "# API", "src/main.py": "x"})
    bare = tmp_path / "served" / "repo.git"
    publish_bare(work, bare)
    with serve_git(tmp_path / "served") as base:
        connector = GitConnector(f"{base}/repo.git", "main", ["docs/*.md"], {}, (100, MAX_BYTES, 30))
        items = listed(connector)
        assert sorted(items) == ["docs/api.md", "docs/guide.md"]
        first = items["docs/guide.md"].sha256
        commit_files(work, {"docs/guide.md": "# Guide v2", "docs/api.md": None}, "change")
        publish_bare(work, bare)
        items = listed(connector)
    assert sorted(items) == ["docs/guide.md"]
    assert items["docs/guide.md"].sha256 != first
    assert items["docs/guide.md"].read() == b"# Guide v2"


def test_git_sends_credentials_as_a_header_and_fails_clearly_without(tmp_path: Path) -> None:
    work = make_repository(tmp_path / "work", {"readme.md": "# Readme"})
    publish_bare(work, tmp_path / "served" / "repo.git")
    with serve_git(tmp_path / "served", required_authorization="Bearer t0ken") as base:
        with pytest.raises(SourceUnreadable, match="git clone failed"):
            listed(GitConnector(f"{base}/repo.git", "main", [], {}, (100, MAX_BYTES, 30)))
        items = listed(GitConnector(f"{base}/repo.git", "main", [], {"token": "t0ken"}, (100, MAX_BYTES, 30)))
    assert list(items) == ["readme.md"]


def test_git_local_path_must_be_under_the_roots_and_other_transports_are_refused(tmp_path: Path) -> None:
    work = make_repository(tmp_path / "repos" / "handbook", {"a.md": "a"}, branch="trunk")
    assert checked_repository(str(work), [tmp_path / "repos"]) == str(work.resolve())
    items = listed(GitConnector(str(work), "trunk", [], {}, (100, MAX_BYTES, 30)))
    assert list(items) == ["a.md"]
    for url in (str(work), "ext::sh -c touch% /tmp/pwned", "ssh://host/repo.git", "https://user:pw@host/repo.git"):
        with pytest.raises(InvalidInput):
            checked_repository(url, [tmp_path / "elsewhere"])
    with pytest.raises(SourceUnreadable, match="git clone failed"):
        listed(GitConnector(str(work), "no-such-branch", [], {}, (100, MAX_BYTES, 30)))


# -- S3 -----------------------------------------------------------------------------------------------------

S3_KEYS = {"username": "testing-key", "password": "testing-secret"}


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with s3_server() as url:
        yield url


def test_s3_lists_the_prefix_and_downloads_only_objects_whose_etag_changed(s3_endpoint: str) -> None:
    client = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id=S3_KEYS["username"],
        aws_secret_access_key=S3_KEYS["password"],
    )
    client.create_bucket(Bucket="manuals")
    for key, body in {"team/a.md": b"# A", "team/b.md": b"# B", "team/sub/": b"", "other/c.md": b"# C"}.items():
        client.put_object(Bucket="manuals", Key=key, Body=body)
    bucket = Bucket("manuals", "team/", s3_endpoint, "us-east-1")
    first = listed(S3Connector(bucket, S3_KEYS, {}, (100, MAX_BYTES, 10)))
    assert sorted(first) == ["team/a.md", "team/b.md"]  # the prefix only, no folder markers
    assert first["team/a.md"].read() == b"# A"
    assert first["team/a.md"].sha256 == sha256_hex(b"# A")

    client.put_object(Bucket="manuals", Key="team/b.md", Body=b"# B changed")
    # What the last run stored: a's ETag with a sha256 the connector cannot compute (so reusing it proves it did
    # not download a), and b's old ETag.
    known = {key: KnownObject(item.etag or "", f"stored-{key}") for key, item in first.items()}
    second = listed(S3Connector(bucket, S3_KEYS, known, (100, MAX_BYTES, 10)))
    assert second["team/a.md"].sha256 == "stored-team/a.md"
    assert second["team/b.md"].sha256 == sha256_hex(b"# B changed")
    assert second["team/a.md"].read() == b"# A"  # read when the plan asks for it (a retry)


def test_s3_with_wrong_keys_or_no_bucket_is_unreadable(s3_endpoint: str) -> None:
    bucket = Bucket("no-such-bucket", "", s3_endpoint, "us-east-1")
    with pytest.raises(SourceUnreadable, match="no-such-bucket"):
        listed(S3Connector(bucket, S3_KEYS, {}, (100, MAX_BYTES, 10)))
