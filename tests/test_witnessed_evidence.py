"""Checkpoints cosigned by the witness, end to end over gRPC: audit's
checkpoint book has each tenant's newest checkpoint cosigned by a real
witness (its servicer on a real SQLite database, on a loopback port), the
evidence carries the cosignature, and ``verify_evidence`` with the witness's
key accepts it.

Then the attack the witness exists for: someone holding audit's database and
its checkpoint key rewrites a tenant's history (every hash recomputed) and
signs it. Audit itself signs nothing over it; the witness refuses to cosign
it; and the bundle from the rewritten history fails verification against the
witness — without a cosignature, with the honest one copied onto it, and
against a checkpoint the verifier kept from before."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest_asyncio
from test_ledger_verification import STATES, _grow, _rewrite_t1

from quire.audit import ledger, tables
from quire.audit.checkpoints import CheckpointBook, CheckpointSigner
from quire.audit.evidence import build_evidence
from quire.audit.witnessing import Witnessing
from quire.database import Database
from quire.evidenceverify import public_key_fingerprint, verify_evidence
from quire.signer import tables as signer_tables
from quire.signer.witness import Witness, WitnessSettings
from quire.signer.witnessservicer import WitnessServicer
from quire.transitions import EventFactory
from quire.type import queue_pb2
from quire.witness.v1 import witness_service_pb2_grpc as pb_grpc

FACTORY = EventFactory("test", "instance", "0")


@dataclass
class Scene:
    database: Database
    signer: CheckpointSigner
    book: CheckpointBook
    folder: Path
    witness: Witness
    stub: pb_grpc.WitnessServiceStub
    refusals: list[int]

    def evidence(self, job: str, **kwargs: int) -> dict:  # type: ignore[type-arg]
        documents = self.book.documents()
        return self.database.transaction(
            lambda s: build_evidence(s, job, documents, self.signer.public_pem, **kwargs)
        )

    @property
    def pin(self) -> str:
        return public_key_fingerprint(self.signer.public_pem)


@pytest_asyncio.fixture
async def scene(tmp_path: Path) -> AsyncIterator[Scene]:
    database = Database(f"sqlite:///{tmp_path / 'audit.db'}", tables.metadata)
    database.create_schema()
    for job, tenant in (("jobs/aa", "t1"), ("jobs/bb", "t2")):
        previous = ""
        for state in STATES:
            task = queue_pb2.JobTask(job=job, tenant=tenant)
            event = FACTORY.transition(task, previous, state, attempt=1, lease_token=1)
            database.transaction(lambda s, e=event: ledger.append(s, e))
            previous = state
    witness_db = Database(f"sqlite:///{tmp_path / 'signer.db'}", signer_tables.metadata)
    witness_db.create_schema()
    witness = Witness(
        witness_db,
        WitnessSettings(name="quire-witness", key_file=tmp_path / "witness.key", generate=True),
    )
    server = grpc.aio.server()
    pb_grpc.add_WitnessServiceServicer_to_server(WitnessServicer(witness), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        stub = pb_grpc.WitnessServiceStub(channel)
        signer = CheckpointSigner(tmp_path / "keys")
        refusals: list[int] = []
        folder = tmp_path / "checkpoints"
        witnessing = Witnessing(stub, database, signer.public_raw, lambda: refusals.append(1))
        book = CheckpointBook(
            database, signer, folder, refused=lambda: refusals.append(1), witnessing=witnessing
        )
        yield Scene(database, signer, book, folder, witness, stub, refusals)
    finally:
        await channel.close()
        await server.stop(None)


async def test_evidence_carries_the_witness_cosignature_and_verifies_with_its_key(
    scene: Scene,
) -> None:
    assert await scene.book.take() == 2
    assert sorted(p.name.split("-", 1)[1] for p in scene.folder.glob("*.cosig")) == [
        "t1.cosig",
        "t2.cosig",
    ]
    evidence = scene.evidence("jobs/aa")
    assert "quire-witness" in evidence["checkpoint"]
    assert verify_evidence(evidence, scene.pin, witness=scene.witness.verifier_key) == []
    # The log grows; the newest checkpoint is cosigned from the last one.
    _grow(scene.database, "t1", "jobs/cc")
    assert await scene.book.take() == 1
    grown = scene.evidence("jobs/aa")
    assert verify_evidence(grown, scene.pin, witness=scene.witness.verifier_key) == []
    # A verifier that kept the first bundle checks that the new one extends it.
    since = json.loads(json.dumps(scene.evidence("jobs/aa", since_size=7)))
    assert (
        verify_evidence(
            since,
            scene.pin,
            witness=scene.witness.verifier_key,
            earlier=evidence["checkpoint"].encode(),
        )
        == []
    )
    assert scene.refusals == []


async def test_a_rewritten_history_signed_with_audits_key_fails_against_the_witness(
    scene: Scene, tmp_path: Path
) -> None:
    assert await scene.book.take() == 2
    honest = scene.evidence("jobs/aa")
    witness = scene.witness.verifier_key

    # The attacker rewrites t1 in the database, every hash recomputed, and grows it.
    scene.database.transaction(_rewrite_t1)
    _grow(scene.database, "t1", "jobs/ee")
    assert await scene.book.take() == 0, "audit signs nothing over the rewrite"
    assert scene.refusals == [1]

    # With audit's checkpoint key, the attacker signs the rewritten log anyway
    # (as audit did before it checked consistency) and asks the witness.
    forged_folder = tmp_path / "forged"
    forged_documents = scene.database.transaction(scene.signer.take)
    scene.signer.write(forged_documents, forged_folder)
    witnessing = Witnessing(scene.stub, scene.database, scene.signer.public_raw)
    # The witness's own size is what it cosigned; the proof the rewritten log
    # gives from it does not hold.
    for path in scene.folder.glob("*-t1.cosig"):
        (forged_folder / path.name).write_text(path.read_text())
    assert await witnessing.round(forged_folder, forged_documents) == 1, "t2 only"
    assert not (forged_folder / f"{8:012d}-t1.cosig").exists()

    forged = scene.database.transaction(
        lambda s: build_evidence(s, "jobs/aa", forged_documents, scene.signer.public_pem)
    )
    # Audit's key alone vouches for the rewrite: this is why the witness is required.
    assert verify_evidence(forged, scene.pin) == []
    refused = verify_evidence(forged, scene.pin, witness=witness)
    assert refused and "no cosignature from the trusted witness" in refused[0]

    # The honest cosignature copied onto the forged checkpoint does not verify.
    line = honest["checkpoint"].splitlines()[-1] + "\n"
    transplanted = {**forged, "checkpoint": forged["checkpoint"] + line}
    copied = verify_evidence(transplanted, scene.pin, witness=witness)
    assert copied and "does not verify" in copied[0]

    # Against the checkpoint a verifier kept from before, the forged bundle
    # (however it is signed) shows the rewrite.
    kept = honest["checkpoint"].encode()
    rewritten = verify_evidence(forged, scene.pin, earlier=kept)
    assert rewritten and "extends the checkpoint seen earlier" in rewritten[0]


async def test_a_lost_checkpoint_folder_is_witnessed_again_from_the_witness_size(
    scene: Scene,
) -> None:
    """Audit's checkpoint folder lost: audit asks from size 0, the witness
    says the size it holds, and audit asks again from there."""
    _grow(scene.database, "t1", "jobs/cc")
    assert await scene.book.take() == 2
    for path in scene.folder.iterdir():
        path.unlink()
    stale = scene.database.transaction(
        lambda s: [d for d in scene.signer.take(s) if d["checkpoint"]["tenant"] == "t2"]
    )
    scene.signer.write(stale, scene.folder)
    assert await scene.book.take() == 1, "t1 is signed again from scratch"
    assert len(list(scene.folder.glob("*-t1.cosig"))) == 1, "the same size: cosigned again"
    assert scene.refusals == []
