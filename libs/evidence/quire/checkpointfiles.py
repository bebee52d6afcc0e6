"""Audit's checkpoint files, as anyone holding audit's public key reads them.

Audit writes one JSON document per signed chain head
(``<length:012d>-<tenant>.json``): ``checkpoint`` (the tenant, the chain's
length and head hash, the time, and the length of the tenant's checkpoint
before it), ``signature`` (Ed25519 over the checkpoint's canonical JSON)
and ``note`` (the tenant's log head as a C2SP tlog-checkpoint signed note,
origin ``quire/<tenant>``: ``quire.checkpoint``). Audit's own verification
and the operator tools' (``quire check``, over what audit exports) read
them here, by the same rules: a document that does not verify as it
stands is refused, never trusted in part.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from quire.checkpoint import Checkpoint as LogHead
from quire.checkpoint import open_checkpoint

__all__ = ["ChainCheckpoint", "CheckpointFiles", "log_origin", "read_checkpoint_documents"]


def log_origin(tenant: str) -> str:
    """The origin line of a tenant's log head: ``quire/<tenant>``."""
    return f"quire/{tenant}"


@dataclass(frozen=True)
class ChainCheckpoint:
    """One tenant's chain head as audit signs it: ``payload`` is the signed bytes."""

    tenant: str
    length: int
    head_hash: str
    time: str
    previous_length: int = 0
    """The length of the tenant's checkpoint before this one; 0 for its first."""

    def fields(self) -> dict[str, Any]:
        """What is signed: every field, ``previous_length`` only when there is one."""
        found = asdict(self)
        if not self.previous_length:
            del found["previous_length"]
        return found

    def payload(self) -> bytes:
        return json.dumps(self.fields(), sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class CheckpointFiles:
    """What a checkpoint folder holds, as audit's key vouches for it."""

    checkpoints: list[ChainCheckpoint]
    """Chain heads whose signature verifies."""
    heads: list[tuple[str, LogHead]]
    """(tenant, log head) of every signed tlog-checkpoint note that verifies."""
    refused: list[str]
    """Files that are not checkpoints signed by audit's key (edited, or forged)."""
    missing: list[tuple[str, int]] = field(default_factory=list)
    """(tenant, length) of checkpoints a later one names as its predecessor
    that the folder does not hold (deleted)."""

    def latest_times(self) -> dict[str, datetime]:
        """Each tenant's latest checkpoint time (times that do not parse are
        left out: verification reports them)."""
        latest: dict[str, datetime] = {}
        for checkpoint in self.checkpoints:
            try:
                when = datetime.fromisoformat(checkpoint.time)
            except ValueError:
                continue
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            if checkpoint.tenant not in latest or when > latest[checkpoint.tenant]:
                latest[checkpoint.tenant] = when
        return latest

    def latest_heads(self) -> dict[str, LogHead]:
        """Each tenant's largest signed log head."""
        latest: dict[str, LogHead] = {}
        for tenant, head in self.heads:
            if tenant not in latest or head.size > latest[tenant].size:
                latest[tenant] = head
        return latest


def _opened(data: bytes, key: Ed25519PublicKey) -> tuple[ChainCheckpoint, LogHead | None]:
    """One document's chain head and log head; raises unless both verify."""
    document = json.loads(data)
    checkpoint = ChainCheckpoint(**document["checkpoint"])
    key.verify(base64.b64decode(document["signature"]), checkpoint.payload())
    note = document.get("note")
    if note is None:
        return checkpoint, None
    head = open_checkpoint(note.encode(), log_origin(checkpoint.tenant), key)
    if head.size != checkpoint.length:
        raise ValueError("the note and the chain head disagree on the size")
    return checkpoint, head


def read_checkpoint_documents(
    documents: Iterable[tuple[str, bytes]], trusted_public_pem: str
) -> CheckpointFiles:
    """The (name, bytes) of each file of a checkpoint folder, in name order,
    as ``trusted_public_pem`` (audit's key) vouches for them."""
    key = serialization.load_pem_public_key(trusted_public_pem.encode())
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("not an Ed25519 public key")
    found = CheckpointFiles([], [], [])
    for name, data in documents:
        try:
            checkpoint, head = _opened(data, key)
        except Exception:  # noqa: BLE001 - unreadable, bad signature or note: not audit's
            found.refused.append(name)
            continue
        if head is not None:
            found.heads.append((checkpoint.tenant, head))
        found.checkpoints.append(checkpoint)
    held = {(c.tenant, c.length) for c in found.checkpoints}
    found.missing.extend(
        sorted(
            {
                (c.tenant, c.previous_length)
                for c in found.checkpoints
                if c.previous_length and (c.tenant, c.previous_length) not in held
            }
        )
    )
    return found
