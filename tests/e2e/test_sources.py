"""Sources a KB reads itself, end to end on the session's stack: a web site on a local http.server, a Git
repository served by `git http-backend`, a folder under the allowed roots, a bucket of moto's S3 server. The first
run fills the KB; a later run (asked for, or fired by the schedule) re-ingests only the changed item and removes
the deleted one."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.e2e.conftest import RunningRagkb, source_roots
from tests.support.s3_server import s3_server
from tests.support.sites import commit_files, make_repository, publish_bare, serve_folder, serve_git

TOKEN = "git-t0ken-that-must-never-be-shown"


def write_pages(root: Path, pages: dict[str, str | None]) -> None:
    for name, body in pages.items():
        path = root / name
        if body is None:
            path.unlink()
        else:
            path.write_text(f"<html><head><title>{name}</title></head><body>{body}</body></html>", encoding="utf-8")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    root = tmp_path_factory.mktemp("site")
    write_pages(
        root,
        {
            "index.html": '<a href="kettles.html">Kettles</a> <a href="teapots.html">Teapots</a> '
            '<a href="warranty.html">Warranty</a>',
            "kettles.html": "Descale the kettle every month with citric acid to remove limescale.",
            "teapots.html": "Warm the porcelain teapot with hot water before brewing loose leaf tea.",
            "warranty.html": "The warranty covers the heating element for two years.",
        },
    )
    (root / "robots.txt").write_text("User-agent: *\nDisallow:\n", encoding="utf-8")
    with serve_folder(root) as (base, _):
        yield root, base


def wait_for(read: Callable[[], Any], done: Callable[[Any], bool], timeout_s: float = 120) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = read()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.5)


def documents_by_source_id(ragkb: RunningRagkb, kb_id: str) -> dict[str, dict[str, Any]]:
    response = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/documents", params={"limit": 100})
    assert response.status_code == 200, response.text
    return {document["source_id"]: document for document in response.json()}


def create_source(ragkb: RunningRagkb, kb_id: str, body: dict[str, Any]) -> dict[str, Any]:
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/sources", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def run_source(ragkb: RunningRagkb, kb_id: str, source_id: str) -> dict[str, Any]:
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/sources/{source_id}/run")
    assert response.status_code == 202, response.text
    return ragkb.wait_job(response.json()["id"])


def test_web_source_fills_the_kb_then_syncs_only_what_changed(ragkb: RunningRagkb, site: tuple[Path, str]) -> None:
    root, base = site
    kb_id = ragkb.create_kb("sources-web")
    source = create_source(
        ragkb, kb_id, {"name": "shop", "config": {"kind": "web", "start_url": f"{base}/index.html", "max_depth": 1}}
    )
    assert source["next_run_at"] is None  # no schedule: runs only when asked

    first = run_source(ragkb, kb_id, source["id"])
    assert first["status"] == "succeeded", first
    assert first["counts"]["uploaded"] == 4
    hits = ragkb.search("how often should I descale the kettle", [kb_id], top_k=1)
    assert hits[0]["source_id"] == f"shop:{base}/kettles.html"

    before = documents_by_source_id(ragkb, kb_id)
    write_pages(
        root, {"teapots.html": "Rinse the glass teapot with cold water and dry it upside down.", "warranty.html": None}
    )
    second = run_source(ragkb, kb_id, source["id"])
    assert second["status"] == "succeeded", second
    assert (second["counts"]["uploaded"], second["counts"]["deleted"], second["counts"]["unchanged"]) == (1, 1, 2)
    after = documents_by_source_id(ragkb, kb_id)
    assert f"shop:{base}/warranty.html" not in after
    assert after[f"shop:{base}/teapots.html"]["version"] == 2
    for unchanged in ("index.html", "kettles.html"):  # not re-ingested: same version, same embedding run
        key = f"shop:{base}/{unchanged}"
        assert (after[key]["version"], after[key]["indexed_at"]) == (before[key]["version"], before[key]["indexed_at"])
    assert ragkb.search("glass teapot upside down", [kb_id], top_k=1)[0]["source_id"] == f"shop:{base}/teapots.html"

    shown = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/sources/{source['id']}").json()
    assert (shown["last_status"], shown["last_job_id"], shown["running"]) == ("succeeded", second["id"], False)
    jobs = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/jobs").json()
    assert {first["id"], second["id"]} <= {job["id"] for job in jobs}


def test_git_source_on_a_schedule_picks_up_a_changed_and_a_deleted_file(ragkb: RunningRagkb, tmp_path: Path) -> None:
    work = make_repository(
        tmp_path / "work",
        {
            "docs/boilers.md": "# Boilers\nBleed the radiators before winter to let trapped air out.",
            "docs/gutters.md": "# Gutters\nClear the gutters of leaves every autumn.",
            "docs/roof.md": "# Roof\nReplace cracked roof tiles before the rain season.",
            "src/app.py": "print('not documentation')",
        },
    )
    publish_bare(work, tmp_path / "served" / "house.git")
    kb_id = ragkb.create_kb("sources-git")
    with serve_git(tmp_path / "served", required_authorization=f"Bearer {TOKEN}") as base:
        source = create_source(
            ragkb,
            kb_id,
            {
                "name": "house",
                "config": {"kind": "git", "repository": f"{base}/house.git", "branch": "main", "paths": ["docs/*"]},
                "credentials": {"token": TOKEN},
                "interval_s": 3,
            },
        )
        assert source["has_credentials"] is True
        listed = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/sources")
        assert TOKEN not in listed.text and TOKEN not in str(source)

        first = scheduled_run_after(ragkb, kb_id, source["id"], None)
        assert first["status"] == "succeeded", first
        assert first["counts"]["uploaded"] == 3
        before = documents_by_source_id(ragkb, kb_id)
        assert sorted(before) == ["house:docs/boilers.md", "house:docs/gutters.md", "house:docs/roof.md"]

        commit_files(
            work, {"docs/gutters.md": "# Gutters\nFit gutter guards so leaves stay out.", "docs/roof.md": None}, "edit"
        )
        publish_bare(work, tmp_path / "served" / "house.git")
        changed = wait_for(
            lambda: scheduled_run_after(ragkb, kb_id, source["id"], first["id"]),
            lambda job: job["counts"]["uploaded"] + job["counts"]["deleted"] > 0,
        )
    assert changed["status"] == "succeeded", changed
    assert (changed["counts"]["uploaded"], changed["counts"]["deleted"]) == (1, 1)
    after = documents_by_source_id(ragkb, kb_id)
    assert sorted(after) == ["house:docs/boilers.md", "house:docs/gutters.md"]
    assert after["house:docs/boilers.md"]["version"] == before["house:docs/boilers.md"]["version"]
    assert after["house:docs/gutters.md"]["version"] == 2
    hits = ragkb.search("gutter guards keep leaves out", [kb_id], top_k=1)
    assert hits[0]["source_id"] == "house:docs/gutters.md"
    ragkb.client.delete(f"/v1/knowledge-bases/{kb_id}/sources/{source['id']}")  # the server is gone: stop the schedule


def scheduled_run_after(ragkb: RunningRagkb, kb_id: str, source_id: str, previous_job: str | None) -> dict[str, Any]:
    """The source's next run after `previous_job` (None: its first), once the scheduler started it and it ended."""
    path = f"/v1/knowledge-bases/{kb_id}/sources/{source_id}"
    source = wait_for(lambda: ragkb.client.get(path).json(), lambda s: s["last_job_id"] not in (None, previous_job))
    assert source["last_job_id"] not in (None, previous_job), f"the schedule did not fire: {source}"
    return ragkb.wait_job(source["last_job_id"])


def test_folder_source_reads_only_under_the_allowed_roots(ragkb: RunningRagkb) -> None:
    share = source_roots(Path(ragkb.env["RAGKB_TEST_CWD"])) / "handbook"
    share.mkdir(parents=True)
    (share / "leave.md").write_text("# Leave\nAsk your manager two weeks before a holiday.", encoding="utf-8")
    kb_id = ragkb.create_kb("sources-folder")
    refused = ragkb.client.post(
        f"/v1/knowledge-bases/{kb_id}/sources", json={"name": "etc", "config": {"kind": "folder", "path": "/etc"}}
    )
    assert refused.status_code == 422 and refused.headers["content-type"].startswith("application/problem+json")
    assert ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/sources").json() == []
    source = create_source(ragkb, kb_id, {"name": "handbook", "config": {"kind": "folder", "path": str(share)}})
    job = run_source(ragkb, kb_id, source["id"])
    assert (job["status"], job["counts"]["uploaded"]) == ("succeeded", 1)
    assert ragkb.search("holiday notice to manager", [kb_id], top_k=1)[0]["source_id"] == "handbook:leave.md"


@pytest.mark.parametrize(
    "body",
    [
        {"name": "both", "config": {"kind": "folder", "path": "/tmp"}, "interval_s": 60, "cron": "0 * * * *"},
        {"name": "bad-cron", "config": {"kind": "web", "start_url": "http://127.0.0.1/"}, "cron": "every tuesday"},
        {"name": "ssh", "config": {"kind": "git", "repository": "ssh://host/repo.git"}},
        {"name": "in-url", "config": {"kind": "git", "repository": "https://me:pw@host/repo.git"}},
        {"name": "no:colon", "config": {"kind": "web", "start_url": "http://127.0.0.1/"}},
        {"name": "ftp", "config": {"kind": "web", "start_url": "ftp://127.0.0.1/"}},
    ],
)
def test_invalid_sources_are_refused_with_problem_details(ragkb: RunningRagkb, body: dict[str, Any]) -> None:
    kb_id = ragkb.create_kb(f"sources-invalid-{body['name'].replace(':', '-')}")
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/sources", json=body)
    assert response.status_code in (400, 422), response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/sources").json() == []


def test_s3_source_fills_the_kb_and_skips_unchanged_objects_by_etag(ragkb: RunningRagkb) -> None:
    keys = {"username": "e2e-access-key", "password": "e2e-secret-key"}
    with s3_server() as endpoint:
        bucket = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=keys["username"],
            aws_secret_access_key=keys["password"],
        )
        bucket.create_bucket(Bucket="field-notes")
        notes = {
            "notes/bees.md": "# Bees\nHoney bees dance to tell the hive where the flowers are.",
            "notes/ants.md": "# Ants\nAnts follow pheromone trails laid by the scouts.",
            "notes/moths.md": "# Moths\nMoths navigate by the moon and get confused by lamps.",
        }
        for key, text in notes.items():
            bucket.put_object(Bucket="field-notes", Key=key, Body=text.encode())
        kb_id = ragkb.create_kb("sources-s3")
        config = {"kind": "s3", "bucket": "field-notes", "prefix": "notes/", "endpoint_url": endpoint}
        source = create_source(ragkb, kb_id, {"name": "notes", "config": config, "credentials": keys})
        assert "e2e-secret-key" not in str(source)
        first = run_source(ragkb, kb_id, source["id"])
        assert (first["status"], first["counts"]["uploaded"]) == ("succeeded", 3), first
        before = documents_by_source_id(ragkb, kb_id)
        assert before["notes:notes/bees.md"]["metadata"]["etag"]

        bucket.put_object(Bucket="field-notes", Key="notes/ants.md", Body=b"# Ants\nLeafcutter ants farm a fungus.")
        bucket.delete_object(Bucket="field-notes", Key="notes/moths.md")
        second = run_source(ragkb, kb_id, source["id"])
    counts = second["counts"]
    assert (second["status"], counts["uploaded"], counts["deleted"], counts["unchanged"]) == ("succeeded", 1, 1, 1)
    after = documents_by_source_id(ragkb, kb_id)
    assert sorted(after) == ["notes:notes/ants.md", "notes:notes/bees.md"]
    assert after["notes:notes/bees.md"]["version"] == before["notes:notes/bees.md"]["version"]
    assert ragkb.search("ants that grow fungus", [kb_id], top_k=1)[0]["source_id"] == "notes:notes/ants.md"
