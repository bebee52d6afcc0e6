"""End to end on the real embedded stack: nats-server with JetStream and the
five services as separate processes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import uuid
from pathlib import Path

import grpc
import pypdf
import pytest

from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.cli.args import bearer_metadata
from quire.cli.verify import known_certificates
from quire.client import AdmissionClient, PacketItem
from quire.grpcstatus import reason_of
from quire.jobs import HISTORY_BEFORE_COMPLETION, state_name
from quire.pdfsignature import verify_signed_pdf
from quire.stack.supervisor import StackInfo
from quire.testing.pdfs import write_text_pdf

pytestmark = pytest.mark.stack


async def _ledger(stack, job: str) -> list[audit_service_pb2.LedgerEntry]:  # type: ignore[no-untyped-def]
    info = StackInfo.read(stack.data_dir)
    entries: list[audit_service_pb2.LedgerEntry] = []
    token = ""
    operator = bearer_metadata(info.operator_token())
    async with grpc.aio.insecure_channel(info.endpoints["audit"]) as channel:
        stub = audit_service_pb2_grpc.AuditServiceStub(channel)
        while True:
            page = await stub.ListJobEvents(
                audit_service_pb2.ListJobEventsRequest(job=job, page_size=3, page_token=token),
                metadata=operator,
            )
            entries.extend(page.entries)
            token = page.next_page_token
            if not token:
                return entries


async def _upload_all(client: AdmissionClient, paths: list[Path]) -> dict[Path, str]:
    digests = {}
    for path in paths:
        digests[path] = (await client.upload(path)).sha256
    return digests


async def test_packet_is_signed_in_manifest_order_with_its_whole_history(
    stack,
    client: AdmissionClient,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    documents = {
        "lease": write_text_pdf(tmp_path / "lease.pdf", ["lease page 1", "lease page 2"]),
        "addendum": write_text_pdf(tmp_path / "addendum.pdf", ["addendum page 1"]),
        "schedule": write_text_pdf(
            tmp_path / "schedule.pdf", ["schedule page 1", "schedule page 2"]
        ),
    }
    manifest_order = ["lease", "addendum", "schedule"]
    upload_order = list(documents)
    random.Random(7).shuffle(upload_order)
    upload_order.reverse()
    digests = await _upload_all(client, [documents[name] for name in upload_order])

    job = await client.submit(
        [PacketItem(name, digests[documents[name]]) for name in manifest_order]
    )
    job = await client.wait(job.name, timeout=90)
    assert state_name(job.state) == "COMPLETED", job.reason_code

    output = tmp_path / "signed.pdf"
    announced = await client.download(job.name, output)
    assert announced == job.output_digest == hashlib.sha256(output.read_bytes()).hexdigest()
    pages = [page.extract_text().strip() for page in pypdf.PdfReader(output).pages]
    assert pages == [
        "lease page 1",
        "lease page 2",
        "addendum page 1",
        "schedule page 1",
        "schedule page 2",
    ]

    info = StackInfo.read(stack.data_dir)
    certificates = await known_certificates(
        info.endpoints["signer"], metadata=bearer_metadata(info.operator_token())
    )
    report = await asyncio.to_thread(verify_signed_pdf, str(output), certificates)
    assert report.ok, report

    entries = await _ledger(stack, job.name)
    states = [state_name(entry.event.to_state) for entry in entries]
    assert set(states) == {*HISTORY_BEFORE_COMPLETION, "COMPLETED"}
    assert len(states) == len(set(states)), "each transition is recorded once"
    source_digests = [digests[documents[name]] for name in manifest_order]
    for entry in entries:
        assert entry.event.manifest_digest == job.manifest_digest
        assert list(entry.event.source_digests) == source_digests
    by_state = {state_name(e.event.to_state): e.event for e in entries}
    assert by_state["COMMITTING"].output_digest == job.output_digest
    assert by_state["COMPLETED"].output_digest == job.output_digest
    assert by_state["COMMITTING"].key_version == "v1"
    assert by_state["COMMITTING"].certificate_sha256 == report.certificate_sha256
    assert "Quire packet signer v1" in by_state["COMMITTING"].signer_identity
    assert by_state["COMPLETED"].signature_level == "B-B"


async def _assert_rejected(
    stack,  # type: ignore[no-untyped-def]
    client: AdmissionClient,
    tmp_path: Path,
    bad: Path,
    reason: str,
) -> None:
    good = write_text_pdf(tmp_path / "good.pdf", [f"good {uuid.uuid4().hex}"])
    digests = await _upload_all(client, [good, bad])
    job = await client.submit([PacketItem("good", digests[good]), PacketItem("bad", digests[bad])])
    job = await client.wait(job.name, timeout=60)
    assert (state_name(job.state), job.reason_code) == ("REJECTED", reason)

    fetched = await client.get_job(job.name)
    assert (state_name(fetched.state), fetched.reason_code) == ("REJECTED", reason)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.download(job.name, tmp_path / "never.pdf")
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason_of(refused.value) == "JOB_NOT_COMPLETED"
    states = [state_name(e.event.to_state) for e in await _ledger(stack, job.name)]
    assert states[-1] == "REJECTED"
    assert "ASSEMBLING" not in states


async def test_an_encrypted_pdf_ends_rejected(
    stack,  # type: ignore[no-untyped-def]
    client: AdmissionClient,
    tmp_path: Path,
    corpus: Path,
) -> None:
    encrypted = corpus / "pypdf" / "resources" / "encryption" / "r4-aes-user-password.pdf"
    await _assert_rejected(stack, client, tmp_path, encrypted, "ENCRYPTED_PDF")


async def test_a_truncated_pdf_ends_rejected(
    stack,  # type: ignore[no-untyped-def]
    client: AdmissionClient,
    tmp_path: Path,
) -> None:
    whole = write_text_pdf(tmp_path / "whole.pdf", [f"whole {uuid.uuid4().hex}"] * 3).read_bytes()
    truncated = tmp_path / "truncated.pdf"
    truncated.write_bytes(whole[: len(whole) * 2 // 3])
    await _assert_rejected(stack, client, tmp_path, truncated, "MALFORMED_PDF")


async def test_same_request_twice_returns_the_same_job(
    client: AdmissionClient, tmp_path: Path
) -> None:
    path = write_text_pdf(tmp_path / "doc.pdf", [f"idempotent {uuid.uuid4().hex}"])
    digest = (await client.upload(path)).sha256
    key = uuid.uuid4().hex
    first, second = await asyncio.gather(
        client.submit([PacketItem("doc", digest)], request_id=key),
        client.submit([PacketItem("doc", digest)], request_id=key),
    )
    third = await client.submit([PacketItem("doc", digest)], request_id=key)
    assert first.name == second.name == third.name
    await client.wait(first.name, timeout=60)


async def test_same_key_different_manifest_is_refused(
    client: AdmissionClient, tmp_path: Path
) -> None:
    one = write_text_pdf(tmp_path / "one.pdf", [f"one {uuid.uuid4().hex}"])
    two = write_text_pdf(tmp_path / "two.pdf", [f"two {uuid.uuid4().hex}"])
    digests = await _upload_all(client, [one, two])
    key = uuid.uuid4().hex
    job = await client.submit([PacketItem("one", digests[one])], request_id=key)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.submit([PacketItem("two", digests[two])], request_id=key)
    assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert reason_of(refused.value) == "IDEMPOTENCY_KEY_REUSED"
    await client.wait(job.name, timeout=60)


async def test_a_bad_token_is_unauthenticated(stack) -> None:  # type: ignore[no-untyped-def]
    info = StackInfo.read(stack.data_dir)
    async with AdmissionClient(info.endpoints["admission"], "qt_not-a-token") as stranger:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stranger.get_job("jobs/0123456789abcdef")
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert reason_of(refused.value) == "UNAUTHENTICATED"


async def test_an_upload_whose_bytes_do_not_match_is_refused_and_leaves_nothing(
    stack,
    client: AdmissionClient,  # type: ignore[no-untyped-def]
) -> None:
    from quire.admission.v1 import admission_service_pb2 as pb

    data = b"%PDF-1.7\n" + uuid.uuid4().hex.encode()
    declared = hashlib.sha256(b"something else").hexdigest()

    async def requests():  # type: ignore[no-untyped-def]
        yield pb.UploadSourceRequest(
            header=pb.SourceHeader(
                sha256=declared, size_bytes=len(data), content_type="application/pdf"
            )
        )
        yield pb.UploadSourceRequest(chunk=data)

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.upload_stream(requests())
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(refused.value) == "DIGEST_MISMATCH"
    blobs = Path(stack.data_dir) / "blobs"
    assert not list(blobs.rglob(declared))
    assert not list(blobs.rglob(hashlib.sha256(data).hexdigest()))
    assert list((blobs / ".tmp").iterdir()) == []


async def test_a_manifest_naming_unknown_sources_lists_every_violation(
    client: AdmissionClient,
) -> None:
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.submit(
            [PacketItem("a", "1" * 64), PacketItem("a", "2" * 64)], positions=[0, 2]
        )
    assert reason_of(refused.value) == "INVALID_MANIFEST"
    status = rpc_status.from_call(refused.value)
    bad = error_details_pb2.BadRequest()
    next(d for d in status.details if d.Is(bad.DESCRIPTOR)).Unpack(bad)
    reasons = sorted(v.reason for v in bad.field_violations)
    assert reasons == sorted(
        [
            "POSITIONS_NOT_CONTIGUOUS",
            "DUPLICATE_DOCUMENT_ID",
            "DUPLICATE_DOCUMENT_ID",
            "UNKNOWN_SOURCE",
            "UNKNOWN_SOURCE",
        ]
    )


async def test_one_job_is_one_trace_across_all_five_services(
    stack,
    client: AdmissionClient,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    path = write_text_pdf(tmp_path / "traced.pdf", [f"traced {uuid.uuid4().hex}"])
    digest = (await client.upload(path)).sha256
    job = await client.submit([PacketItem("traced", digest)])
    job = await client.wait(job.name, timeout=60)
    assert state_name(job.state) == "COMPLETED"
    ident = job.name.removeprefix("jobs/")
    trace_file = Path(stack.data_dir) / "traces.jsonl"
    services: dict[str, set[str]] = {}
    for _ in range(50):  # spans are exported in batches every 200 ms
        spans = [json.loads(line) for line in trace_file.read_text().splitlines()]
        # A later call about the job (its watch) names it in the caller's trace.
        job_spans = [
            s
            for s in spans
            if s["attributes"].get("quire.job") == ident
            and not (s["kind"] == "SERVER" and not s["name"].endswith("/SubmitJob"))
        ]
        services = {}
        for span in job_spans:
            services.setdefault(span["service"], set()).add(span["trace_id"])
        traced = set().union(*services.values())
        submitted = any(s["service"] == "admission" and s["trace_id"] in traced for s in spans)
        # Each process exports its own batches: wait for admission's as well.
        if set(services) >= {"validator", "assembler", "signer", "audit"} and submitted:
            break
        await asyncio.sleep(0.2)
    trace_ids = set().union(*services.values())
    assert set(services) >= {"validator", "assembler", "signer", "audit"}
    assert len(trace_ids) == 1, "every stage's span belongs to the submitting call's trace"
    submit_spans = [s for s in spans if s["service"] == "admission" and s["trace_id"] in trace_ids]
    assert submit_spans, "admission's SubmitJob span starts the trace"


@pytest.mark.parametrize(("page_size", "page_token"), [(-1, ""), (10, "not-a-token"), (10, "-5")])
async def test_ledger_paging_refuses_what_is_not_a_page(
    stack,  # type: ignore[no-untyped-def]
    page_size: int,
    page_token: str,
) -> None:
    info = StackInfo.read(stack.data_dir)
    async with grpc.aio.insecure_channel(info.endpoints["audit"]) as channel:
        stub = audit_service_pb2_grpc.AuditServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.ListJobEvents(
                audit_service_pb2.ListJobEventsRequest(
                    job="jobs/0123456789abcdef", page_size=page_size, page_token=page_token
                ),
                metadata=bearer_metadata(info.operator_token()),
            )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(refused.value) == "INVALID_PAGE"
