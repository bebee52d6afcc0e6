"""Every file of the shared corpus through the real pipeline: each ends
accepted (COMPLETED) or rejected with a reason code, within the time budget,
with no crash of the validator, no hang and no leaked temporary file. Bytes
that are not the declared type at all are refused at the door (upload,
``TYPE_MISMATCH``) before any job exists.

``make test`` sends a fixed sample: in every folder of the corpus, the first
file and every eighth after it in sorted order, so each kind of file is there.
``make corpus`` sends every file (``CORPUS_EVERY=1``)."""

from __future__ import annotations

import asyncio
import collections
import os
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from conftest import CORPUS

from quire.client import AdmissionClient, PacketItem
from quire.grpcstatus import reason_of
from quire.jobs import state_name

pytestmark = pytest.mark.stack

CORPUS_EVERY = int(os.environ.get("CORPUS_EVERY", "8"))


def _sample(every: int) -> list[Path]:
    """The first file of each folder and every ``every``-th after it."""
    if not CORPUS.is_dir():
        return []
    by_folder: dict[Path, list[Path]] = collections.defaultdict(list)
    for path in sorted(p for p in CORPUS.rglob("*") if p.is_file()):
        by_folder[path.parent].append(path)
    return sorted(p for files in by_folder.values() for p in files[::every])


FILES = _sample(CORPUS_EVERY)
TIME_BUDGET_SECONDS = 60.0
IN_FLIGHT = 6
EXPECTED_REASONS = {
    "CYCLIC_STRUCTURE",
    "ENCRYPTED_PDF",
    "MALFORMED_PDF",
    "TYPE_MISMATCH",
    "ACTIVE_CONTENT",
    "TOO_MANY_PAGES",
    "DECOMPRESSED_SIZE_EXCEEDED",
    "PARSER_LIMIT_EXCEEDED",
    "SCHEMA_INVALID",
}


@dataclass(frozen=True)
class Outcome:
    state: str
    reason: str
    seconds: float


def _declared_type(path: Path) -> str:
    return "application/json" if path.suffix == ".json" else "application/pdf"


async def _run_all(client: AdmissionClient) -> dict[Path, Outcome]:
    outcomes: dict[Path, Outcome] = {}
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(path: Path) -> None:
        async with gate:
            started = time.monotonic()
            try:
                source = await client.upload(path, _declared_type(path))
            except grpc.aio.AioRpcError as error:  # refused at the door
                elapsed = time.monotonic() - started
                outcomes[path] = Outcome("REFUSED", reason_of(error) or "", elapsed)
                return
            job = await client.submit([PacketItem("doc", source.sha256)])
            job = await client.wait(job.name, timeout=TIME_BUDGET_SECONDS)
            outcomes[path] = Outcome(
                state_name(job.state), job.reason_code, time.monotonic() - started
            )

    await asyncio.gather(*(one(path) for path in FILES))
    return outcomes


@pytest.fixture(scope="module")
def corpus_run(corpus, stack):  # type: ignore[no-untyped-def]
    """Sends every corpus file once; tests below read the outcomes."""
    from quire.client import TenantAdminClient
    from quire.stack.supervisor import StackInfo

    info = StackInfo.read(stack.data_dir)
    validator_pid = stack.pid("validator")

    async def run() -> dict[Path, Outcome]:
        async with TenantAdminClient(info.endpoints["admission"], info.operator_token()) as admin:
            tenant = await admin.create_tenant("corpus", max_outstanding_jobs=10_000)
        async with AdmissionClient(info.endpoints["admission"], tenant.secret) as client:
            return await _run_all(client)

    outcomes = asyncio.run(run())
    counts = collections.Counter(f"{o.state} {o.reason}".strip() for o in outcomes.values())
    print("\ncorpus outcomes:", dict(sorted(counts.items())))
    return outcomes, validator_pid


@pytest.mark.parametrize(
    "path",
    # Without the corpus, one case that asks for it, so that the run says where it was looked for.
    FILES or [pytest.param(CORPUS, id="no-corpus")],
    ids=[str(p.relative_to(CORPUS)) for p in FILES] or None,
)
def test_every_corpus_file_ends_accepted_or_rejected_with_a_reason(corpus_run, path: Path) -> None:  # type: ignore[no-untyped-def]
    outcomes, _pid = corpus_run
    outcome = outcomes[path]
    assert outcome.seconds < TIME_BUDGET_SECONDS
    if outcome.state == "COMPLETED":
        assert outcome.reason == ""
    elif outcome.state == "REFUSED":
        assert outcome.reason == "TYPE_MISMATCH", outcome
    else:
        assert outcome.state == "REJECTED", outcome
        assert outcome.reason in EXPECTED_REASONS, outcome


def test_the_corpus_leaves_no_temporary_file_and_no_dead_validator(stack, corpus_run) -> None:  # type: ignore[no-untyped-def]
    _outcomes, validator_pid = corpus_run
    assert stack.pid("validator") == validator_pid, "the validator process never died"
    assert stack.restarts("validator") == 0
    assert list((Path(stack.data_dir) / "blobs" / ".tmp").iterdir()) == []
    status = Path(f"/proc/{validator_pid}/status").read_text()
    rss_kib = int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1])
    assert rss_kib < 512 * 1024, "the validator's own memory stayed bounded"
