"""Property-based fuzzing of the live API from its own OpenAPI document (schemathesis), as an admin.

Every operation gets a bounded number of generated requests, valid and invalid: none may answer 5xx, every
answer must match the schema documented for its status, and no answer may leak a stack trace or a path.
(schemathesis' own pytest loader, `from_fixture`, does not run under pytest 9, so the operations are
driven here with Hypothesis directly.)
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from tests.e2e.conftest import RunningRagkb

pytestmark = pytest.mark.e2e
EXAMPLES_PER_OPERATION_AND_MODE = 15
LEAKS = ("Traceback", "/work/", "site-packages", 'File "')
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES_PER_OPERATION_AND_MODE,
    derandomize=True,  # the same requests on every run: a failure reproduces
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    report_multiple_bugs=False,
)


def test_api_answers_generated_requests_without_5xx_schema_violations_or_leaks(ragkb: RunningRagkb) -> None:
    schema = schemathesis.openapi.from_url(f"{ragkb.client.base_url}/schema/openapi.json")
    auth = {"Authorization": ragkb.client.headers["Authorization"]}
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                _fuzz(operation, mode, auth)
            except Unsatisfiable:
                assert mode == GenerationMode.NEGATIVE  # an operation without inputs has no invalid request
            except Exception as exc:  # a failed check (or group of them): collect it, fuzz the rest too
                failures.append(f"{operation.label} ({mode.value}): {str(exc)[:2000]}")
    assert failures == [], "\n\n".join(failures)


def _fuzz(operation: Any, mode: GenerationMode, auth: dict[str, str]) -> None:
    @FUZZ_SETTINGS
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        response = case.call_and_validate(headers=auth, checks=[not_a_server_error, response_schema_conformance])
        leaked = [marker for marker in LEAKS if marker in response.text]
        assert leaked == [], f"{case.method} {case.formatted_path} answered {response.status_code} with {leaked}"

    run()
