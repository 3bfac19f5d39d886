"""Property-based fuzzing of the live API from its own OpenAPI document (schemathesis), as an admin.

Every operation gets a bounded number of generated requests, valid and invalid, checked with every check
schemathesis has (`--checks all`): no 5xx; status codes, content types, headers and bodies as documented;
invalid data refused, valid data accepted; auth not ignored; unsupported methods 405 with Allow; and no answer
may leak a stack trace or a path.
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
from schemathesis.checks import CHECKS, load_all_checks

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
# Valid data may still be refused with 422, and only with 422 (problem details naming the rule): rules the
# schema cannot state — one analyzer language per script, a regex that must compile, a query that is not
# blank, no NUL in text, unique source_ids in a manifest, metadata bounds. Every other refusal of schema-valid
# data (400, 415, …) fails the check.
VALID_DATA_STATUSES = ["2xx", "401", "403", "404", "409", "422", "429"]
# An upload's format is in its bytes, which no schema describes: a schema-valid file that is a GIF or random
# bytes is refused with 415 naming the supported formats (what the README promises). Only for that operation.
UPLOAD = "POST /v1/knowledge-bases/{kb_id}/documents"
VALID_UPLOAD_STATUSES = [*VALID_DATA_STATUSES, "415"]
# Invalid data may also be refused for its size before it is read (413: a generated body past the limit).
INVALID_DATA_STATUSES = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]


def test_api_answers_generated_requests_without_5xx_schema_violations_or_leaks(ragkb: RunningRagkb) -> None:
    schema = schemathesis.openapi.from_url(f"{ragkb.client.base_url}/schema/openapi.json")
    schema.config.checks.negative_data_rejection.expected_statuses = INVALID_DATA_STATUSES
    load_all_checks()
    checks = list(CHECKS.get_all())
    assert len(checks) >= 14  # every built-in check: `--checks all`
    auth = {"Authorization": ragkb.client.headers["Authorization"]}
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10
    for operation in operations:
        valid = VALID_UPLOAD_STATUSES if operation.label == UPLOAD else VALID_DATA_STATUSES
        schema.config.checks.positive_data_acceptance.expected_statuses = valid
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                _fuzz(operation, mode, auth, checks)
            except Unsatisfiable:
                assert mode == GenerationMode.NEGATIVE  # an operation without inputs has no invalid request
            except (Exception, BaseExceptionGroup) as exc:  # failed checks: collect them, fuzz the rest too
                found = exc.exceptions if isinstance(exc, BaseExceptionGroup) else [exc]
                failures.append(f"{operation.label} ({mode.value}): " + "\n".join(str(e)[:2000] for e in found))
    assert failures == [], "\n\n".join(failures)


def _fuzz(operation: Any, mode: GenerationMode, auth: dict[str, str], checks: list[Any]) -> None:
    @FUZZ_SETTINGS
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        response = case.call_and_validate(headers=auth, checks=checks)
        leaked = [marker for marker in LEAKS if marker in response.text]
        assert leaked == [], f"{case.method} {case.formatted_path} answered {response.status_code} with {leaked}"

    run()
