"""Each job's record has its phase timings (issue 19): the queue wait and the
work of every stage that moved it on, measured by the worker that did it,
recorded with that worker's ledger entry (hashed with it), and folded by
audit into the job that admission, the HTTP door and `quire status` show."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.jobstatus import job_status_document
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.ledger import ledger_entries
from quire.testing.pdfs import write_text_pdf
from quire.testing.quirecli import run_quire

pytestmark = pytest.mark.stack

EXPECTED = [
    ("validate", "queue_wait"),
    ("validate", "fetch"),
    ("validate", "validate"),
    ("assemble", "queue_wait"),
    ("assemble", "fetch"),
    ("assemble", "render"),
    ("assemble", "store"),
    ("sign", "queue_wait"),
    ("sign", "fetch"),
    ("sign", "sign"),
    ("sign", "store"),
]


async def test_a_completed_job_carries_each_stages_phases_from_its_ledger_entries(
    stack: Stack, tmp_path: Path
) -> None:
    info = StackInfo.read(stack.data_dir)
    path = write_text_pdf(tmp_path / "timed.pdf", [f"timed {uuid.uuid4().hex}"] * 3)
    # The development tenant's job, so that `quire status` below may read it.
    async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
        digest = (await client.upload(path)).sha256
        job = await client.wait((await client.submit([PacketItem("doc", digest)])).name)
    assert state_name(job.state) == "COMPLETED", job.reason_code

    phases = [(t.stage, t.phase) for t in job.timings]
    assert [p for p in phases if p in EXPECTED] == [p for p in EXPECTED if p in phases]
    assert set(EXPECTED) - {("validate", "fetch"), ("sign", "fetch")} <= set(phases)
    seconds = [t.duration.ToMicroseconds() / 1e6 for t in job.timings]
    assert all(s >= 0 for s in seconds) and sum(seconds) > 0
    elapsed = (job.update_time.ToMicroseconds() - job.create_time.ToMicroseconds()) / 1e6
    assert sum(seconds) <= elapsed + 0.5, "the phases fit within the job's life"

    # Each stage's timings are on its own ledger entry: the one that moved the job on.
    recorded = {}
    for entry in await ledger_entries(stack.data_dir, job.name):
        for timing in entry.event.timings:
            recorded[(timing.stage, timing.phase)] = timing
            assert timing.stage == {"validator": "validate", "assembler": "assemble",
                                    "signer": "sign"}[entry.event.actor.service]  # fmt: skip
    assert {key: t.duration for key, t in recorded.items()} == {
        (t.stage, t.phase): t.duration for t in job.timings
    }

    document = job_status_document(job)
    assert [(t["stage"], t["phase"]) for t in document["timings"]] == phases

    shown = run_quire(stack.data_dir, "status", job.name)
    assert shown.returncode == 0, shown.stderr
    print(f"\nquire status: {shown.stdout}")
    assert "validate: queue_wait" in shown.stdout and "sign: queue_wait" in shown.stdout
