"""The HTTP gateway's Prometheus metrics on the real stack: a request is
counted and timed under its route's template, method and status class, and
no job id, digest or path a client sent ever becomes a label value."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from quire.metrics import CATALOGUE, metric_names
from quire.stack.scrapeconfig import SCRAPE_FILE
from quire.stack.supervisor import GATEWAY, StackInfo
from quire.testing.pdfs import write_text_pdf

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parents[1]
OPENAPI = ROOT / "services" / "gateway" / "openapi.json"
JOB_ROUTE = "/v1/pdf/job/get/{job_id}"
Labels = tuple[tuple[str, str], ...]


@pytest.fixture
async def http(stack) -> AsyncIterator[httpx.AsyncClient]:  # type: ignore[no-untyped-def]
    info = StackInfo.read(stack.data_dir)
    headers = {"Authorization": f"Bearer {info.token()}"}
    async with httpx.AsyncClient(base_url=info.gateway_url, headers=headers, timeout=30) as client:
        yield client


async def _scrape(stack) -> str:  # type: ignore[no-untyped-def]
    address = StackInfo.read(stack.data_dir).metrics_endpoints[GATEWAY]
    async with httpx.AsyncClient(timeout=10) as client:
        reply = await client.get(f"http://{address}/metrics")
    assert reply.status_code == 200
    return reply.text


def _samples(exposition: str) -> dict[tuple[str, Labels], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
    }


def _requests(exposition: str, route: str, method: str, status_class: str) -> float:
    labels = (("method", method), ("route", route), ("status_class", status_class))
    return _samples(exposition).get(("quire_http_requests_total", labels), 0.0)


async def test_a_job_read_is_counted_under_its_route_template_and_no_id_is_a_label(
    stack,  # type: ignore[no-untyped-def]
    http: httpx.AsyncClient,
    tmp_path: Path,
) -> None:
    data = write_text_pdf(tmp_path / "m.pdf", [f"gateway metrics {uuid.uuid4().hex}"]).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    uploaded = await http.put(
        f"/v1/sources/{digest}", content=data, headers={"Content-Type": "application/pdf"}
    )
    assert uploaded.status_code == 201, uploaded.text
    merged = await http.post(
        "/v1/pdf/merge",
        json={
            "idempotency_key": str(uuid.uuid4()),
            "items": [{"position": 0, "document_id": "m", "sha256": digest}],
        },
    )
    assert merged.status_code == 202, merged.text
    job_id = merged.json()["job_id"]
    unknown = uuid.uuid4().hex
    stray = uuid.uuid4().hex

    before = await _scrape(stack)
    read = await http.get(merged.headers["location"])
    assert read.status_code == 200 and read.json()["job_id"] == job_id
    missing = await http.get(f"/v1/pdf/job/get/{unknown}")
    assert missing.status_code == 404, missing.text
    nowhere = await http.get(f"/no/such/{stray}")
    assert nowhere.status_code == 404
    after = await _scrape(stack)

    # The one read of the job, and the read of an unknown one, under the template.
    assert (
        _requests(after, JOB_ROUTE, "GET", "2xx") == _requests(before, JOB_ROUTE, "GET", "2xx") + 1
    )
    assert (
        _requests(after, JOB_ROUTE, "GET", "4xx") == _requests(before, JOB_ROUTE, "GET", "4xx") + 1
    )
    assert (
        _requests(after, "unmatched", "GET", "4xx")
        == _requests(before, "unmatched", "GET", "4xx") + 1
    )
    timed = _samples(after)
    labels = (("method", "GET"), ("route", JOB_ROUTE), ("status_class", "2xx"))
    assert timed[("quire_http_request_duration_seconds_count", labels)] >= 1
    assert timed[("quire_http_request_duration_seconds_sum", labels)] > 0
    # The upload and the merge before it, each under its own template.
    assert _requests(after, "/v1/sources/{sha256}", "PUT", "2xx") >= 1
    assert _requests(after, "/v1/pdf/merge", "POST", "2xx") >= 1

    # Nothing a client sent is a label value: no job id, digest or path.
    for secret in (job_id, digest, unknown, stray, f"jobs/{job_id}"):
        assert secret not in after, f"{secret} in the gateway's /metrics"
    routes = {
        dict(labels)["route"] for (name, labels) in _samples(after) if "route" in dict(labels)
    }
    templates = set(json.loads(OPENAPI.read_text())["paths"]) | {"/openapi.json", "unmatched"}
    assert routes and routes <= templates, routes - templates
    # Only the catalogue's families, each with the help text declared there.
    names = {name for (name, _labels) in _samples(after)}
    assert names <= metric_names(), names - metric_names()
    declared = {family.name: family.help for family in CATALOGUE if GATEWAY in family.exported_by}
    assert set(declared) == {"quire_http_requests_total", "quire_http_request_duration_seconds"}
    for name, help_text in declared.items():
        assert f"# HELP {name} {help_text}" in after


async def test_the_stack_scrapes_the_gateway(stack) -> None:  # type: ignore[no-untyped-def]
    info = StackInfo.read(stack.data_dir)
    written = (Path(stack.data_dir) / SCRAPE_FILE).read_text()
    assert f'"quire-{GATEWAY}"' in written
    assert f'"{info.metrics_endpoints[GATEWAY]}"' in written
