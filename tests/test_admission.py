"""The front door on the real stack: every refusal has its status, its reason
code, and leaves nothing behind; tenants stay inside their own walls."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from quire.admission.v1 import admission_service_pb2 as pb
from quire.client import AdmissionClient, PacketItem, inline_source
from quire.grpcstatus import reason_of
from quire.jobs import state_name
from quire.stack.supervisor import StackInfo
from quire.testing.pdfs import write_text_pdf

pytestmark = pytest.mark.stack

PDF = "application/pdf"


def _detail(error: grpc.aio.AioRpcError, kind):  # type: ignore[no-untyped-def]
    status = rpc_status.from_call(error)
    message = kind()
    for detail in status.details:
        if detail.Is(kind.DESCRIPTOR):
            detail.Unpack(message)
            return message
    raise AssertionError(f"no {kind.DESCRIPTOR.name} in the status")


def _nothing_stored(stack, *digests: str) -> None:  # type: ignore[no-untyped-def]
    blobs = Path(stack.data_dir) / "blobs"
    for digest in digests:
        assert not list(blobs.rglob(f"*{digest}*")), "no blob was kept"
    assert list((blobs / ".tmp").iterdir()) == [], "no temporary file was left"


async def _refused(call, code: grpc.StatusCode, reason: str) -> grpc.aio.AioRpcError:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    assert refused.value.code() == code, refused.value.details()
    assert reason_of(refused.value) == reason
    return refused.value


async def _not_a_source(client: AdmissionClient, digest: str) -> None:
    """Proof that no source row exists: a manifest naming the digest is refused."""
    error = await _refused(
        client.submit([PacketItem("doc", digest)]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_MANIFEST",
    )
    bad = _detail(error, error_details_pb2.BadRequest)
    assert [v.reason for v in bad.field_violations] == ["UNKNOWN_SOURCE"]


def _stream(header: pb.SourceHeader, *chunks: bytes):  # type: ignore[no-untyped-def]
    async def requests():  # type: ignore[no-untyped-def]
        yield pb.UploadSourceRequest(header=header)
        for chunk in chunks:
            yield pb.UploadSourceRequest(chunk=chunk)

    return requests()


# -- credentials -------------------------------------------------------------


async def test_a_revoked_token_is_refused_and_its_rotated_successor_works(stack, tenants) -> None:  # type: ignore[no-untyped-def]
    first = await tenants("rotating")
    second_token = await tenants.admin.create_token(first.tenant)
    address = StackInfo.read(stack.data_dir).endpoints["admission"]
    async with AdmissionClient(address, second_token.secret) as second:
        assert (await first.list_jobs()).jobs == (await second.list_jobs()).jobs
        tenant = next(t for t in await tenants.admin.list_tenants() if t.name == first.tenant)
        original = next(t.name for t in tenant.tokens if t.name != second_token.token.name)
        await tenants.admin.revoke_token(original)
        await _refused(first.list_jobs(), grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
        await second.list_jobs()


async def test_admin_calls_need_the_operator_token(stack, tenants) -> None:  # type: ignore[no-untyped-def]
    from quire.client import TenantAdminClient

    tenant = await tenants("not-an-operator")
    info = StackInfo.read(stack.data_dir)
    async with TenantAdminClient(info.endpoints["admission"], info.token()) as impostor:
        await _refused(impostor.list_tenants(), grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    assert tenant is not None


async def test_another_tenants_job_and_sources_do_not_exist_for_you(
    tenants,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    owner = await tenants("owner")
    stranger = await tenants("stranger")
    path = write_text_pdf(tmp_path / "mine.pdf", [f"mine {uuid.uuid4().hex}"])
    digest = (await owner.upload(path)).sha256
    job = await owner.submit([PacketItem("doc", digest)])
    job = await owner.wait(job.name, timeout=60)
    assert state_name(job.state) == "COMPLETED"

    never = "jobs/" + "ab" * 14
    for name in (job.name, never):
        await _refused(stranger.get_job(name), grpc.StatusCode.NOT_FOUND, "NOT_FOUND")
        await _refused(stranger.cancel(name), grpc.StatusCode.NOT_FOUND, "NOT_FOUND")
        await _refused(
            stranger.download(name, tmp_path / "x.pdf"), grpc.StatusCode.NOT_FOUND, "NOT_FOUND"
        )
    await _not_a_source(stranger, digest)
    assert (await stranger.list_jobs()).jobs == []


# -- the upload gate ---------------------------------------------------------


async def test_more_bytes_than_declared_are_refused_at_the_first_extra_byte(stack, tenants) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("oversend")
    data = b"%PDF-1.7\n" + uuid.uuid4().bytes
    header = pb.SourceHeader(
        sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data) - 1, content_type=PDF
    )
    await _refused(
        client.upload_stream(_stream(header, data[:-1], data[-1:])),
        grpc.StatusCode.INVALID_ARGUMENT,
        "SIZE_EXCEEDS_DECLARATION",
    )
    _nothing_stored(stack, header.sha256)
    await _not_a_source(client, header.sha256)


async def test_an_upload_over_the_tenants_ceiling_is_refused(stack, tenants) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("small", max_upload_bytes=1000)
    data = b"%PDF-1.7\n" + b"x" * 1500
    header = pb.SourceHeader(
        sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data), content_type=PDF
    )
    await _refused(
        client.upload_stream(_stream(header, data)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "SIZE_LIMIT_EXCEEDED",
    )
    _nothing_stored(stack, header.sha256)
    await _not_a_source(client, header.sha256)


async def test_a_type_outside_the_allow_list_is_refused(stack, tenants) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("types")
    data = b"plain text " + uuid.uuid4().bytes
    header = pb.SourceHeader(
        sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data), content_type="text/plain"
    )
    await _refused(
        client.upload_stream(_stream(header, data)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "CONTENT_TYPE_NOT_ALLOWED",
    )
    _nothing_stored(stack, header.sha256)
    await _not_a_source(client, header.sha256)


async def test_json_is_allowed_through_the_gate(tenants) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("json")
    data = b'{"lines": [{"amount": "1.00"}], "nonce": "' + uuid.uuid4().hex.encode() + b'"}'
    header = pb.SourceHeader(
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        content_type="application/json",
    )
    source = await client.upload_stream(_stream(header, data))
    assert source.content_type == "application/json"
    job = await client.wait((await client.submit([PacketItem("lines", source.sha256)])).name)
    assert state_name(job.state) == "COMPLETED", "a structured source is rendered and signed"


async def test_bytes_that_do_not_match_the_digest_are_refused(stack, tenants) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("digest")
    data = b"%PDF-1.7\n" + uuid.uuid4().bytes
    declared = hashlib.sha256(b"other" + data).hexdigest()
    header = pb.SourceHeader(sha256=declared, size_bytes=len(data), content_type=PDF)
    await _refused(
        client.upload_stream(_stream(header, data)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "DIGEST_MISMATCH",
    )
    _nothing_stored(stack, declared, hashlib.sha256(data).hexdigest())
    await _not_a_source(client, declared)


async def test_an_interrupted_upload_leaves_nothing(stack, tenants) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("interrupted")
    data = b"%PDF-1.7\n" + b"y" * (2 * 1024 * 1024)
    header = pb.SourceHeader(
        sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data), content_type=PDF
    )
    half_sent = asyncio.Event()

    async def requests():  # type: ignore[no-untyped-def]
        yield pb.UploadSourceRequest(header=header)
        yield pb.UploadSourceRequest(chunk=data[: 1024 * 1024])
        half_sent.set()
        await asyncio.sleep(60)  # the client goes away before sending the rest

    call = asyncio.create_task(client.upload_stream(requests()))
    await half_sent.wait()
    await asyncio.sleep(0.3)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    tmp = Path(stack.data_dir) / "blobs" / ".tmp"
    for _ in range(50):
        if not list(tmp.iterdir()):
            break
        await asyncio.sleep(0.1)
    _nothing_stored(stack, header.sha256)
    await _not_a_source(client, header.sha256)


async def test_uploading_the_same_bytes_again_stores_them_once(
    stack, tenants, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("again")
    path = write_text_pdf(tmp_path / "again.pdf", [f"again {uuid.uuid4().hex}"])
    first = await client.upload(path)
    blob = next((Path(stack.data_dir) / "blobs").rglob(first.sha256))
    written = blob.stat().st_mtime_ns
    second = await client.upload(path)
    assert second == first
    assert blob.stat().st_mtime_ns == written, "the second upload wrote nothing"
    assert len(list((Path(stack.data_dir) / "blobs").rglob(first.sha256))) == 1


# -- idempotency and load ----------------------------------------------------


async def test_fifty_simultaneous_identical_submissions_make_one_job(
    tenants, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("burst")
    path = write_text_pdf(tmp_path / "burst.pdf", [f"burst {uuid.uuid4().hex}"])
    digest = (await client.upload(path)).sha256
    key = uuid.uuid4().hex
    jobs = await asyncio.gather(
        *(client.submit([PacketItem("doc", digest)], request_id=key) for _ in range(50))
    )
    assert len({job.name for job in jobs}) == 1
    listed = await client.list_jobs()
    assert [job.name for job in listed.jobs] == [jobs[0].name]
    await client.wait(jobs[0].name, timeout=60)


async def test_a_tenant_over_its_quota_is_told_to_retry_and_nothing_is_kept(
    stack,
    tenants,
    validate_queue,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    client = await tenants("quota", max_outstanding_jobs=2)
    digests = []
    for index in range(3):
        path = write_text_pdf(tmp_path / f"q{index}.pdf", [f"quota {index} {uuid.uuid4().hex}"])
        digests.append((await client.upload(path)).sha256)
    await validate_queue.pause()
    accepted = [await client.submit([PacketItem("doc", d)]) for d in digests[:2]]
    error = await _refused(
        client.submit([PacketItem("doc", digests[2])]),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "TENANT_QUOTA_EXCEEDED",
    )
    assert _detail(error, error_details_pb2.RetryInfo).retry_delay.seconds > 0
    quota = _detail(error, error_details_pb2.QuotaFailure)
    assert quota.violations[0].subject == "tenant:outstanding_jobs"
    assert len((await client.list_jobs()).jobs) == 2, "the refused job was not kept"

    await validate_queue.resume()
    for job in accepted:
        assert state_name((await client.wait(job.name, timeout=60)).state) == "COMPLETED"
    third = await client.submit([PacketItem("doc", digests[2])])
    assert state_name((await client.wait(third.name, timeout=60)).state) == "COMPLETED"


async def test_submissions_sharing_a_commit_are_each_decided_on_their_own(  # type: ignore[no-untyped-def]
    stack, tenants, validate_queue, tmp_path: Path
) -> None:
    """Sent at once, submissions go to admission's intake group commit
    together; those over the quota (refused inside the group's transaction)
    fail alone: the others are accepted, every inline source is kept, and
    every accepted job completes."""
    quota = 3
    client = await tenants("grouped", max_outstanding_jobs=quota)
    sources = [
        inline_source(
            write_text_pdf(tmp_path / f"g{i}.pdf", [f"grouped {i} {uuid.uuid4().hex}"]).read_bytes()
        )
        for i in range(quota + 3)
    ]
    await validate_queue.pause()
    try:
        outcomes = await asyncio.gather(
            *(client.submit([PacketItem("doc", s.header.sha256)], inline=[s]) for s in sources),
            return_exceptions=True,
        )
    finally:
        await validate_queue.resume()
    accepted = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(accepted) == quota, outcomes
    assert all(
        isinstance(e, grpc.aio.AioRpcError)
        and e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        and reason_of(e) == "TENANT_QUOTA_EXCEEDED"
        for e in refused
    ), refused
    assert len((await client.list_jobs()).jobs) == quota
    for job in accepted:
        assert state_name((await client.wait(job.name, timeout=60)).state) == "COMPLETED"
    # Each refused job's inline source was kept like an upload: named alone, it runs.
    for source, outcome in zip(sources, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            again = await client.submit([PacketItem("doc", source.header.sha256)])
            assert state_name((await client.wait(again.name, timeout=60)).state) == "COMPLETED"


async def test_a_backlogged_queue_sheds_new_work(  # type: ignore[no-untyped-def]
    stack, tenants, validate_queue, tmp_path: Path
) -> None:
    client = await tenants("backlog")
    paths = [
        write_text_pdf(tmp_path / f"b{i}.pdf", [f"backlog {i} {uuid.uuid4().hex}"])
        for i in range(2)
    ]
    digests = [(await client.upload(p)).sha256 for p in paths]
    await validate_queue.pause()
    waiting = await client.submit([PacketItem("doc", digests[0])])
    await asyncio.sleep(2.6)  # the stack's budget is 2 s
    error = await _refused(
        client.submit([PacketItem("doc", digests[1])]),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "QUEUE_BACKLOG",
    )
    assert _detail(error, error_details_pb2.QuotaFailure).violations[0].subject == (
        "queue:validate.interactive"
    )
    assert _detail(error, error_details_pb2.RetryInfo).retry_delay.seconds > 0
    assert [job.name for job in (await client.list_jobs()).jobs] == [waiting.name]
    await validate_queue.resume()
    assert state_name((await client.wait(waiting.name, timeout=60)).state) == "COMPLETED"


# -- listing and cancelling --------------------------------------------------


async def test_jobs_are_listed_in_pages_and_filtered_by_state(tenants, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("lister")
    good = write_text_pdf(tmp_path / "good.pdf", [f"good {uuid.uuid4().hex}"])
    whole = write_text_pdf(tmp_path / "whole.pdf", ["whole"] * 3).read_bytes()
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(whole[: len(whole) // 2])
    good_digest = (await client.upload(good)).sha256
    bad_digest = (await client.upload(bad)).sha256
    names = []
    for index in range(5):
        digest = bad_digest if index == 2 else good_digest
        job = await client.submit([PacketItem("doc", digest)], request_id=f"r{index}")
        names.append(job.name)
    for name in names:
        await client.wait(name, timeout=60)

    seen, token = [], ""
    while True:
        page = await client.list_jobs(page_size=2, page_token=token)
        assert len(page.jobs) <= 2
        seen.extend(job.name for job in page.jobs)
        token = page.next_page_token
        if not token:
            break
    assert seen == list(reversed(names)), "newest first, each once"
    rejected = await client.list_jobs(state="REJECTED")
    assert [job.name for job in rejected.jobs] == [names[2]]
    assert rejected.jobs[0].reason_code == "MALFORMED_PDF"
    await _refused(
        client.list_jobs(page_token="garbage!"), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PAGE"
    )


async def test_a_job_not_yet_signing_can_be_cancelled(
    stack,
    tenants,
    validate_queue,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    client = await tenants("canceller")
    path = write_text_pdf(tmp_path / "c.pdf", [f"cancel me {uuid.uuid4().hex}"])
    digest = (await client.upload(path)).sha256
    await validate_queue.pause()
    job = await client.submit([PacketItem("doc", digest)])
    cancelled = await client.cancel(job.name)
    assert (state_name(cancelled.state), cancelled.reason_code) == (
        "CANCELLED",
        "CANCELLED_BY_CLIENT",
    )
    await validate_queue.resume()
    await asyncio.sleep(1.0)  # the validator now meets the cancelled job
    final = await client.wait(job.name, timeout=30)
    assert state_name(final.state) == "CANCELLED"
    again = await client.cancel(job.name)
    assert state_name(again.state) == "CANCELLED"


async def test_cancelling_a_completed_job_says_it_completed(tenants, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("late-cancel")
    path = write_text_pdf(tmp_path / "done.pdf", [f"done {uuid.uuid4().hex}"])
    digest = (await client.upload(path)).sha256
    job = await client.wait((await client.submit([PacketItem("doc", digest)])).name, timeout=60)
    assert state_name(job.state) == "COMPLETED"
    answer = await client.cancel(job.name)
    assert state_name(answer.state) == "COMPLETED"
    assert answer.output_digest == job.output_digest


async def test_a_bad_token_stores_nothing(stack) -> None:  # type: ignore[no-untyped-def]
    address = StackInfo.read(stack.data_dir).endpoints["admission"]
    data = b"%PDF-1.7\n" + uuid.uuid4().bytes
    header = pb.SourceHeader(
        sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data), content_type=PDF
    )
    async with AdmissionClient(address, "qt_0000_not-a-token") as stranger:
        await _refused(
            stranger.upload_stream(_stream(header, data)),
            grpc.StatusCode.UNAUTHENTICATED,
            "UNAUTHENTICATED",
        )
        await _refused(
            stranger.submit([PacketItem("doc", header.sha256)]),
            grpc.StatusCode.UNAUTHENTICATED,
            "UNAUTHENTICATED",
        )
    _nothing_stored(stack, header.sha256)


async def test_every_manifest_violation_is_listed_and_no_job_is_made(
    tenants, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("violations")
    known = (await client.upload(write_text_pdf(tmp_path / "k.pdf", [uuid.uuid4().hex]))).sha256
    request = pb.SubmitJobRequest(
        request_id="bad-manifest",
        manifest={
            "items": [
                {"position": 1, "document_id": "a", "sha256": known},
                {"position": 1, "document_id": "a", "sha256": "f" * 64},
                {"position": 4, "document_id": "", "sha256": "not-hex"},
            ],
            "ruleset": "unknown@1",
            "render_profile": "glossy",
        },
        priority="urgent",
    )
    error = await _refused(
        client.submit_request(request), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_MANIFEST"
    )
    reasons = sorted(
        v.reason for v in _detail(error, error_details_pb2.BadRequest).field_violations
    )
    assert reasons == sorted(
        [
            "DUPLICATE_POSITION",
            "POSITIONS_NOT_CONTIGUOUS",
            "DUPLICATE_DOCUMENT_ID",
            "DUPLICATE_DOCUMENT_ID",
            "UNKNOWN_SOURCE",
            "MISSING_DOCUMENT_ID",
            "BAD_DIGEST",
            "UNKNOWN_RULESET",
            "UNKNOWN_PROFILE",
            "UNKNOWN_PRIORITY",
        ]
    )
    assert (await client.list_jobs()).jobs == []


async def test_a_reused_key_is_refused_and_makes_no_second_job(tenants, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("reuse")
    one = (await client.upload(write_text_pdf(tmp_path / "1.pdf", [uuid.uuid4().hex]))).sha256
    two = (await client.upload(write_text_pdf(tmp_path / "2.pdf", [uuid.uuid4().hex]))).sha256
    job = await client.submit([PacketItem("doc", one)], request_id="same")
    await _refused(
        client.submit([PacketItem("doc", two)], request_id="same"),
        grpc.StatusCode.ALREADY_EXISTS,
        "IDEMPOTENCY_KEY_REUSED",
    )
    assert [j.name for j in (await client.list_jobs()).jobs] == [job.name]
    await client.wait(job.name, timeout=60)
