"""JsonBodyRequest.model (a body validated from its bytes) answers every body as a handler's `data: Model` does:
the same status, problem type, detail and `errors` (each error's field; its message in pydantic's JSON wording,
"a valid array" where the declared body says "a valid list"), for valid, invalid, non-JSON, NUL-holding and
wrongly typed bodies. Real Litestar apps, real HTTP through its test client."""

from __future__ import annotations

from typing import Any

import pytest
from litestar import Litestar, post
from litestar.testing import TestClient
from pydantic import BaseModel, Field

from ragkb_http import PROBLEM_HANDLERS, JsonBodyRequest

# Litestar 2.25 asks for `data: JSONBody[Model]`; the services' handlers declare `data: Model`, as this one does.
pytestmark = pytest.mark.filterwarnings("ignore::litestar.exceptions.LitestarDeprecationWarning")


class Inner(BaseModel):
    top_k: int = Field(default=10, ge=1)
    labels: list[str] = Field(default_factory=list)


class Body(BaseModel):
    query: str = Field(min_length=1)
    inner: list[Inner] = Field(min_length=1)
    metadata: dict[str, str] = Field(default_factory=dict)


@post("/declared", status_code=200)
async def declared(data: Body) -> dict[str, Any]:
    return data.model_dump()


@post("/from-bytes", status_code=200)
async def from_bytes(request: JsonBodyRequest) -> dict[str, Any]:
    return (await request.model(Body)).model_dump()


def app() -> Litestar:
    return Litestar(
        route_handlers=[declared, from_bytes], exception_handlers=PROBLEM_HANDLERS, request_class=JsonBodyRequest
    )


DEEP = "[" * 100_000 + "]" * 100_000
BODIES = {
    "valid": '{"query": "paid leave 有給休暇", "inner": [{"top_k": 3, "labels": ["hr"]}]}',
    "a backslash then u0000 is text, not NUL": '{"query": "C:\\\\u0000dir", "inner": [{}]}',
    "invalid fields": '{"query": "", "inner": [{"top_k": 0}, {"labels": "hr"}]}',
    "missing and mistyped": '{"query": 5}',
    "not an object": "[1, 2]",
    "not JSON": '{"query": ',
    "nested past the parser": DEEP,
    "NUL in a value": '{"query": "a\\u0000b", "inner": [{}]}',
    "NUL in a key": '{"query": "a", "inner": [{}], "metadata": {"k\\u0000": "v"}}',
    "NUL after an escaped backslash": '{"query": "a\\\\\\u0000", "inner": [{}]}',
}


@pytest.mark.parametrize("case", list(BODIES))
def test_a_body_validated_from_its_bytes_is_answered_as_a_declared_data_body(case: str) -> None:
    with TestClient(app()) as client:
        declared_answer = client.post("/declared", content=BODIES[case], headers={"Content-Type": "application/json"})
        bytes_answer = client.post("/from-bytes", content=BODIES[case], headers={"Content-Type": "application/json"})
    assert bytes_answer.status_code == declared_answer.status_code
    assert _comparable(bytes_answer.json(), "/from-bytes") == _comparable(declared_answer.json(), "/declared")
    expected_status = 200 if case in ("valid", "a backslash then u0000 is text, not NUL") else 422
    assert bytes_answer.status_code == expected_status, bytes_answer.text


def test_a_body_of_another_media_type_is_refused_with_415() -> None:
    with TestClient(app()) as client:
        refused = client.post("/from-bytes", content=BODIES["valid"], headers={"Content-Type": "text/plain"})
    assert refused.status_code == 415
    assert refused.json()["supported_media_types"] == ["application/json"]


def _comparable(answer: Any, path: str) -> Any:
    """The answer with its own path taken out of the texts that name it, and each error's message left out (kept
    only as being there)."""
    if not isinstance(answer, dict) or "status" not in answer:
        return answer
    errors = [{**error, "message": bool(error["message"])} for error in answer.get("errors", [])]
    return {**answer, "detail": answer["detail"].replace(path, "/PATH"), "instance": "/PATH", "errors": errors}
