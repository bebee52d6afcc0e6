"""The witness: cosigns audit's checkpoints, in the spirit of C2SP
tlog-witness, from outside audit's trust boundary (the signer's process, its
own key, its own database).

For each tenant log (a checkpoint's origin) it holds the last checkpoint it
cosigned. A new one is cosigned only when the request's ``old_size`` is that
size and an RFC 9162 consistency proof shows the new checkpoint extends it,
and only when audit's checkpoint key signed it — the key the witness was
first given, or the one its operator pinned (``QUIRE_WITNESS_LOG_KEY_SHA256``).
The head moves forward by compare-and-set, and every cosigned checkpoint is
kept (``witnessed``), so a forked or rewritten history signed with audit's
own key, even a stolen one, gets no cosignature.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BeforeValidator
from pydantic_settings import SettingsConfigDict
from sqlalchemy import Connection, insert, select, update
from sqlalchemy.exc import IntegrityError

from quire.checkpoint import Checkpoint, open_checkpoint
from quire.cosignature import cosign, witness_key
from quire.database import Database
from quire.environment import Given, Settings
from quire.errors import FailedPrecondition, InvalidInput, InvalidSetting
from quire.merkle import ProofError, verify_consistency
from quire.reasons import ReasonCode
from quire.signednote import NoteError, parse_note
from quire.signer import tables
from quire.signingkeyfiles import ed25519_key

__all__ = ["Witness", "WitnessSettings", "Cosigned"]

log = logging.getLogger(__name__)

DEFAULT_NAME = "quire-witness"


def _lower(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


class WitnessSettings(Settings):
    """The witness's name and key, and audit's checkpoint key if its operator
    pinned one."""

    model_config = SettingsConfigDict(env_prefix="QUIRE_WITNESS_")

    name: str = DEFAULT_NAME
    """The key name on cosignature lines."""
    key_file: Path | None = None
    """The witness's Ed25519 private key (PEM), a Secret every signer replica
    mounts: ``witness.key`` in the signer's directory, generated on first
    start, unless set."""
    generate: Annotated[bool, Given()] = False
    """Whether ``key_file`` is the default one, generated on first start."""
    log_key_sha256: Annotated[str, BeforeValidator(_lower)] = ""
    """Audit's checkpoint key pinned by the operator; empty: the first one audit shows."""

    @classmethod
    def from_env(cls, service_dir: Path, env: Mapping[str, str]) -> WitnessSettings:
        configured = cls.read(env)
        if configured.key_file is not None:
            return configured
        return configured.model_copy(
            update={"key_file": service_dir / "witness.key", "generate": True}
        )


@dataclass(frozen=True)
class Cosigned:
    """The witness's answer: a cosignature line, and the size of the log it holds
    cosigned (the size to prove from, when the line is empty)."""

    line: str
    """The cosignature line; empty when ``old_size`` was not the witness's size."""
    size: int


def _raw(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _bad_signature(why: str) -> InvalidInput:
    return InvalidInput(ReasonCode.CHECKPOINT_SIGNATURE_INVALID, why)


def _inconsistent(why: str) -> FailedPrecondition:
    return FailedPrecondition(ReasonCode.CHECKPOINT_INCONSISTENT, why)


class Witness:
    """Cosigns audit's checkpoints, one tenant log at a time, only forward from the
    last one it cosigned and only under audit's key as the witness trusts it."""

    def __init__(self, database: Database, settings: WitnessSettings) -> None:
        self._db = database
        self._settings = settings
        if settings.key_file is None:
            raise InvalidSetting(
                "QUIRE_WITNESS_KEY_FILE", "a key file (from_env gives the default)"
            )
        self._key = ed25519_key(
            settings.key_file, variable="QUIRE_WITNESS_KEY_FILE", generate=settings.generate
        )
        self.name = settings.name
        self.verifier_key = witness_key(settings.name, self._key.public_key())
        self.public_key_sha256 = hashlib.sha256(_raw(self._key.public_key())).hexdigest()

    async def add_checkpoint(
        self, old_size: int, proof: list[bytes], note: bytes, log_public_key: bytes
    ) -> Cosigned:
        try:
            return await self._db.run(lambda c: self._add(c, old_size, proof, note, log_public_key))
        except IntegrityError:
            # Another replica made the log's first head meanwhile: say its size.
            origin = Checkpoint.parse(parse_note(note).text).origin
            return Cosigned("", await self._db.read(lambda c: self._held(c, origin)))

    def _log_key(self, connection: Connection, offered: bytes) -> Ed25519PublicKey:
        """Audit's checkpoint key as this witness trusts it."""
        if len(offered) != 32:
            raise _bad_signature("the log's key is a raw 32-byte Ed25519 key")
        pinned = self._settings.log_key_sha256
        if pinned:
            if hashlib.sha256(offered).hexdigest() != pinned:
                raise _bad_signature("the log's key is not the one the witness's operator pinned")
            return Ed25519PublicKey.from_public_bytes(offered)
        held = connection.execute(select(tables.witness_log_key.c.public_key)).scalar()
        if held is None:
            connection.execute(
                insert(tables.witness_log_key).values(
                    id=1, public_key=offered, first_seen_at=datetime.now(UTC)
                )
            )
            held = offered
        if bytes(held) != offered:
            raise _bad_signature("the log's key is not the one the witness first saw")
        return Ed25519PublicKey.from_public_bytes(bytes(held))

    def _add(
        self,
        connection: Connection,
        old_size: int,
        proof: list[bytes],
        note: bytes,
        log_public_key: bytes,
    ) -> Cosigned:
        key = self._log_key(connection, log_public_key)
        try:
            origin = Checkpoint.parse(parse_note(note).text).origin
            checkpoint = open_checkpoint(note, origin, key)
        except NoteError as error:
            raise _bad_signature(f"not a checkpoint signed by the log's key: {error}") from None
        heads = tables.witness_heads
        head = connection.execute(select(heads).where(heads.c.origin == origin)).first()
        held = int(head.size) if head is not None else 0
        if old_size != held:
            return Cosigned("", held)
        if checkpoint.size < held:
            raise _inconsistent("the checkpoint is smaller than the one the witness holds")
        if head is not None:
            try:
                verify_consistency(
                    held, checkpoint.size, bytes(head.root_hash), checkpoint.root_hash, proof
                )
            except ProofError:
                log.error("checkpoint refused: it does not extend the one the witness holds")
                raise _inconsistent(
                    "the checkpoint does not extend the one the witness cosigned"
                ) from None
        now = datetime.now(UTC)
        values = {"size": checkpoint.size, "root_hash": checkpoint.root_hash, "updated_at": now}
        if head is None:
            connection.execute(insert(heads).values(origin=origin, **values))
        else:
            moved = connection.execute(
                update(heads).where(heads.c.origin == origin, heads.c.size == held).values(**values)
            )
            if moved.rowcount != 1:  # another replica moved it meanwhile
                return Cosigned("", self._held(connection, origin))
        line = cosign(checkpoint.text(), self.name, self._key, int(time.time()))
        copies = tables.witnessed
        kept = connection.execute(
            select(copies.c.size).where(copies.c.origin == origin, copies.c.size == checkpoint.size)
        ).first()
        if kept is None:
            connection.execute(
                insert(copies).values(
                    origin=origin,
                    size=checkpoint.size,
                    root_hash=checkpoint.root_hash,
                    checkpoint=note.decode("utf-8") + line,
                    cosigned_at=now,
                )
            )
        return Cosigned(line, checkpoint.size)

    @staticmethod
    def _held(connection: Connection, origin: str) -> int:
        heads = tables.witness_heads
        size = connection.execute(select(heads.c.size).where(heads.c.origin == origin)).scalar()
        return int(size or 0)
