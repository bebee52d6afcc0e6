"""Proof-size benchmark: how one job's evidence grows with the tenant's log.

For logs of 1,000, 10,000 and 100,000 entries (real ``TransitionEvent``
bytes, seven per job), prints the inclusion-proof length of one entry in
hashes and bytes, the size of one job's whole evidence file
(docs/evidence-format.md, section 6) with a consistency proof from the
log's midpoint, and the time to build the tree, make a proof and verify it.
Both sizes should grow with log2 of the log, not with the log.

    make bench-proofs           # BENCH_PROOF_SIZES=1000,10000,100000
"""

from __future__ import annotations

import base64
import json
import os
import time

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from quire.checkpoint import Checkpoint, sign_checkpoint
from quire.merkle import HASH_SIZE, MerkleTree, leaf_hash, verify_inclusion
from quire.pipeline import HISTORY_BEFORE_COMPLETION, State
from quire.transitions import EventFactory
from quire.type import queue_pb2

FACTORY = EventFactory("bench", "bench", "0")
STATES = (*HISTORY_BEFORE_COMPLETION, State.COMPLETED)
"""A completed job's states, in the order the pipeline records them."""
ORIGIN = "quire/00000000000000aa"


def _entries(count: int) -> list[bytes]:
    """Ledger entries as audit stores them: seven transitions per job."""
    entries = []
    for index in range(count):
        task = queue_pb2.JobTask(
            job=f"jobs/{index // len(STATES):012x}",
            tenant="00000000000000aa",
            manifest_digest="m" * 64,
            sources=[],
        )
        event = FACTORY.transition(task, "", STATES[index % len(STATES)], attempt=1, lease_token=1)
        entries.append(event.SerializeToString(deterministic=True))
    return entries


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _evidence(tree: MerkleTree, entries: list[bytes], job: range, key: Ed25519PrivateKey) -> bytes:
    """One job's evidence file, as section 6 of the spec lays it out."""
    size = tree.size
    old = size // 2

    def signed(at: int) -> str:
        return sign_checkpoint(Checkpoint(ORIGIN, at, tree.root(at)), key).decode()

    document = {
        "format": "quire-evidence/1",
        "origin": ORIGIN,
        "job": "bench",
        "checkpoint": signed(size),
        "entries": [
            {
                "index": i,
                "entry": _b64(entries[i]),
                "inclusion_proof": [_b64(h) for h in tree.inclusion_proof(i)],
            }
            for i in job
        ],
        "consistency": [
            {"checkpoint": signed(old), "proof": [_b64(h) for h in tree.consistency_proof(old)]}
        ],
    }
    return json.dumps(document).encode()


def main() -> None:
    sizes = [int(s) for s in os.environ.get("BENCH_PROOF_SIZES", "1000,10000,100000").split(",")]
    key = Ed25519PrivateKey.generate()
    all_entries = _entries(max(sizes))
    print(
        f"{'entries':>9} {'build':>8} {'proof':>9} {'verify':>9} "
        f"{'hashes':>6} {'proof B':>7} {'consist.':>8} {'job evidence B':>14}"
    )
    for size in sizes:
        entries = all_entries[:size]
        started = time.perf_counter()
        tree = MerkleTree(leaf_hash(e) for e in entries)
        built = time.perf_counter() - started

        index = size // 3  # one entry somewhere in the middle of the log
        started = time.perf_counter()
        proof = tree.inclusion_proof(index)
        proved = time.perf_counter() - started
        started = time.perf_counter()
        verify_inclusion(leaf_hash(entries[index]), index, size, proof, tree.root())
        verified = time.perf_counter() - started

        first = index - index % len(STATES)
        job = range(first, min(first + len(STATES), size))
        evidence = _evidence(tree, entries, job, key)
        consistency = len(tree.consistency_proof(size // 2))
        print(
            f"{size:>9,} {built:>7.3f}s {proved * 1e3:>7.3f}ms {verified * 1e3:>7.3f}ms "
            f"{len(proof):>6} {len(proof) * HASH_SIZE:>7} {consistency:>8} {len(evidence):>14,}"
        )


if __name__ == "__main__":
    main()
