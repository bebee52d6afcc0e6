"""The whole stack with its blobs in NATS (``QUIRE_BLOB_BACKEND=nats``): jobs
complete, artifacts download with their digests, the checker finds nothing,
and no blob or data key lands in the data directory.

And least privilege in that layout: every service login tries every
destructive JetStream request on every stream and bucket — deleting,
purging or reconfiguring a stream, deleting a consumer or a message, and
overwriting, deleting or rolling up an entry of the job gate, the key ring
or a blob — and each is refused, so the operator afterwards finds every
one of them as it was. Deleting blobs and shredding data keys works with
the ``keeper`` login, which no service holds."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from nats.js import JetStreamContext
from test_faults_common import Running, running_stack, submit_text_jobs, wait_all

from quire.client import AdmissionClient, PacketItem, TenantAdminClient
from quire.grpcstatus import reason_of
from quire.invariants import check
from quire.jobs import job_id, state_name
from quire.natsauth import KEEPER, OPERATOR
from quire.runtime import connect_nats
from quire.settings import SERVICES, ServiceSettings
from quire.storage import keeper_env, open_blob_store, tool_kek_settings
from quire.testing.pdfs import write_text_pdf
from quire.workqueue.topology import TOPOLOGY_STREAMS

pytestmark = [pytest.mark.stack, pytest.mark.asyncio(loop_scope="module")]

JOBS = 4
REFUSAL_SECONDS = 3.0
"""A request the server refuses for permissions never gets a reply; this long
is given to each (all at once)."""
ENTRY_STREAMS = ("KV_QUIRE_JOB_GATES", "KV_QUIRE_KEYRING", "OBJ_QUIRE_BLOBS")
"""Streams whose every entry no service may overwrite, delete or purge."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def running(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    directory = tmp_path_factory.mktemp("natsblobs")
    async with running_stack(directory / "stack", {"QUIRE_BLOB_BACKEND": "nats"}) as stack:
        yield stack


def _files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []


async def test_jobs_complete_with_every_blob_in_nats_and_none_on_disk(
    running: Running, tmp_path: Path
) -> None:
    names = await submit_text_jobs(running.client, tmp_path / "pdfs", JOBS)
    jobs = await wait_all(running.client, names, timeout=180)
    assert {state_name(job.state) for job in jobs.values()} == {"COMPLETED"}
    for name, job in jobs.items():
        output = tmp_path / "out" / f"{name.removeprefix('jobs/')}.pdf"
        assert await running.client.download(name, output) == job.output_digest
        assert hashlib.sha256(output.read_bytes()).hexdigest() == job.output_digest

    service_env = running.stack.service_env()
    report = check(running.data_dir, stopped=False, env=service_env)
    assert report.ok, report.findings
    assert report.artifacts >= JOBS

    settings = ServiceSettings.from_env("audit", service_env)
    blobs = open_blob_store(settings, kek=tool_kek_settings(running.data_dir, service_env))
    try:
        kinds = {key.split("/")[0] for key in blobs.list_keys("")}
        assert kinds == {"sources", "assembled", "signed"}
        assert [entry["tenant"] for entry in blobs.keys.status()]
    finally:
        blobs.close()

    # Only the (empty) temporary spaces are on disk: no blob, no wrapped key.
    assert _files_under(running.data_dir / "blobs") == []
    on_disk = {p.name for p in _files_under(running.data_dir)}
    for job in jobs.values():
        assert not any(job.output_digest in name for name in on_disk)


async def _login(running: Running, user: str) -> Any:
    return await connect_nats(
        running.stack.nats_url, f"attacker-{user}", **running.stack.nats_login(user)
    )


async def _victims(js: JetStreamContext, job: str) -> dict[str, list[tuple[str, int, bytes]]]:
    """Per entry stream, (subject, sequence, data) of what a finished job left:
    its gate entries, the tenant's wrapped key, its blobs' metas and chunks."""
    found: dict[str, list[tuple[str, int, bytes]]] = {}
    for stream in ENTRY_STREAMS:
        info = await js.stream_info(stream, subjects_filter=">")
        subjects = sorted(info.state.subjects or {})
        if stream == "KV_QUIRE_JOB_GATES":
            subjects = [s for s in subjects if f".{job_id(job)}." in s]
        entries = []
        for subject in subjects[:12]:
            msg = await js.get_msg(stream, seq=1, subject=subject, next=True)
            entries.append((subject, msg.seq or 0, msg.data or b""))
        found[stream] = entries
    return found


def _attacks(
    js: JetStreamContext, nc: Any, victims: dict[str, list[tuple[str, int, bytes]]]
) -> list[Awaitable[Any]]:
    """Every destructive request, each expected to fail."""
    attempts: list[Awaitable[Any]] = []
    for stream in TOPOLOGY_STREAMS:
        attempts += [js.purge_stream(stream), js.delete_stream(stream)]
        update = json.dumps({"name": stream, "subjects": ["attacker.>"]}).encode()
        attempts.append(nc.request(f"$JS.API.STREAM.UPDATE.{stream}", update, REFUSAL_SECONDS))
    for stream, entries in victims.items():
        for subject, sequence, _ in entries:
            delete = json.dumps({"seq": sequence}).encode()
            purge = json.dumps({"filter": subject}).encode()
            attempts += [
                nc.request(f"$JS.API.STREAM.MSG.DELETE.{stream}", delete, REFUSAL_SECONDS),
                nc.request(f"$JS.API.STREAM.PURGE.{stream}", purge, REFUSAL_SECONDS),
                js.publish(subject, b"overwritten", timeout=REFUSAL_SECONDS),
                js.publish(subject, b"", headers={"KV-Operation": "DEL"}, timeout=REFUSAL_SECONDS),
                js.publish(
                    subject,
                    b"",
                    headers={"KV-Operation": "PURGE", "Nats-Rollup": "sub"},
                    timeout=REFUSAL_SECONDS,
                ),
            ]
    return attempts


async def _not_refused(attempts: list[Awaitable[Any]]) -> list[Any]:
    """The attempts that did not fail (a timeout, an exception or an answer
    with a JSON ``error`` is a failure). A plain message the blob stream
    stored beside an object is not counted: readers take an object's first
    meta message and its first chunks, so what comes after is never read
    (the operator's check below shows it changed nothing)."""
    results = await asyncio.gather(*attempts, return_exceptions=True)
    succeeded = []
    for result in results:
        if isinstance(result, BaseException):
            continue
        data = getattr(result, "data", None)
        if data is not None and b'"error"' in data:
            continue
        if getattr(result, "stream", "") == "OBJ_QUIRE_BLOBS":
            continue
        succeeded.append(result)
    return succeeded


async def test_no_service_login_can_delete_purge_or_overwrite_anything(
    running: Running, tmp_path: Path
) -> None:
    names = await submit_text_jobs(running.client, tmp_path / "pdfs", 1)
    (job,) = (await wait_all(running.client, names, timeout=180)).values()
    assert state_name(job.state) == "COMPLETED"

    operator = await _login(running, OPERATOR)
    try:
        ojs = operator.jetstream()
        victims = await _victims(ojs, job.name)
        assert all(victims.values()), victims
        consumers = {
            stream: sorted(c.name for c in await ojs.consumers_info(stream))
            for stream in TOPOLOGY_STREAMS
        }
        for service in SERVICES:
            nc = await _login(running, service)
            try:
                js = nc.jetstream(timeout=REFUSAL_SECONDS)
                attempts = _attacks(js, nc, victims)
                attempts += [
                    js.delete_consumer(stream, name)
                    for stream, names in consumers.items()
                    for name in names
                ]
                succeeded = await _not_refused(attempts)
                assert succeeded == [], (service, succeeded)
            finally:
                await nc.close()

        # Every stream, consumer and entry is as it was.
        for stream in TOPOLOGY_STREAMS:
            info = await ojs.stream_info(stream)
            assert info.config.subjects and "attacker.>" not in info.config.subjects
            names = sorted(c.name for c in await ojs.consumers_info(stream))
            assert set(consumers[stream]) <= set(names), stream
        for stream, entries in victims.items():
            for subject, sequence, data in entries:
                first = await ojs.get_msg(stream, seq=1, subject=subject, next=True)
                assert (first.seq, first.data) == (sequence, data), subject
    finally:
        await operator.close()
    output = tmp_path / "artifact.pdf"
    assert await running.client.download(job.name, output) == job.output_digest


async def test_only_the_keeper_deletes_blobs_and_shreds_data_keys(
    running: Running, tmp_path: Path
) -> None:
    async with TenantAdminClient(
        running.info.endpoints["admission"], running.info.operator_token()
    ) as admin:
        tenant = await admin.create_tenant(f"shred-{uuid.uuid4().hex[:8]}")
    async with AdmissionClient(running.info.endpoints["admission"], tenant.secret) as client:
        uploaded = await client.upload(write_text_pdf(tmp_path / "s.pdf", ["to be shredded"]))
        env = running.stack.service_env()
        settings = ServiceSettings.from_env("validator", env)
        kek = tool_kek_settings(running.data_dir, env)
        as_service = open_blob_store(settings, kek=kek)
        as_keeper = open_blob_store(
            ServiceSettings.from_env("audit", keeper_env(running.data_dir, env)), kek=kek
        )
        try:
            keys = [k for k in as_service.list_keys("sources/") if uploaded.sha256 in k]
            assert len(keys) == 1
            tenant_id = keys[0].split("/")[1]
            # A service login's delete and shred are refused (an error, or no
            # answer at all, both tried at once); nothing changes.
            refusals = await asyncio.gather(
                asyncio.to_thread(as_service.delete, keys[0]),
                asyncio.to_thread(as_service.keys.shred, tenant_id),
                return_exceptions=True,
            )
            assert all(isinstance(r, Exception) for r in refusals), refusals
            assert as_service.exists(keys[0])
            assert not as_service.keys.is_shredded(tenant_id)

            # The keeper's delete and shred take effect.
            await asyncio.to_thread(as_keeper.delete, keys[0])
            assert not as_service.exists(keys[0])
            assert await asyncio.to_thread(as_keeper.keys.shred, tenant_id) == 1
            assert as_service.keys.is_shredded(tenant_id)
            assert as_service.keys.ring.versions(tenant_id) == []
        finally:
            as_service.close()
            as_keeper.close()
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.submit([PacketItem("s", uploaded.sha256)])
        assert reason_of(refused.value) == "TENANT_SHREDDED"
    assert KEEPER not in SERVICES
