"""Schemathesis against the live service's own /api/schema/: for a bounded number of generated
requests per operation, no 5xx, and every status, content type and body matches the schema."""

from __future__ import annotations

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.integration.test_hostile_inputs import CHAT, COMPLETIONS, CORPUS, NATIVE, PROMPT, PROMPTS

from .helpers import auth

pytestmark = [pytest.mark.system, pytest.mark.timeout(600)]

EXAMPLES_PER_OPERATION = 25


@pytest.fixture
def api_schema(postgres_stack):
    return schemathesis.openapi.from_url(f"{postgres_stack.base_url}/api/schema/")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,  # the same examples every run: a failure reproduces
)
def test_every_operation_answers_as_its_schema_says(case, postgres_stack):
    case.call_and_validate(
        headers=auth(postgres_stack.api_key),
        timeout=60,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
    )


@pytest.mark.parametrize("path", [NATIVE, COMPLETIONS, CHAT])
def test_the_hostile_corpus_over_http_is_refused_with_a_4xx(postgres_stack, path):
    """The integration test's corpus (tests/integration/test_hostile_inputs.py), sent as raw
    bytes to the production-shaped stack: gunicorn, PostgreSQL, the worker."""
    bodies = ["{" + PROMPT[path] + ", " + members + "}" for _, members, _ in CORPUS]
    bodies += ["{" + members + "}" for p, _, members, _ in PROMPTS if p == path]
    for body in bodies:
        response = requests.post(
            postgres_stack.base_url + path,
            data=body.encode("utf-8"),
            headers={**auth(postgres_stack.api_key), "Content-Type": "application/json"},
            timeout=60,
        )
        assert response.status_code == 400, (body[:80], response.status_code, response.text)
