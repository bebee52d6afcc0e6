"""The witness (``quire.signer.witness``) on a real SQLite database with real
keys: it cosigns a log's checkpoints only as they extend the last one it
cosigned, refuses a fork or a rewrite signed with audit's own key, refuses
another key than the one it first saw, says its size when asked from another,
and keeps a copy of each checkpoint it cosigned. Its cosignature verifies as
C2SP tlog-cosignature/v1 and fails for any other checkpoint."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from sqlalchemy import select

from quire.checkpoint import Checkpoint, sign_checkpoint
from quire.cosignature import (
    cosigned_note,
    parse_witness_key,
    verify_cosignature,
    witness_key,
)
from quire.database import Database
from quire.errors import FailedPrecondition, InvalidInput
from quire.merkle import MerkleTree
from quire.signednote import NoteError
from quire.signer import tables
from quire.signer.witness import Witness, WitnessSettings

ORIGIN = "quire/0123456789abcdef"


def _raw(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


class Log:
    """A tenant log as audit keeps it: leaves, and checkpoints signed by its key."""

    def __init__(self, key: Ed25519PrivateKey, leaves: list[bytes]) -> None:
        self.key = key
        self.tree = MerkleTree(hashlib.sha256(b"\x00" + leaf).digest() for leaf in leaves)

    def note(self, size: int) -> bytes:
        return sign_checkpoint(Checkpoint(ORIGIN, size, self.tree.root(size)), self.key)

    def proof(self, old: int, new: int) -> list[bytes]:
        return self.tree.consistency_proof(old, new) if 0 < old < new else []


@pytest.fixture
def witness(tmp_path: Path) -> Witness:
    database = Database(f"sqlite:///{tmp_path / 'signer.db'}", tables.metadata)
    database.create_schema()
    return Witness(
        database,
        WitnessSettings(name="witness.example", key_file=tmp_path / "witness.key", generate=True),
    )


async def test_a_growing_log_is_cosigned_and_each_cosignature_verifies(witness: Witness) -> None:
    key = Ed25519PrivateKey.generate()
    log = Log(key, [f"entry {i}".encode() for i in range(9)])
    name, public = parse_witness_key(witness.verifier_key)
    held = 0
    for size in (3, 5, 9):
        cosigned = await witness.add_checkpoint(
            held, log.proof(held, size), log.note(size), _raw(key)
        )
        assert cosigned.size == size and cosigned.line
        note = cosigned_note(log.note(size), cosigned.line)
        assert verify_cosignature(note, name, public).name == "witness.example"
        held = size
    # The line covers only its own checkpoint.
    with pytest.raises(NoteError):
        verify_cosignature(cosigned_note(log.note(5), cosigned.line), name, public)
    # And another witness's key finds no cosignature of its own.
    other = witness_key("witness.example", Ed25519PrivateKey.generate().public_key())
    with pytest.raises(NoteError):
        verify_cosignature(note, *parse_witness_key(other))


async def test_a_rewritten_history_signed_with_audits_own_key_is_refused(witness: Witness) -> None:
    key = Ed25519PrivateKey.generate()
    honest = Log(key, [b"a", b"b", b"c", b"d"])
    assert (await witness.add_checkpoint(0, [], honest.note(3), _raw(key))).line
    # The same key signs a history whose third entry changed, one entry longer.
    forked = Log(key, [b"a", b"b", b"C", b"d"])
    with pytest.raises(FailedPrecondition) as refused:
        await witness.add_checkpoint(3, forked.proof(3, 4), forked.note(4), _raw(key))
    assert refused.value.reason == "CHECKPOINT_INCONSISTENT"
    # A different root at the same size, and a smaller log, are refused too.
    with pytest.raises(FailedPrecondition):
        await witness.add_checkpoint(3, [], forked.note(3), _raw(key))
    with pytest.raises(FailedPrecondition):
        await witness.add_checkpoint(3, [], honest.note(2), _raw(key))
    # The honest continuation is still cosigned.
    assert (await witness.add_checkpoint(3, honest.proof(3, 4), honest.note(4), _raw(key))).line


async def test_another_key_or_a_bad_signature_is_refused(witness: Witness) -> None:
    key = Ed25519PrivateKey.generate()
    log = Log(key, [b"a", b"b"])
    assert (await witness.add_checkpoint(0, [], log.note(1), _raw(key))).line
    stranger = Ed25519PrivateKey.generate()
    with pytest.raises(InvalidInput) as refused:
        await witness.add_checkpoint(1, [], Log(stranger, [b"a", b"b"]).note(2), _raw(stranger))
    assert refused.value.reason == "CHECKPOINT_SIGNATURE_INVALID"
    # Audit's key offered, but the note signed by another.
    with pytest.raises(InvalidInput):
        await witness.add_checkpoint(
            1, log.proof(1, 2), Log(stranger, [b"a", b"b"]).note(2), _raw(key)
        )


async def test_asked_from_another_size_the_witness_says_its_own(witness: Witness) -> None:
    key = Ed25519PrivateKey.generate()
    log = Log(key, [bytes([i]) for i in range(6)])
    assert (await witness.add_checkpoint(0, [], log.note(4), _raw(key))).size == 4
    stale = await witness.add_checkpoint(2, log.proof(2, 6), log.note(6), _raw(key))
    assert (stale.line, stale.size) == ("", 4)
    assert (await witness.add_checkpoint(4, log.proof(4, 6), log.note(6), _raw(key))).line


async def test_the_witness_keeps_a_copy_of_each_cosigned_checkpoint(
    witness: Witness, tmp_path: Path
) -> None:
    key = Ed25519PrivateKey.generate()
    log = Log(key, [b"a", b"b", b"c"])
    first = await witness.add_checkpoint(0, [], log.note(2), _raw(key))
    await witness.add_checkpoint(2, log.proof(2, 3), log.note(3), _raw(key))
    database = Database(f"sqlite:///{tmp_path / 'signer.db'}", tables.metadata)
    copies = await database.read(
        lambda c: c.execute(
            select(tables.witnessed.c.size, tables.witnessed.c.checkpoint).order_by(
                tables.witnessed.c.size
            )
        ).all()
    )
    assert [size for size, _ in copies] == [2, 3]
    assert copies[0][1] == log.note(2).decode() + first.line
