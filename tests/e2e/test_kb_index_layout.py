"""A KB's `index` layout through the public API on the embedded index (Qdrant Edge: one shard, one copy):
a layout it can keep is accepted, one that needs a Qdrant cluster is refused with problem details that say so,
and nothing is left behind by the refusal."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import RunningRagkb

pytestmark = pytest.mark.e2e


def test_edge_accepts_its_own_layout_and_refuses_a_clusters(ragkb: RunningRagkb) -> None:
    accepted = ragkb.client.post(
        "/v1/knowledge-bases",
        json={"name": "layout-single", "index": {"shard_number": 1, "replication_factor": 1}},
    )
    assert accepted.status_code == 201, accepted.text

    refused = ragkb.client.post(
        "/v1/knowledge-bases", json={"name": "layout-replicated", "index": {"replication_factor": 2}}
    )
    assert refused.status_code == 422
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert "Qdrant Edge" in refused.json()["detail"]
    names = {kb["name"] for kb in ragkb.client.get("/v1/knowledge-bases").json()}
    assert "layout-single" in names and "layout-replicated" not in names

    impossible = ragkb.client.post(
        "/v1/knowledge-bases",
        json={"name": "layout-impossible", "index": {"replication_factor": 1, "write_consistency_factor": 2}},
    )
    assert impossible.status_code == 422  # refused by the api's own validation, before the retriever
