"""``quire diff JOB JOB`` compares two jobs' pinned inputs and outcomes from
their ledger entries: two jobs made from the same manifest differ only in
their signed output; a job with another source differs where it should."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from quire.cli.diff import SHOWN_ONLY, pinned
from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import run_quire
from quire.type import job_pb2, queue_pb2

pytestmark = pytest.mark.stack


def _diff(stack: Stack, a: str, b: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    done = run_quire(stack.data_dir, "diff", a, b, "--json")
    return done.returncode, json.loads(done.stdout)


async def test_diff_shows_what_two_jobs_were_made_from_and_where_they_part(
    stack: Stack, tmp_path: Path
) -> None:
    info = StackInfo.read(stack.data_dir)
    first = write_text_pdf(tmp_path / "a.pdf", [f"same {uuid.uuid4().hex}"])
    other = write_text_pdf(tmp_path / "b.pdf", [f"other {uuid.uuid4().hex}"])
    async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
        same, changed = (await client.upload(first)).sha256, (await client.upload(other)).sha256
        jobs = []
        for digest in (same, same, changed):
            job = await client.wait((await client.submit([PacketItem("doc", digest)])).name)
            assert state_name(job.state) == "COMPLETED", job.reason_code
            jobs.append(job.name)

    code, twins = _diff(stack, jobs[0], jobs[1])
    assert code == 1 and twins["differ"] == ["output_digest"], "each signature is its own"
    rows = {row["field"]: row for row in twins["fields"]}
    assert rows["sources[0]"]["a"] == rows["sources[0]"]["b"] == same
    assert rows["state"]["a"] == "COMPLETED" and rows["build validator"]["same"]

    code, parted = _diff(stack, jobs[0], jobs[2])
    assert code == 1
    assert set(parted["differ"]) == {"manifest_digest", "sources[0]", "output_digest"}

    code, itself = _diff(stack, jobs[0], jobs[0])
    assert (code, itself["differ"]) == (0, [])
    shown = run_quire(stack.data_dir, "diff", jobs[0], jobs[2])
    assert "≠ sources[0]" in shown.stdout and shown.stdout.rstrip().endswith(
        "differ in 3: manifest_digest, sources[0], output_digest"
    )


def test_a_retired_entry_is_not_what_the_job_was_made_from() -> None:
    made = queue_pb2.TransitionEvent(
        job="jobs/x", to_state=job_pb2.JOB_STATE_COMPLETED, source_digests=["a" * 64]
    )
    retired = queue_pb2.TransitionEvent(
        job="jobs/x",
        to_state=job_pb2.JOB_STATE_COMPLETED,
        source_digests=["b" * 64],
        retirement=queue_pb2.Retirement(kind="source", sha256="a" * 64),
    )
    assert pinned([made, retired])["sources[0]"] == "a" * 64


def _pinned_event(fetched: str, fetch_second: int) -> queue_pb2.TransitionEvent:
    pin = job_pb2.SourcePin(
        position=0,
        system="tax",
        key="orders/A-17",
        sha256="c" * 64,
        fetched_sha256=fetched,
        schema_version="tax-record@1",
        normalisations=["CANONICAL_JSON"],
    )
    pin.fetch_time.FromSeconds(fetch_second)
    return queue_pb2.TransitionEvent(
        job="jobs/x", to_state=job_pb2.JOB_STATE_REVIEWING, source_digests=["c" * 64], pins=[pin]
    )


def test_a_pinned_source_shows_where_it_came_from_and_its_fetch_time_is_not_a_difference() -> None:
    first = pinned([_pinned_event("d" * 64, 100)])
    assert first["sources[0].fetched_from"] == "tax:orders/A-17"
    assert first["sources[0].schema"] == "tax-record@1"
    assert first["sources[0].normalised"] == "CANONICAL_JSON"
    later = pinned([_pinned_event("d" * 64, 200)])
    assert first["sources[0].fetch_time"] != later["sources[0].fetch_time"]
    assert all(first[name] == later[name] or name.endswith(SHOWN_ONLY) for name in first), (
        "the same bytes fetched later are the same source"
    )
    changed = pinned([_pinned_event("e" * 64, 100)])
    assert changed["sources[0].fetched_sha256"] != first["sources[0].fetched_sha256"]
