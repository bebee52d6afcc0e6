"""Small packets in one call: sources carried inside SubmitJob pass the same
gate as uploads (digest, size, type, ceiling, quota), are refused with the
same reasons and keep nothing when refused, and make the same job."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from quire.admission.v1 import admission_service_pb2 as pb
from quire.cli.packets import PacketFile, send_packet
from quire.client import AdmissionClient, PacketItem, inline_source
from quire.grpcstatus import reason_of
from quire.jobs import state_name
from quire.testing.pdfs import write_text_pdf

pytestmark = pytest.mark.stack


def _violations(error: grpc.aio.AioRpcError) -> list[str]:
    for detail in rpc_status.from_call(error).details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            return [violation.field for violation in bad.field_violations]
    raise AssertionError("no BadRequest in the status")


async def _refused(call, reason: str) -> grpc.aio.AioRpcError:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    assert reason_of(refused.value) == reason
    return refused.value


def _kept(stack, digest: str) -> bool:  # type: ignore[no-untyped-def]
    return bool(list((Path(stack.data_dir) / "blobs").rglob(f"*{digest}*")))


async def _no_job(client: AdmissionClient) -> None:
    assert list((await client.list_jobs()).jobs) == [], "no job was made"


async def test_a_packet_sent_inline_completes_in_one_call(tenants, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("inline")
    data = [
        write_text_pdf(tmp_path / f"{n}.pdf", [f"inline {n} {uuid.uuid4().hex}"]).read_bytes()
        for n in range(3)
    ]
    sources = [inline_source(d) for d in data]
    job = await client.submit(
        [PacketItem(f"doc{n}", s.header.sha256) for n, s in enumerate(sources)], inline=sources
    )
    done = await client.wait(job.name, timeout=60)
    assert state_name(done.state) == "COMPLETED"
    # What was kept inline is a source like any upload: a later manifest names it.
    again = await client.wait(
        (await client.submit([PacketItem("x", sources[1].header.sha256)])).name
    )
    assert state_name(again.state) == "COMPLETED"


async def test_an_inline_source_with_a_wrong_digest_is_refused_like_an_upload(
    stack, tenants
) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("inline-digest")
    data = b"%PDF-1.7\n" + uuid.uuid4().bytes
    declared = hashlib.sha256(b"other" + data).hexdigest()
    source = pb.InlineSource(
        header=pb.SourceHeader(
            sha256=declared, size_bytes=len(data), content_type="application/pdf"
        ),
        content=data,
    )
    error = await _refused(
        client.submit([PacketItem("doc", declared)], inline=[source]), "DIGEST_MISMATCH"
    )
    assert _violations(error) == ["inline_sources[0]"], "the refusal names the inline source"
    assert not _kept(stack, declared) and not _kept(stack, hashlib.sha256(data).hexdigest())
    await _no_job(client)


async def test_inline_sources_meet_the_upload_gates_limits(stack, tenants) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("inline-limits", max_upload_bytes=1000)
    big = b"%PDF-1.7\n" + b"x" * 1500
    error = await _refused(
        client.submit(
            [PacketItem("d", hashlib.sha256(big).hexdigest())], inline=[inline_source(big)]
        ),
        "SIZE_LIMIT_EXCEEDED",
    )
    assert _violations(error) == ["inline_sources[0].header.size_bytes"]
    text = b"plain " + uuid.uuid4().bytes
    wrong_type = inline_source(text, "application/pdf")
    await _refused(
        client.submit([PacketItem("d", wrong_type.header.sha256)], inline=[wrong_type]),
        "TYPE_MISMATCH",
    )
    short = inline_source(b"%PDF-1.7\n" + uuid.uuid4().bytes)
    short.header.size_bytes += 5
    await _refused(
        client.submit([PacketItem("d", short.header.sha256)], inline=[short]),
        "SIZE_BELOW_DECLARATION",
    )
    for refused in (big, text, short.content):
        assert not _kept(stack, hashlib.sha256(refused).hexdigest())
    await _no_job(client)


async def test_a_later_bad_inline_source_refuses_the_job(stack, tenants, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("inline-second")
    good = inline_source(write_text_pdf(tmp_path / "g.pdf", [uuid.uuid4().hex]).read_bytes())
    bad = inline_source(b"%PDF-1.7\n" + uuid.uuid4().bytes)
    bad.content = bad.content + b"!"
    items = [PacketItem("a", good.header.sha256), PacketItem("b", bad.header.sha256)]
    error = await _refused(client.submit(items, inline=[good, bad]), "SIZE_EXCEEDS_DECLARATION")
    assert _violations(error)[0].startswith("inline_sources[1]")
    assert not _kept(stack, bad.header.sha256)
    await _no_job(client)


async def test_inline_sources_over_the_limit_or_unnamed_are_refused_before_anything_is_kept(
    stack, tenants
) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("inline-cheap")
    parts = [inline_source(b"%PDF-1.7\n" + bytes([n]) * (1500 * 1024)) for n in range(3)]
    items = [PacketItem(f"d{n}", p.header.sha256) for n, p in enumerate(parts)]
    error = await _refused(client.submit(items, inline=parts), "INLINE_SOURCES_TOO_LARGE")
    assert _violations(error) == ["inline_sources"]
    stray = inline_source(b"%PDF-1.7\n" + uuid.uuid4().bytes)
    error = await _refused(
        client.submit(items[:1], inline=[parts[0], stray]), "INLINE_SOURCE_UNUSED"
    )
    assert _violations(error) == ["inline_sources[1].header.sha256"]
    for part in [*parts, stray]:
        assert not _kept(stack, part.header.sha256)
    await _no_job(client)


async def test_a_repeated_inline_submission_makes_one_job(tenants, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("inline-again")
    source = inline_source(write_text_pdf(tmp_path / "a.pdf", [uuid.uuid4().hex]).read_bytes())
    key = uuid.uuid4().hex
    first = await client.submit(
        [PacketItem("a", source.header.sha256)], inline=[source], request_id=key
    )
    second = await client.submit(
        [PacketItem("a", source.header.sha256)], inline=[source], request_id=key
    )
    assert first.name == second.name
    assert [job.name for job in (await client.list_jobs()).jobs] == [first.name]


async def test_the_cli_sends_a_small_packet_inline(tenants, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("inline-cli")
    files = [
        PacketFile(f"d{n}", write_text_pdf(tmp_path / f"{n}.pdf", [uuid.uuid4().hex]), n)
        for n in range(2)
    ]
    uploads = 0
    real_upload = client.upload

    async def counting_upload(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal uploads
        uploads += 1
        return await real_upload(*args, **kwargs)

    client.upload = counting_upload  # type: ignore[method-assign]
    job = await send_packet(client, files)
    assert uploads == 0, "a small packet needs no upload call"
    assert state_name((await client.wait(job.name, timeout=60)).state) == "COMPLETED"


async def test_inline_sources_together_must_fit_the_storage_quota(stack, tenants) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("inline-quota", storage_quota_bytes=3000)
    parts = [inline_source(b"%PDF-1.7\n" + bytes([65 + n]) * 1200) for n in range(3)]
    items = [PacketItem(f"d{n}", p.header.sha256) for n, p in enumerate(parts)]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.submit(items, inline=parts)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert reason_of(refused.value) == "STORAGE_QUOTA_EXCEEDED", "each fits; together they do not"
    for part in parts:
        assert not _kept(stack, part.header.sha256)
    await _no_job(client)


async def test_the_same_inline_source_twice_is_refused(tenants) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("inline-twice")
    source = inline_source(b"%PDF-1.7\n" + uuid.uuid4().bytes)
    error = await _refused(
        client.submit([PacketItem("a", source.header.sha256)], inline=[source, source]),
        "INVALID_MANIFEST",
    )
    assert _violations(error) == ["inline_sources[1].header.sha256"]
    await _no_job(client)


async def test_a_malformed_request_keeps_none_of_its_inline_sources(stack, tenants) -> None:  # type: ignore[no-untyped-def]
    client = await tenants("inline-malformed")
    source = inline_source(b"%PDF-1.7\n" + uuid.uuid4().bytes)
    await _refused(
        client.submit(
            [PacketItem("a", source.header.sha256)], inline=[source], request_id="batch:1:2"
        ),
        "REQUEST_ID_RESERVED",
    )
    assert not _kept(stack, source.header.sha256), "checked before anything was kept"
    await _no_job(client)


async def test_inline_sources_of_a_refused_manifest_stay_the_tenants(
    stack, tenants, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Refused before the job's transaction (here: the manifest names a source
    never uploaded), the packet's stored inline sources are recorded all the
    same: a later manifest names them without sending them again."""
    client = await tenants("inline-refused")
    good = inline_source(write_text_pdf(tmp_path / "g.pdf", [uuid.uuid4().hex]).read_bytes())
    missing = hashlib.sha256(uuid.uuid4().bytes).hexdigest()
    items = [PacketItem("a", good.header.sha256), PacketItem("b", missing)]
    await _refused(client.submit(items, inline=[good]), "INVALID_MANIFEST")
    await _no_job(client)
    later = await client.wait(
        (await client.submit([PacketItem("a", good.header.sha256)])).name, timeout=60
    )
    assert state_name(later.state) == "COMPLETED"
