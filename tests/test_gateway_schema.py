"""Schemathesis against the live gateway's own OpenAPI document, with a
valid bearer token: whatever the generated request, no server error (5xx)
and every answer fits the document (status, media type, headers, schema)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from quire.stack.supervisor import StackInfo

pytestmark = pytest.mark.stack

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def gateway_info(stack) -> StackInfo:  # type: ignore[no-untyped-def]
    return StackInfo.read(stack.data_dir)


def test_the_gateway_answers_every_request_within_its_document(stack) -> None:  # type: ignore[no-untyped-def]
    """Every operation, with requests that fit the document and requests that
    do not: each answer is a 2xx/4xx the document declares, in its shape."""
    info = StackInfo.read(stack.data_dir)
    api = schemathesis.openapi.from_url(f"{info.gateway_url}/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) >= 10
    headers = {"Authorization": f"Bearer {info.token()}"}
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(
                max_examples=6,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def answered_within_the_document(case) -> None:  # type: ignore[no-untyped-def]
                case.call_and_validate(
                    base_url=info.gateway_url, headers=headers, checks=CHECKS, timeout=30
                )

            try:
                answered_within_the_document()
            except Unsatisfiable:
                # Nothing about this operation can be invalid (no parameters, no body).
                assert mode is GenerationMode.NEGATIVE, operation.label
