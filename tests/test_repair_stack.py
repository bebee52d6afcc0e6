"""Repaired sources on the real stack (issue 13, "what must be shown" 5): the
ledger entry that accepts a damaged source names the repair and the normalised
digest, the assembler merges the clean rewrite, and ``quire verify --job``
still matches. Ambiguous damage is refused with a sub-code; a ruleset that
refuses repairs refuses the file, one that reviews them parks the job until an
operator approves.

One stack for the module, with the shipped rulesets plus two made for these
tests (``repair-refuse`` and ``repair-review``)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import subprocess
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pikepdf
import pytest

from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.blobstore import normalized_key
from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.damaged import AMBIGUOUS, EVERYDAY
from quire.testing.operatorcalls import AsOperator
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import run_quire
from quire.testing.sealedstore import plaintext
from quire.type import queue_pb2
from quire.validator.rulesets import DEFAULT_DIRECTORY
from quire.validator.v1 import validator_service_pb2 as vpb
from quire.validator.v1 import validator_service_pb2_grpc as vgrpc

pytestmark = pytest.mark.stack

SHIPPED_RULESETS = DEFAULT_DIRECTORY
TEST_RULESETS = {
    "repair-refuse": "refuse",
    "repair-review": "review",
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The embedded stack, its validator loading the shipped rulesets and the
    two repair-policy rulesets of these tests (overrides conftest's ``stack``,
    so ``client`` talks to this one)."""
    rulesets = tmp_path_factory.mktemp("rulesets")
    for shipped in SHIPPED_RULESETS.glob("*.json"):
        shutil.copy(shipped, rulesets / shipped.name)
    for name, policy in TEST_RULESETS.items():
        body = {
            "name": name,
            "version": "1",
            "description": f"Structural checks only; damaged PDFs: repair {policy}.",
            "active_content": "refuse",
            "repair": policy,
            "rules": [],
        }
        (rulesets / f"{name}-1.json").write_text(json.dumps(body))
    data_dir = tmp_path_factory.mktemp("repair-stack")
    running = Stack(
        data_dir,
        env={
            "QUIRE_RULESETS_DIR": str(rulesets),
            "QUIRE_DRAIN_SECONDS": "5",
        },
    )
    running.start()
    yield running
    running.stop()


@pytest.fixture
async def validator(stack: Stack) -> AsyncIterator[vgrpc.ValidatorServiceStub]:
    """The validator's API (the review desk), called with the operator token."""
    info = StackInfo.read(stack.data_dir)
    async with grpc.aio.insecure_channel(
        info.endpoints["validator"], interceptors=[AsOperator(info.operator_token())]
    ) as channel:
        yield vgrpc.ValidatorServiceStub(channel)


async def _ledger(stack: Stack, job: str, until: str) -> list[queue_pb2.TransitionEvent]:
    """The job's ledger entries, once the entry into state ``until`` has landed
    (the audit service records behind the job's own state)."""
    info = StackInfo.read(stack.data_dir)
    async with grpc.aio.insecure_channel(info.endpoints["audit"]) as channel:
        audit = audit_service_pb2_grpc.AuditServiceStub(channel)
        for _ in range(100):
            reply = await audit.ListJobEvents(
                audit_service_pb2.ListJobEventsRequest(job=job, page_size=100),
                metadata=bearer_metadata(info.operator_token()),
            )
            events = [entry.event for entry in reply.entries]
            if any(state_name(e.to_state) == until for e in events):
                return events
            await asyncio.sleep(0.1)
    raise AssertionError(f"{job}: no ledger entry into {until} after 10 s")


def _transition(
    events: list[queue_pb2.TransitionEvent], from_state: str, to_state: str
) -> queue_pb2.TransitionEvent:
    moves = [(state_name(e.from_state), state_name(e.to_state)) for e in events]
    assert (from_state, to_state) in moves, moves
    return events[moves.index((from_state, to_state))]


def _terminal(events: list[queue_pb2.TransitionEvent], state: str) -> queue_pb2.TransitionEvent:
    return [e for e in events if state_name(e.to_state) == state][-1]


async def _upload(client: AdmissionClient, path: Path) -> str:
    digest = (await client.upload(path)).sha256
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    return digest


def _damaged(name: str, folder: Path) -> tuple[Path, str]:
    builder, code = EVERYDAY[name]
    return builder(folder / f"{name}.pdf"), code


async def test_repaired_sources_are_merged_recorded_and_still_verify(
    stack: Stack, client: AdmissionClient, tmp_path: Path
) -> None:
    clean = await _upload(client, write_text_pdf(tmp_path / "clean.pdf", ["a clean page"]))
    xref_path, xref_code = _damaged("xref-missing", tmp_path)
    length_path, length_code = _damaged("stream-without-length", tmp_path)
    xref, length = await _upload(client, xref_path), await _upload(client, length_path)

    job = await client.submit(
        [PacketItem("clean", clean), PacketItem("no-xref", xref), PacketItem("no-length", length)]
    )
    final = await client.wait(job.name, timeout=60)
    assert (state_name(final.state), final.reason_code) == ("COMPLETED", "")

    events = await _ledger(stack, job.name, "COMPLETED")
    accepting = _transition(events, "VALIDATING", "REVIEWING")
    repairs = {r.position: r for r in accepting.repairs}
    assert sorted(repairs) == [1, 2], "the clean source needs no repair"
    for position, uploaded, code in ((1, xref, xref_code), (2, length, length_code)):
        repair = repairs[position]
        assert repair.sha256 == uploaded, "the manifest's digest: of the uploaded bytes"
        assert repair.normalized_sha256 and repair.normalized_sha256 != uploaded
        assert code in repair.warnings
        stored = plaintext(
            Path(stack.data_dir), normalized_key(accepting.tenant, repair.normalized_sha256)
        )
        assert hashlib.sha256(stored).hexdigest() == repair.normalized_sha256
        assert len(stored) == repair.normalized_size_bytes
    accepted = _terminal(events, "ACCEPTED")
    assert list(accepted.source_digests) == [clean, xref, length]

    signed = tmp_path / "signed.pdf"
    assert await client.download(job.name, signed) == final.output_digest
    verified = await asyncio.to_thread(
        run_quire, Path(stack.data_dir), "verify", str(signed), "--job", job.name
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "embedded sources match the ledger, in order: True" in verified.stdout
    assert "output digest matches the ledger: True" in verified.stdout

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pikepdf.open(signed, attempt_recovery=False) as pdf:
            assert len(pdf.pages) == 3
            assert pdf.get_warnings() == []
            sources = json.loads(str(pdf.docinfo["/QuireSources"]))
    assert [s["sha256"] for s in sources] == [clean, xref, length]
    assert "normalized_sha256" not in sources[0]
    assert [s.get("normalized_sha256") for s in sources[1:]] == [
        repairs[1].normalized_sha256,
        repairs[2].normalized_sha256,
    ]

    text = subprocess.run(
        ["pdftotext", "-layout", str(signed), "-"], capture_output=True, text=True, check=True
    ).stdout
    for words in ("a clean page", "damaged but readable", "no length"):
        assert words in text

    # The rewrite is deterministic: the same damaged bytes, built again and
    # submitted in another job, give the same normalised digest.
    (tmp_path / "again").mkdir()
    again = await _upload(client, _damaged("xref-missing", tmp_path / "again")[0])
    assert again == xref
    second = await client.submit([PacketItem("no-xref", again)])
    assert state_name((await client.wait(second.name, timeout=60)).state) == "COMPLETED"
    redone = _transition(await _ledger(stack, second.name, "COMPLETED"), "VALIDATING", "REVIEWING")
    assert [(r.position, r.normalized_sha256) for r in redone.repairs] == [
        (0, repairs[1].normalized_sha256)
    ]


async def test_ambiguous_damage_is_refused_with_its_sub_code(
    stack: Stack, client: AdmissionClient, tmp_path: Path
) -> None:
    builder, sub_code = AMBIGUOUS["revisions-disagree"]
    digest = await _upload(client, builder(tmp_path / "revisions.pdf"))
    job = await client.submit([PacketItem("guess", digest)])
    final = await client.wait(job.name, timeout=60)
    assert (state_name(final.state), final.reason_code) == ("REJECTED", "MALFORMED_PDF")
    assert final.reason_detail == sub_code, "the job's status names the sub-code too"
    events = await _ledger(stack, job.name, "REJECTED")
    terminal = _terminal(events, "REJECTED")
    assert (terminal.reason_code, terminal.reason_detail) == ("MALFORMED_PDF", sub_code)
    assert not any(e.repairs for e in events)


async def test_a_source_read_two_ways_is_refused_and_the_ledger_names_its_pages(
    stack: Stack, client: AdmissionClient, tmp_path: Path
) -> None:
    builder, sub_code = AMBIGUOUS["length-spans-objects"]
    digest = await _upload(client, builder(tmp_path / "masked.pdf"))
    job = await client.submit([PacketItem("masked", digest)])
    final = await client.wait(job.name, timeout=60)
    assert (state_name(final.state), final.reason_detail) == ("REJECTED", sub_code)
    terminal = _terminal(await _ledger(stack, job.name, "REJECTED"), "REJECTED")
    assert [(d.position, list(d.pages), d.detail) for d in terminal.disagreements] == [
        (0, [1], "AMBIGUOUS_CONTENT")
    ]


async def test_a_ruleset_that_refuses_repairs_rejects_a_damaged_file(
    stack: Stack, client: AdmissionClient, tmp_path: Path
) -> None:
    path, _code = _damaged("xref-offset-wrong", tmp_path)
    job = await client.submit(
        [PacketItem("d", await _upload(client, path))], ruleset="repair-refuse"
    )
    final = await client.wait(job.name, timeout=60)
    assert (state_name(final.state), final.reason_code) == ("REJECTED", "MALFORMED_PDF")
    events = await _ledger(stack, job.name, "REJECTED")
    terminal = _terminal(events, "REJECTED")
    assert (terminal.reason_code, terminal.reason_detail) == ("MALFORMED_PDF", "REPAIR_NOT_ALLOWED")
    assert not any(e.repairs for e in events)


async def test_a_ruleset_that_reviews_repairs_parks_the_job_until_approved(
    stack: Stack, client: AdmissionClient, validator: vgrpc.ValidatorServiceStub, tmp_path: Path
) -> None:
    path, code = _damaged("stream-length-wrong", tmp_path)
    digest = await _upload(client, path)
    job = await client.submit([PacketItem("d", digest)], ruleset="repair-review")
    parked = await client.wait(job.name, timeout=60)
    assert state_name(parked.state) == "NEEDS_REVIEW"

    pending = {r.job: r for r in (await validator.ListReviews(vpb.ListReviewsRequest())).reviews}
    review = pending[job.name]
    assert review.status == "PENDING" and review.ruleset_version == "repair-review@1"
    repair_decisions = [d for d in review.decisions if d.rule == "repair"]
    assert [(d.outcome, d.position) for d in repair_decisions] == [("review", 0)]
    assert code in repair_decisions[0].detail.split()

    resolved = await validator.ResolveReview(
        vpb.ResolveReviewRequest(
            job=job.name, approve=True, note="rewrite checked", operator="ops-alice"
        )
    )
    assert resolved.status == "APPROVED"
    final = await client.wait(job.name, timeout=60, stop_when_parked=False)
    assert (state_name(final.state), final.reason_code) == ("COMPLETED", "")

    events = await _ledger(stack, job.name, "COMPLETED")
    # The repair is recorded where the validator accepted the source, before
    # the review; the approval itself carries no repairs.
    recorded = list(_transition(events, "VALIDATING", "REVIEWING").repairs)
    assert [(r.position, r.sha256) for r in recorded] == [(0, digest)]
    assert code in recorded[0].warnings and recorded[0].normalized_sha256 != digest
    assert [e for e in events if e.repairs] == [_transition(events, "VALIDATING", "REVIEWING")]
    signed = tmp_path / "signed.pdf"
    await client.download(job.name, signed)
    with pikepdf.open(signed, attempt_recovery=False) as pdf:
        sources = json.loads(str(pdf.docinfo["/QuireSources"]))
    assert sources[0]["normalized_sha256"] == recorded[0].normalized_sha256
