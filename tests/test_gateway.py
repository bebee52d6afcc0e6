"""The HTTP door on the real stack: the seed's flow over HTTP (upload, merge,
poll, download), idempotency keys from the header or the body, RFC 9457
problems carrying admission's reason codes and retry hints, uploads held to
their declared length, and the OpenAPI document as committed."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from quire.gateway.app import create_app
from quire.gateway.config import GatewaySettings
from quire.gateway.openapi import render
from quire.stack.supervisor import StackInfo
from quire.testing.pdfs import write_text_pdf
from quire.tls import aio_channel

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "examples" / "lease-renewal"
PROBLEM = "application/problem+json"


@pytest.fixture
async def http(stack) -> AsyncIterator[httpx.AsyncClient]:  # type: ignore[no-untyped-def]
    """An HTTP client of the stack's gateway, as the development tenant."""
    info = StackInfo.read(stack.data_dir)
    headers = {"Authorization": f"Bearer {info.token()}"}
    async with httpx.AsyncClient(base_url=info.gateway_url, headers=headers, timeout=30) as client:
        yield client


async def put_source(http: httpx.AsyncClient, data: bytes) -> httpx.Response:
    digest = hashlib.sha256(data).hexdigest()
    return await http.put(
        f"/v1/sources/{digest}", content=data, headers={"Content-Type": "application/pdf"}
    )


async def seed_items(http: httpx.AsyncClient) -> list[dict[str, object]]:
    """The seed packet's three documents, uploaded, as manifest items."""
    manifest = json.loads((SEED / "manifest.json").read_text())
    items = []
    for document in manifest["documents"]:
        uploaded = await put_source(http, (SEED / document["file"]).read_bytes())
        assert uploaded.status_code == 201, uploaded.text
        items.append(
            {
                "position": document["position"],
                "document_id": document["document_id"],
                "sha256": uploaded.json()["sha256"],
            }
        )
    return items


async def poll_until_terminal(http: httpx.AsyncClient, location: str) -> dict[str, object]:
    for _ in range(600):
        reply = await http.get(location)
        assert reply.status_code == 200, reply.text
        status = reply.json()
        if status["terminal"]:
            return status  # type: ignore[no-any-return]
        await asyncio.sleep(0.2)
    raise AssertionError(f"{location} not terminal in time")


def assert_problem(reply: httpx.Response, status: int, reason: str) -> dict[str, object]:
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"].startswith(PROBLEM)
    problem = reply.json()
    assert problem["status"] == status
    assert problem["reason"] == reason
    assert problem["type"] == f"urn:quire:problem:{reason.lower()}"
    return problem  # type: ignore[no-any-return]


async def test_the_seed_packet_is_merged_polled_and_downloaded_over_http(
    http: httpx.AsyncClient,
) -> None:
    items = await seed_items(http)
    reply = await http.post(
        "/v1/pdf/merge",
        json={"idempotency_key": str(uuid.uuid4()), "items": items, "bundle_id": "lease-7"},
    )
    assert reply.status_code == 202, reply.text
    accepted = reply.json()
    assert reply.headers["location"] == f"/v1/pdf/job/get/{accepted['job_id']}"
    assert accepted["item_count"] == 3 and not accepted["terminal"]

    status = await poll_until_terminal(http, reply.headers["location"])
    assert status["state"] == "COMPLETED", status
    assert status["failure_code"] is None and status["bundle_id"] == "lease-7"

    digest = hashlib.sha256()
    async with http.stream("GET", f"{reply.headers['location']}/artifact") as download:
        assert download.status_code == 200
        assert download.headers["content-type"] == "application/pdf"
        announced = download.headers["repr-digest"]
        async for chunk in download.aiter_bytes():
            digest.update(chunk)
    assert digest.hexdigest() == status["output_digest"]
    assert announced == f"sha-256=:{base64.b64encode(digest.digest()).decode()}:"


async def test_a_small_packet_is_one_request_with_its_sources_inline(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    data = [
        write_text_pdf(
            tmp_path / f"inline-{n}.pdf", [f"inline {n} {uuid.uuid4().hex}"]
        ).read_bytes()
        for n in range(2)
    ]
    sources = [
        {
            "sha256": hashlib.sha256(d).hexdigest(),
            "content_type": "application/pdf",
            "content": base64.b64encode(d).decode(),
        }
        for d in data
    ]
    items = [
        {"position": n, "document_id": f"d{n}", "sha256": s["sha256"]}
        for n, s in enumerate(sources)
    ]
    reply = await http.post(
        "/v1/pdf/merge",
        json={"idempotency_key": str(uuid.uuid4()), "items": items, "sources": sources},
    )
    assert reply.status_code == 202, reply.text
    status = await poll_until_terminal(http, reply.headers["location"])
    assert status["state"] == "COMPLETED", status

    wrong = dict(sources[0], sha256=hashlib.sha256(b"other").hexdigest())
    refused = await http.post(
        "/v1/pdf/merge",
        json={
            "idempotency_key": str(uuid.uuid4()),
            "items": [dict(items[0], sha256=wrong["sha256"])],
            "sources": [wrong],
        },
    )
    problem = assert_problem(refused, 400, "DIGEST_MISMATCH")
    assert [v["field"] for v in problem["violations"]] == ["inline_sources[0]"]  # type: ignore[union-attr]


async def test_an_idempotency_key_from_the_header_or_the_body_returns_the_same_job(
    http: httpx.AsyncClient,
) -> None:
    items = await seed_items(http)
    key = str(uuid.uuid4())
    by_header = await http.post(
        "/v1/pdf/merge", json={"items": items}, headers={"Idempotency-Key": key}
    )
    by_body = await http.post("/v1/pdf/merge", json={"items": items, "idempotency_key": key})
    assert by_header.status_code == by_body.status_code == 202
    assert by_header.json()["job_id"] == by_body.json()["job_id"]

    both = await http.post(
        "/v1/pdf/merge",
        json={"items": items, "idempotency_key": key},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    problem = assert_problem(both, 400, "INVALID_REQUEST")
    assert [v["field"] for v in problem["violations"]] == ["idempotency_key"]  # type: ignore[union-attr]

    other = await http.post("/v1/pdf/merge", json={"items": items[:2], "idempotency_key": key})
    assert_problem(other, 409, "IDEMPOTENCY_KEY_REUSED")


async def test_a_bad_token_is_a_401_problem_that_does_not_echo_it(stack) -> None:  # type: ignore[no-untyped-def]
    info = StackInfo.read(stack.data_dir)
    token = f"qt_{uuid.uuid4().hex}"
    async with httpx.AsyncClient(base_url=info.gateway_url) as http:
        reply = await http.get(
            f"/v1/pdf/job/get/{'0' * 28}", headers={"Authorization": f"Bearer {token}"}
        )
        missing = await http.post("/v1/pdf/merge", json={"items": [], "idempotency_key": "k"})
    assert_problem(reply, 401, "UNAUTHENTICATED")
    assert token not in reply.text
    assert_problem(missing, 401, "UNAUTHENTICATED")


async def test_an_unknown_job_is_a_404_problem(http: httpx.AsyncClient) -> None:
    assert_problem(await http.get(f"/v1/pdf/job/get/{'ab' * 14}"), 404, "NOT_FOUND")
    assert_problem(await http.get("/v1/pdf/job/get/not-a-job/artifact"), 404, "NOT_FOUND")
    assert_problem(await http.post(f"/v1/pdf/job/cancel/{'cd' * 14}"), 404, "NOT_FOUND")


async def test_an_invalid_manifest_is_a_400_problem_naming_each_field(
    http: httpx.AsyncClient,
) -> None:
    items = await seed_items(http)
    items[1]["position"] = 0  # a duplicate position, and position 1 missing
    reply = await http.post("/v1/pdf/merge", json={"items": items, "idempotency_key": "dup"})
    problem = assert_problem(reply, 400, "INVALID_MANIFEST")
    fields = {v["field"] for v in problem["violations"]}  # type: ignore[union-attr]
    assert "manifest.items[1].position" in fields, problem


async def test_a_body_that_does_not_fit_the_api_is_a_problem_with_a_reason(
    http: httpx.AsyncClient,
) -> None:
    reply = await http.post("/v1/pdf/merge", json={"items": [{"position": -1}]})
    problem = assert_problem(reply, 422, "INVALID_REQUEST")
    fields = {v["field"] for v in problem["violations"]}  # type: ignore[union-attr]
    assert {"body.items.0.position", "body.items.0.sha256"} <= fields


async def test_overload_is_a_429_problem_with_retry_after_and_cancel_works(
    stack,
    tenants,
    validate_queue,  # type: ignore[no-untyped-def]
) -> None:
    info = StackInfo.read(stack.data_dir)
    tenant = await tenants("http-busy", max_outstanding_jobs=1)
    await validate_queue.pause()
    token = tenant._metadata[0][1]  # noqa: SLF001 - the tenant's own bearer header
    async with httpx.AsyncClient(
        base_url=info.gateway_url, headers={"Authorization": token}, timeout=30
    ) as http:
        items = await seed_items(http)
        first = await http.post("/v1/pdf/merge", json={"items": items, "idempotency_key": "a"})
        assert first.status_code == 202, first.text
        second = await http.post("/v1/pdf/merge", json={"items": items, "idempotency_key": "b"})
        problem = assert_problem(second, 429, "TENANT_QUOTA_EXCEEDED")
        assert problem["retry_after_seconds"] and float(second.headers["retry-after"]) >= 1

        cancelled = await http.post(f"/v1/pdf/job/cancel/{first.json()['job_id']}")
        assert cancelled.status_code == 200, cancelled.text
        status = await poll_until_terminal(http, first.headers["location"])
        assert status["state"] == "CANCELLED"
        assert_problem(
            await http.get(f"{first.headers['location']}/artifact"), 409, "JOB_NOT_COMPLETED"
        )


async def test_an_upload_is_held_to_its_declared_length_and_the_ceiling(
    stack,
    tenants,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    info = StackInfo.read(stack.data_dir)
    tenant = await tenants("http-small", max_upload_bytes=4096)
    token = tenant._metadata[0][1]  # noqa: SLF001
    data = write_text_pdf(tmp_path / "a.pdf", [f"small {uuid.uuid4().hex}"]).read_bytes()
    big = write_text_pdf(tmp_path / "b.pdf", [f"big {i} {uuid.uuid4().hex}" for i in range(80)])
    async with httpx.AsyncClient(
        base_url=info.gateway_url, headers={"Authorization": token}, timeout=30
    ) as http:
        over = await put_source(http, big.read_bytes())
        assert_problem(over, 413, "SIZE_LIMIT_EXCEEDED")

        async def body() -> AsyncIterator[bytes]:
            yield data

        chunked = await http.put(
            f"/v1/sources/{hashlib.sha256(data).hexdigest()}",
            content=body(),
            headers={"Content-Type": "application/pdf"},
        )
        assert_problem(chunked, 411, "UPLOAD_HEADER_MISSING")
        wrong = await http.put(
            f"/v1/sources/{'0' * 64}", content=data, headers={"Content-Type": "application/pdf"}
        )
        assert_problem(wrong, 400, "DIGEST_MISMATCH")
        typed = await http.put(
            f"/v1/sources/{hashlib.sha256(data).hexdigest()}",
            content=data,
            headers={"Content-Type": "text/html"},
        )
        assert_problem(typed, 415, "CONTENT_TYPE_NOT_ALLOWED")

    # Past its declared length: an HTTP/1.1 server frames the body by its
    # Content-Length, so the gateway's own guard is shown on the app itself,
    # in front of the real admission, with a body that goes on.
    declared = data[:100]
    over_declared, _ = await _asgi_put(info, token, hashlib.sha256(declared).hexdigest(), 100, data)
    assert_problem(over_declared, 413, "SIZE_EXCEEDS_DECLARATION")


async def test_a_declaration_that_cannot_hold_is_refused_before_the_body_moves(
    stack,
    tenants,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    """A digest that is no sha256, or a declared size of nothing, is refused
    by the gateway itself, with admission's reason, before it reads a byte of
    the body or opens the stream to admission."""
    info = StackInfo.read(stack.data_dir)
    tenant = await tenants("http-declared")
    token = tenant._metadata[0][1]  # noqa: SLF001
    data = write_text_pdf(tmp_path / "a.pdf", [f"declared {uuid.uuid4().hex}"]).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    cases = [
        (digest.upper(), len(data), "DIGEST_MISMATCH", "sha256"),
        (digest[:-1], len(data), "DIGEST_MISMATCH", "sha256"),
        (digest, 0, "SIZE_BELOW_DECLARATION", "Content-Length"),
    ]
    for sha256, declared, reason, field in cases:
        refused, read = await _asgi_put(info, token, sha256, declared, data)
        problem = assert_problem(refused, 400, reason)
        assert [v["field"] for v in problem["violations"]] == [field]
        assert read == 0, "the body was read for an upload refused on its declaration"


async def _asgi_put(
    info: StackInfo, token: str, sha256: str, declared: int, data: bytes
) -> tuple[httpx.Response, int]:
    """The gateway app's answer to a PUT whose body goes on past ``declared``,
    and how many body pieces it read."""
    settings = GatewaySettings(admission_address=info.endpoints["admission"])
    channel = aio_channel(settings.admission_address, None)
    app = create_app(settings, channel)
    pieces = [data[i : i + 64] for i in range(0, len(data), 64)]
    read = 0
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        nonlocal read
        if read == len(pieces):
            await asyncio.sleep(3600)  # never: the gateway stops reading first
        read += 1
        return {"type": "http.request", "body": pieces[read - 1], "more_body": read < len(pieces)}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "PUT",
        "scheme": "http",
        "path": f"/v1/sources/{sha256}",
        "raw_path": f"/v1/sources/{sha256}".encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"content-type", b"application/pdf"),
            (b"content-length", str(declared).encode()),
            (b"authorization", token.encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    try:
        await asyncio.wait_for(app(scope, receive, send), timeout=30)
    finally:
        await channel.close()
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")  # type: ignore[misc]
    headers = [(k.decode(), v.decode()) for k, v in start["headers"]]  # type: ignore[attr-defined]
    assert read <= (declared // 64) + 2, "read on past the first byte over the declaration"
    response = httpx.Response(start["status"], headers=headers, content=body)  # type: ignore[arg-type]
    return response, read


HEADER_SECONDS = 2.0  # QUIRE_GATEWAY_HEADER_SECONDS of the shared stack (conftest)


async def test_silent_and_slow_header_connections_are_closed_at_the_bound(
    stack, http: httpx.AsyncClient
) -> None:  # type: ignore[no-untyped-def]
    """Slowloris: connections that send nothing, or their headers a byte at a
    time, are closed once the header bound passes; others are served meanwhile."""
    url = httpx.URL(StackInfo.read(stack.data_dir).gateway_url)
    opened = asyncio.get_running_loop().time()
    silent = [await asyncio.open_connection(url.host, url.port) for _ in range(40)]
    dripping = [await asyncio.open_connection(url.host, url.port) for _ in range(40)]
    for _reader, writer in dripping:
        writer.write(b"GET /v1/pdf/job/get/00 HTTP/1.1\r\nHost: quire\r\n")

    async def drip(writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while not writer.is_closing():
                writer.write(b"X")
                await writer.drain()
                await asyncio.sleep(0.3)

    drips = [asyncio.create_task(drip(writer)) for _reader, writer in dripping]
    try:
        served = await http.get("/v1/pdf/job/get/0000")
        assert served.status_code == 404, "a well-behaved client is served meanwhile"

        async def closed(reader: asyncio.StreamReader) -> float:
            with contextlib.suppress(ConnectionError):
                while await reader.read(1024):
                    pass
            return asyncio.get_running_loop().time() - opened

        async with asyncio.timeout(HEADER_SECONDS + 8):
            ends = await asyncio.gather(*(closed(r) for r, _w in [*silent, *dripping]))
    finally:
        for task in drips:
            task.cancel()
        for _reader, writer in [*silent, *dripping]:
            writer.close()
    assert min(ends) >= HEADER_SECONDS - 0.5, "not before the bound"
    assert max(ends) <= HEADER_SECONDS + 6, "each closed at the bound"


async def test_the_served_openapi_document_is_the_committed_one(
    http: httpx.AsyncClient,
) -> None:
    served = (await http.get("/openapi.json")).json()
    assert served["openapi"].startswith("3.1")
    committed = (ROOT / "services" / "gateway" / "openapi.json").read_text()
    assert render(served) == committed, "run `make openapi` and commit the document"


async def test_a_batch_is_submitted_read_listed_and_cancelled_over_http(
    http: httpx.AsyncClient,
) -> None:
    items = await seed_items(http)
    packets = [{"bundle_id": f"p{i}", "items": items} for i in range(3)]
    key = str(uuid.uuid4())
    reply = await http.post(
        "/v1/pdf/batch/submit", json={"packets": packets, "idempotency_key": key}
    )
    assert reply.status_code == 202, reply.text
    batch = reply.json()
    assert batch["packet_count"] == 3
    assert reply.headers["location"] == f"/v1/pdf/batch/get/{batch['batch_id']}"
    again = await http.post(
        "/v1/pdf/batch/submit", json={"packets": packets}, headers={"Idempotency-Key": key}
    )
    assert again.json()["batch_id"] == batch["batch_id"]

    read = await http.get(reply.headers["location"])
    assert read.status_code == 200 and read.json()["packet_count"] == 3
    page = await http.get(f"/v1/pdf/batch/jobs/{batch['batch_id']}", params={"page_size": 2})
    assert page.status_code == 200, page.text
    assert [job["index"] for job in page.json()["jobs"]] == [0, 1]
    assert page.json()["next_page_token"]

    cancelled = await http.post(f"/v1/pdf/batch/cancel/{batch['batch_id']}")
    assert cancelled.status_code == 200, cancelled.text
    counts = cancelled.json()
    total = (
        counts["not_dispatched_cancelled"]
        + counts["in_flight_finishing"]
        + counts["already_terminal"]
    )
    assert total == 3
    assert_problem(await http.get(f"/v1/pdf/batch/get/{'ef' * 14}"), 404, "NOT_FOUND")
