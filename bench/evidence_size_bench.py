"""One job's exported evidence as its tenant's history grows: audit's own
exporter (``quire.audit.evidence``) over real SQLite ledgers of 1,000, 10,000
and 100,000 entries (seven per job), each with a signed checkpoint. Prints the
evidence file's size, its longest inclusion proof and the time to export and
to verify it offline; both grow with log2 of the history, not with it.

    make bench-proofs        (BENCH_EVIDENCE_SIZES=1000,10000 to change the sizes)
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from quire.audit import ledger, tables
from quire.audit.checkpoints import CheckpointSigner
from quire.audit.evidence import build_evidence, dumps
from quire.database import Database
from quire.evidenceverify import verify_evidence
from quire.pipeline import HISTORY_BEFORE_COMPLETION, State
from quire.transitions import EventFactory
from quire.type import queue_pb2

STATES = (*HISTORY_BEFORE_COMPLETION, State.COMPLETED)
"""A completed job's states, in the order the pipeline records them."""
FACTORY = EventFactory("bench", "bench-0", "0")
BATCH_JOBS = 500


def _fill(database: Database, entries: int) -> str:
    """``entries`` ledger entries of one tenant; returns the job in the middle."""
    jobs = [f"jobs/{index:016x}" for index in range(entries // len(STATES))]

    def append(batch: list[str]) -> None:
        def write(session):  # type: ignore[no-untyped-def]
            for job in batch:
                task = queue_pb2.JobTask(
                    job=job, tenant="0123456789abcdef", manifest_digest="m" * 64
                )
                previous = ""
                for state in STATES:
                    event = FACTORY.transition(task, previous, state, attempt=1, lease_token=1)
                    event.output_digest = "o" * 64 if state == State.COMMITTING else ""
                    ledger.append(session, event)
                    previous = state

        database.transaction(write)

    for start in range(0, len(jobs), BATCH_JOBS):
        append(jobs[start : start + BATCH_JOBS])
    return jobs[len(jobs) // 2]


def main() -> None:
    sizes = [int(s) for s in os.environ.get("BENCH_EVIDENCE_SIZES", "1000,10000,100000").split(",")]
    print(
        f"{'entries':>9} {'evidence B':>11} {'proof hashes':>13} {'export ms':>10} {'verify ms':>10}"
    )
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="quire-evidence-") as temp:
            folder = Path(temp)
            database = Database(f"sqlite:///{folder / 'audit.db'}", tables.metadata)
            database.create_schema()
            job = _fill(database, size)
            signer = CheckpointSigner(folder / "keys")
            documents = database.transaction(signer.take)
            started = time.perf_counter()
            evidence = database.transaction(
                lambda s, j=job, d=documents, k=signer.public_pem: build_evidence(s, j, d, k)
            )
            exported = time.perf_counter() - started
            text = dumps(evidence)
            started = time.perf_counter()
            problems = verify_evidence(json.loads(text))
            verified = time.perf_counter() - started
            assert not problems, problems
            proof = max(len(entry["inclusion_proof"]) for entry in evidence["entries"])
            print(
                f"{size:>9,} {len(text):>11,} {proof:>13} "
                f"{exported * 1000:>10.1f} {verified * 1000:>10.2f}"
            )
            database.close()


if __name__ == "__main__":
    main()
