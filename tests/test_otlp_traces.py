"""Traces reach an OpenTelemetry backend by OTLP/gRPC, configured as users do
(``OTEL_EXPORTER_OTLP_ENDPOINT``): one job's spans from all five services
arrive under one trace id, linked parent to child, with start and end times,
kinds and statuses; queue waits are spans of their own; a rejected job's
trace shows which stage rejected it and the reason code, never a message."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.proto.trace.v1 import trace_pb2

from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.testing.hostile import javascript_on_open
from quire.testing.otlpreceiver import OtlpReceiver, ReceivedSpan
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import QUIRE, ROOT

pytestmark = pytest.mark.stack

SERVICES = {"admission", "validator", "assembler", "signer", "audit"}
Kind = trace_pb2.Span.SpanKind
Code = trace_pb2.Status.StatusCode


def _asked(span: ReceivedSpan) -> bool:
    """A call to admission about a job already submitted."""
    return span.span.kind == Kind.SPAN_KIND_SERVER and not span.span.name.endswith("/SubmitJob")


async def _arrived(
    receiver: OtlpReceiver, wanted: Callable[[ReceivedSpan], bool], timeout: float = 20.0
) -> bool:
    """Whether a span ``wanted`` arrives within ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not any(wanted(s) for s in receiver.spans()):
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.2)
    return True


def _admission_calls(spans: list[ReceivedSpan]) -> set[str]:
    return {s.span.name.rsplit("/", 1)[-1] for s in spans if s.service == "admission"}


async def _trace_of(
    receiver: OtlpReceiver,
    ident: str,
    done: str,
    timeout: float = 20.0,
    calls: frozenset[str] = frozenset(),
) -> list[ReceivedSpan]:
    """Every received span of the trace that holds the job's spans, once the
    span named ``done``, one of admission's ``calls`` (if any are named) and
    every span's parent have arrived (each service exports in its own
    batches; a watch's span ends, and is exported, after the job's last
    span). A parent that never arrives fails here."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        spans = receiver.spans()
        # A later call about the job (a watch, a read) names it too, in its
        # caller's own trace; the job's work is the submitting call's trace.
        mine = [s for s in spans if s.attributes.get("quire.job") == ident and not _asked(s)]
        trace_ids = {s.trace_id for s in mine}
        assert len(trace_ids) <= 1, "a job's work belongs to one trace"
        if trace_ids:
            whole = [s for s in spans if s.trace_id in trace_ids]
            ids = {s.span_id for s in whole} | {""}
            linked = all(s.parent_id in ids for s in whole)  # no parent still in a batch
            called = not calls or bool(_admission_calls(whole) & calls)
            if linked and called and any(s.span.name == done for s in whole):
                return whole
        assert loop.time() < deadline, f"no {done} span arrived for the job"
        await asyncio.sleep(0.2)


async def test_one_job_arrives_at_the_collector_as_one_linked_trace(
    otlp_receiver: OtlpReceiver, client: AdmissionClient, tmp_path: Path
) -> None:
    path = write_text_pdf(tmp_path / "otlp.pdf", [f"otlp {uuid.uuid4().hex}"])
    digest = (await client.upload(path)).sha256
    job = await client.submit([PacketItem("otlp", digest)])
    job = await client.wait(job.name, timeout=60)
    assert state_name(job.state) == "COMPLETED"

    spans = await _trace_of(otlp_receiver, job.name.removeprefix("jobs/"), "audit.complete")
    assert {s.service for s in spans} >= SERVICES
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if not s.parent_id]
    assert len(roots) == 1, "one root: the submitting call"
    assert roots[0].span.name.endswith("/SubmitJob") and roots[0].service == "admission"
    assert roots[0].span.kind == Kind.SPAN_KIND_SERVER
    ident = job.name.removeprefix("jobs/")
    assert roots[0].attributes.get("quire.job") == ident, "the submitting call names its job"
    watch = await _arrived(
        otlp_receiver,
        lambda s: s.span.name.endswith("/WatchJob") and s.attributes.get("quire.job") == ident,
    )
    assert watch, "so does the watch (its span ends, and is exported, after the job's last)"
    for span in spans:
        assert span.parent_id in ids | {""}, f"{span.span.name}'s parent is in the trace"
        assert 0 < span.span.start_time_unix_nano <= span.span.end_time_unix_nano
        assert span.span.status.code != Code.STATUS_CODE_ERROR, span.span.name
    names = {s.span.name for s in spans}
    for stage in ("validate", "assemble", "sign"):
        assert f"{stage}.queue_wait" in names, "the wait on each queue is a span"
        assert f"{stage}.fetch" in names, "each stage's source fetch is a phase span"
    assert {"assemble.render", "sign.sign", "validate.validate"} <= names
    kinds = {s.span.kind for s in spans}
    assert {
        Kind.SPAN_KIND_SERVER,
        Kind.SPAN_KIND_PRODUCER,
        Kind.SPAN_KIND_CONSUMER,
        Kind.SPAN_KIND_INTERNAL,
    } <= kinds
    sends = {s.span_id: s for s in spans if s.span.kind == Kind.SPAN_KIND_PRODUCER}
    for consumed in (s for s in spans if s.span.name.endswith(".process")):
        assert consumed.parent_id in sends, "each delivery hangs under the send that queued it"
    process = [s for s in spans if s.span.name.endswith(".process")]
    assert {s.service for s in process} == {"validator", "assembler", "signer"}
    assert all(s.attributes.get("quire.tenant") for s in process)
    wait = next(s for s in spans if s.span.name == "assemble.queue_wait")
    validated = next(s for s in spans if s.span.name == "validator.process")
    assert wait.span.start_time_unix_nano >= validated.span.start_time_unix_nano, (
        "the assembler's wait starts when the validator hands the job on"
    )
    assert all(s.resource.get("deployment.environment") == "test" for s in spans), (
        "OTEL_RESOURCE_ATTRIBUTES is honoured"
    )


async def test_a_rejected_jobs_trace_shows_where_and_why(
    otlp_receiver: OtlpReceiver, client: AdmissionClient, tmp_path: Path
) -> None:
    path = javascript_on_open(tmp_path / "active.pdf")
    digest = (await client.upload(path)).sha256
    job = await client.submit([PacketItem("active", digest)])
    job = await client.wait(job.name, timeout=60)
    assert state_name(job.state) == "REJECTED"

    spans = await _trace_of(otlp_receiver, job.name.removeprefix("jobs/"), "validator.process")
    failed = [s for s in spans if s.span.status.code == Code.STATUS_CODE_ERROR]
    assert [s.service for s in failed] == ["validator"]
    where = failed[0]
    assert where.span.name == "validator.process"
    assert where.attributes["quire.reason"] == job.reason_code
    assert where.span.status.message == f"REJECTED: {job.reason_code}"
    assert not any(s.span.name.startswith(("assemble.", "sign.")) for s in spans)


async def test_a_cli_commands_submission_and_wait_are_one_trace(
    stack, otlp_receiver: OtlpReceiver, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    path = write_text_pdf(tmp_path / "cli.pdf", [f"cli {uuid.uuid4().hex}"])
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_receiver.endpoint}
    done = await asyncio.to_thread(
        subprocess.run,
        [*QUIRE, "--data-dir", str(stack.data_dir), "--json", "submit", str(path), "--wait"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    ident = json.loads(done.stdout)["job"]["name"].removeprefix("jobs/")
    waits = frozenset({"WatchJob", "GetJob"})
    spans = await _trace_of(otlp_receiver, ident, "audit.complete", calls=waits)
    (root,) = [s for s in spans if not s.parent_id]
    assert (root.service, root.span.name) == ("quire-cli", "quire submit")
    assert root.span.kind == Kind.SPAN_KIND_CLIENT
    calls = _admission_calls(spans)
    assert "SubmitJob" in calls, "the submission"
    assert "UploadSource" not in calls, "a small file rides inside SubmitJob"
    assert calls & waits, "and the wait, in the command's one trace"
