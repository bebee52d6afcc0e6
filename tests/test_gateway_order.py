"""Seed 001's order fixture over HTTP (the lease-renewal packet): shuffled
uploads, a duplicate position, a missing position, a digest mismatch and an
assembler killed after writing and promoting its output but before
committing it. Each case, run twice, gives the same ordered output digest
or the same terminal reason."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pypdf
import pytest

from quire.faults import arm, fired
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.faultpointstack import FaultPointStack

pytestmark = pytest.mark.stack

SEED = Path(__file__).resolve().parents[1] / "examples" / "lease-renewal"
DOCUMENTS = json.loads((SEED / "manifest.json").read_text())["documents"]
KILLED = "assembler.before_promote"
"""The packet is written in the attempt's directory, not yet promoted into the store."""
Outcome = tuple[object, ...]


@pytest.fixture(scope="module")
def order_stack(fault_point_stack: FaultPointStack) -> tuple[Stack, Path]:
    """The fault-point stack (``conftest.py``), quiet: its processes obey armed
    fault points, with short leases so a killed worker's job is redelivered in
    seconds."""
    asyncio.run(fault_point_stack.settle())
    return fault_point_stack.stack, fault_point_stack.faults


@pytest.fixture
async def http(order_stack: tuple[Stack, Path]) -> AsyncIterator[httpx.AsyncClient]:
    info = StackInfo.read(order_stack[0].data_dir)
    headers = {"Authorization": f"Bearer {info.token()}"}
    async with httpx.AsyncClient(base_url=info.gateway_url, headers=headers, timeout=30) as client:
        yield client


def _bytes(document: dict[str, object]) -> bytes:
    return (SEED / str(document["file"])).read_bytes()


async def _upload(http: httpx.AsyncClient, order: list[int]) -> dict[int, str]:
    """Upload the seed documents in ``order``; their digests by position."""
    digests = {}
    for index in order:
        data = _bytes(DOCUMENTS[index])
        digest = hashlib.sha256(data).hexdigest()
        reply = await http.put(
            f"/v1/sources/{digest}", content=data, headers={"Content-Type": "application/pdf"}
        )
        assert reply.status_code == 201, reply.text
        digests[int(DOCUMENTS[index]["position"])] = digest
    return digests


def _items(
    digests: dict[int, str], rows: list[int], positions: list[int]
) -> list[dict[str, object]]:
    """Manifest rows in the order ``rows``, the row for document i at ``positions[i]``."""
    return [
        {
            "position": positions[i],
            "document_id": DOCUMENTS[i]["document_id"],
            "sha256": digests[int(DOCUMENTS[i]["position"])],
        }
        for i in rows
    ]


async def _merge(http: httpx.AsyncClient, items: list[dict[str, object]]) -> Outcome:
    """The terminal outcome: ("COMPLETED", digest of the pages' text in order),
    or the job's failure code, or the refusal's status, reason and fields."""
    reply = await http.post(
        "/v1/pdf/merge", json={"items": items, "idempotency_key": str(uuid.uuid4())}
    )
    if reply.status_code != 202:
        problem = reply.json()
        return (
            reply.status_code,
            problem["reason"],
            sorted(v["field"] for v in problem["violations"]),
        )
    location = reply.headers["location"]
    for _ in range(600):
        status = (await http.get(location)).json()
        if status["terminal"]:
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError(f"{location} not terminal in time")
    if status["state"] != "COMPLETED":
        return (status["state"], status["failure_code"])
    artifact = await http.get(f"{location}/artifact")
    assert hashlib.sha256(artifact.content).hexdigest() == status["output_digest"]
    pages = [page.extract_text() for page in pypdf.PdfReader(io.BytesIO(artifact.content)).pages]
    return ("COMPLETED", hashlib.sha256("\f".join(pages).encode()).hexdigest())


SEED_POSITIONS = [int(d["position"]) for d in DOCUMENTS]


async def test_shuffled_uploads_and_rows_give_the_same_ordered_output(
    http: httpx.AsyncClient,
) -> None:
    first = await _merge(http, _items(await _upload(http, [2, 0, 1]), [1, 2, 0], SEED_POSITIONS))
    second = await _merge(http, _items(await _upload(http, [1, 2, 0]), [2, 0, 1], SEED_POSITIONS))
    in_order = await _merge(http, _items(await _upload(http, [0, 1, 2]), [0, 1, 2], SEED_POSITIONS))
    assert first[0] == "COMPLETED", first
    assert first == second == in_order


async def test_a_duplicate_position_is_refused_the_same_way_twice(http: httpx.AsyncClient) -> None:
    digests = await _upload(http, [0, 1, 2])
    outcomes = [await _merge(http, _items(digests, [0, 1, 2], [0, 1, 1])) for _ in range(2)]
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][:2] == (400, "INVALID_MANIFEST")
    assert "manifest.items[2].position" in outcomes[0][2]  # type: ignore[operator]


async def test_a_missing_position_is_refused_the_same_way_twice(http: httpx.AsyncClient) -> None:
    digests = await _upload(http, [0, 1, 2])
    outcomes = [await _merge(http, _items(digests, [0, 1, 2], [0, 1, 3])) for _ in range(2)]
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][:2] == (400, "INVALID_MANIFEST")


async def test_a_digest_mismatch_is_refused_the_same_way_twice(http: httpx.AsyncClient) -> None:
    claimed = hashlib.sha256(_bytes(DOCUMENTS[1])).hexdigest()
    outcomes = []
    for _ in range(2):
        reply = await http.put(
            f"/v1/sources/{claimed}",
            content=_bytes(DOCUMENTS[0]),
            headers={"Content-Type": "application/pdf"},
        )
        outcomes.append((reply.status_code, reply.json()["reason"]))
    assert outcomes == [(400, "DIGEST_MISMATCH")] * 2


async def test_an_assembler_killed_between_writing_and_promoting_its_output_gives_the_same_output(
    http: httpx.AsyncClient, order_stack: tuple[Stack, Path]
) -> None:
    stack, faults = order_stack
    digests = await _upload(http, [0, 1, 2])
    expected = await _merge(http, _items(digests, [0, 1, 2], SEED_POSITIONS))
    for _ in range(2):
        restarts = stack.restarts("assembler")
        arm(faults, KILLED)
        outcome = await _merge(http, _items(digests, [2, 1, 0], SEED_POSITIONS))
        assert fired(faults, KILLED), "the assembler was killed at the fault point"
        assert stack.restarts("assembler") > restarts
        assert outcome == expected
