"""The example service's OpenAPI documents (SPEC 14.2): valid (openapi-spec-validator) and true
(schemathesis: every operation of each port, generated inputs, no 5xx, documented status, type,
headers, schema). ``examples/`` as ``make run`` serves it, ports 0, by ``fwrest serve`` (its ``app``
package cannot share the process with other tests' ``app``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from openapi_spec_validator import validate
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import ServerProcess
from tests.e2e.support import example_copy

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
EXAMPLES_PER_OPERATION = 8  # bounded: the whole module runs in seconds


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    ini = example_copy(tmp_path_factory.mktemp("conformance"))
    server = ServerProcess(ini, workers=1).wait_ready()
    yield server
    server.stop()


def session_of(example: ServerProcess, name: str) -> requests.Session:
    """A session with Basic, or the oAuth2 port's bearer token (examples/app/oauth.py)."""
    session = requests.Session()
    if name == "HTTP_BASIC":
        session.auth = ("ada", "lovelace")
    elif name == "HTTPS_REST":
        # per request too: a REQUESTS_CA_BUNDLE in the environment overrides the session's
        session.verify = str(example.config.parent / "certs" / "ca.pem")
        token = session.post(
            f"{example.url(name)}/fw/oauth2/token",
            data={
                "grant_type": "password",
                "username": "grace",
                "password": "hopper",
                "client_id": "example-app",
                "client_secret": "example-secret",
            },
            timeout=10,
            verify=session.verify,
        )
        assert token.status_code == 200, token.text
        session.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
    return session


def document(example: ServerProcess, name: str, session: requests.Session) -> dict[str, Any]:
    r = session.get(f"{example.url(name)}/fw/rest/openapi.json", timeout=10, verify=session.verify)
    assert r.status_code == 200, r.text
    doc: dict[str, Any] = r.json()
    return doc


@pytest.mark.parametrize("name", ["HTTP_REST", "HTTPS_REST", "HTTP_BASIC"])
def test_each_ports_document_is_valid_openapi(example: ServerProcess, name: str) -> None:
    doc = document(example, name, session_of(example, name))
    validate(doc)  # raises on an invalid document
    assert doc["openapi"] == "3.1.0"
    assert "/rest/fw/rest/docs" in doc["paths"]
    assert "/rest/users/{id}" in doc["paths"]


# HTTP_BASIC checks an argon2id hash once per OnAuthCache period (SPEC 4.1), not per request
@pytest.mark.parametrize("name", ["HTTP_REST", "HTTPS_REST", "HTTP_BASIC"])
def test_every_operation_answers_as_documented(example: ServerProcess, name: str) -> None:
    session = session_of(example, name)
    doc = document(example, name, session)
    schema = schemathesis.openapi.from_dict(doc)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20, [op.label for op in operations]
    tried: list[str] = []

    for operation in operations:

        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            derandomize=True,  # the same cases on every run
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def run(case: Any) -> None:
            response = case.call(
                base_url=doc["servers"][0]["url"],
                session=session,
                timeout=10,
                verify=session.verify,
            )
            case.validate_response(response, checks=CHECKS)
            tried.append(case.operation.label)

        run()
    # every operation was called at least once
    assert {op.label for op in operations} <= set(tried)
