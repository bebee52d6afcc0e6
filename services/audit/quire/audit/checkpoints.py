"""Checkpoints: the chain heads, signed with audit's own key and written out
of the database (files in the data directory, and the events stream), so a
later rewrite of the database is detectable against copies held elsewhere.

A checkpoint is never signed over a rewrite: before signing a tenant's new
head, audit proves the stored log consistent with the last head it signed
(an RFC 9162 consistency proof from the old size to the new one, checked
against the old signed root). A log that no longer extends it gets nothing
signed, and the refusal is counted (``quire_audit_checkpoints_refused_total``)
and alerted on; the honest checkpoint stays, so verification keeps failing.
Checkpoint files are created once and never overwritten, a head that has not
grown is not signed again, and each names the size of the one before it
(``previous_length``), so a missing checkpoint is a finding.

Each document also carries ``note``: the tenant's log head as a C2SP
tlog-checkpoint signed note (origin ``quire/<tenant>``, the RFC 9162 root over
the tenant's entries), which evidence proves entries against
(``docs/evidence-format.md``)."""

from __future__ import annotations

import asyncio
import base64
import glob
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from sqlalchemy import Connection, select

from quire.audit import tables
from quire.audit.tenantlog import origin, tenant_entries, tenant_tree
from quire.audit.witnessing import Witnessing, cosignature_of
from quire.checkpoint import Checkpoint as LogHead
from quire.checkpoint import sign_checkpoint
from quire.checkpointfiles import ChainCheckpoint as Checkpoint
from quire.checkpointfiles import CheckpointFiles, read_checkpoint_documents
from quire.cosignature import cosigned_note
from quire.database import Database
from quire.errors import DataLoss
from quire.merkle import MerkleTree, ProofError, verify_consistency
from quire.privatefiles import write_private
from quire.signingkeyfiles import ed25519_key

log = logging.getLogger(__name__)

__all__ = [
    "Checkpoint",
    "CheckpointFiles",
    "CheckpointSigner",
    "CheckpointBook",
    "checkpoint_documents",
    "load_checkpoints",
    "read_checkpoint_files",
]


@dataclass(frozen=True)
class CheckpointRound:
    """What one round of checkpoints did: the ones it signed, and the tenants it
    refused to sign for."""

    documents: list[dict[str, Any]]
    """Newly signed checkpoints."""
    inconsistent: list[str]
    """Tenants whose stored log does not extend their last signed head: nothing signed."""


class CheckpointSigner:
    """Audit's checkpoint key: Ed25519, from ``key_file`` when configured (a
    mounted Secret every replica shares), else generated at first start in
    ``directory`` (mode 0600)."""

    def __init__(
        self,
        directory: Path,
        key_file: Path | None = None,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.directory = directory
        self._clock = clock
        directory.mkdir(parents=True, exist_ok=True)
        loaded = ed25519_key(
            key_file or directory / "checkpoint.key",
            variable="QUIRE_AUDIT_CHECKPOINT_KEY_FILE",
            generate=key_file is None,
        )
        self._key = loaded
        self.public_raw = self._key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.public_pem = (
            self._key.public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            .decode()
        )

    def take(self, connection: Connection) -> list[dict[str, Any]]:
        """Sign every chain head as it stands, with no earlier head to extend."""
        return self.take_round(connection, {}).documents

    def take_round(
        self,
        connection: Connection,
        last: Mapping[str, LogHead],
        times: Mapping[str, datetime] | None = None,
        *,
        tenant: str | None = None,
    ) -> CheckpointRound:
        """Sign each tenant's head that grew since ``last`` (its last signed log
        head), once the stored log is proved to extend it. ``times``: each
        tenant's latest checkpoint time; a new one is never dated earlier
        (``stamp``). ``tenant``: that tenant's head only."""
        now = self._clock()
        times = times or {}
        documents: list[dict[str, Any]] = []
        inconsistent: list[str] = []
        heads = select(tables.chain_heads)
        if tenant is not None:
            heads = heads.where(tables.chain_heads.c.tenant == tenant)
        for head in connection.execute(heads).all():
            size, before = int(head.length), last.get(head.tenant)
            if not size:
                continue
            try:
                tree = tenant_tree(tenant_entries(connection, head.tenant, size))
            except DataLoss:
                # Nothing is signed over a damaged entry; verify reports it.
                log.warning(
                    "tenant log damaged: no checkpoint signed", extra={"tenant": head.tenant}
                )
                continue
            if before is not None and not extends(tree, size, before):
                inconsistent.append(head.tenant)
                continue
            if before is not None and before.size == size:
                continue  # nothing new to sign
            note = sign_checkpoint(LogHead(origin(head.tenant), size, tree.root(size)), self._key)
            checkpoint = Checkpoint(
                head.tenant,
                size,
                head.head_hash,
                stamp(now, times.get(head.tenant)).isoformat(),
                before.size if before else 0,
            )
            signature = self._key.sign(checkpoint.payload())
            documents.append(
                {
                    "checkpoint": checkpoint.fields(),
                    "signature": base64.b64encode(signature).decode(),
                    "public_key": self.public_pem,
                    "note": note.decode(),
                }
            )
        return CheckpointRound(documents, inconsistent)

    def write(self, documents: list[dict[str, Any]], folder: Path) -> None:
        """Each document as a new file, whole or not at all: written and
        fsynced beside its name, then linked to it, so a reader (an export,
        another replica, ``quire verify``) never sees it half written and a
        crash never leaves a torn file under the name. An existing file is
        never replaced."""
        folder.mkdir(parents=True, exist_ok=True)
        for document in documents:
            checkpoint = document["checkpoint"]
            name = _file_name(checkpoint["tenant"], checkpoint["length"])
            data = json.dumps(document, sort_keys=True).encode()
            if not write_private(folder / name, data, exclusive=True):
                log.warning(
                    "checkpoint file exists; kept as it is", extra={"tenant": checkpoint["tenant"]}
                )


def stamp(now: datetime, previous: datetime | None) -> datetime:
    """A new checkpoint's time: audit's clock, never earlier than the
    tenant's checkpoint before it. A clock set back (by an operator, or a
    skew corrected) would otherwise date a longer log before a shorter one;
    verification reports such a pair (``checkpoint_time``)."""
    if previous is None:
        return now
    if previous.tzinfo is None:
        previous = previous.replace(tzinfo=UTC)
    if now < previous:
        log.warning(
            "audit's clock reads %.0f s before the last checkpoint; dated at that one's time",
            (previous - now).total_seconds(),
        )
        return previous
    return now


def _file_name(tenant: str, length: int) -> str:
    return f"{length:012d}-{tenant}.json"


def _tenant_of(name: str) -> str:
    """The tenant a checkpoint file is named for (``_file_name``)."""
    length, _, rest = name.partition("-")
    return rest.removesuffix(".json") if length.isdigit() else ""


def extends(tree: MerkleTree, size: int, before: LogHead) -> bool:
    """Whether the first ``size`` leaves of ``tree`` extend the signed head
    ``before``: an RFC 9162 consistency proof from ``before.size`` to ``size``,
    made from the stored log and checked against the signed old root."""
    if before.size > size:
        return False
    new_root = tree.root(size)
    proof = tree.consistency_proof(before.size, size) if 0 < before.size < size else []
    try:
        verify_consistency(before.size, size, before.root_hash, new_root, proof)
    except ProofError:
        return False
    return True


def read_checkpoint_files(
    folder: Path, trusted_public_pem: str, tenant: str | None = None
) -> CheckpointFiles:
    """The checkpoint files in ``folder`` (of ``tenant``'s log only, when
    named) as audit's key vouches for them (``quire.checkpointfiles``)."""
    files = read_checkpoint_documents(checkpoint_documents(folder, tenant), trusted_public_pem)
    if tenant is not None:  # a file named for one tenant may hold another's
        files.checkpoints[:] = [c for c in files.checkpoints if c.tenant == tenant]
        files.heads[:] = [(t, head) for t, head in files.heads if t == tenant]
        files.missing[:] = [(t, length) for t, length in files.missing if t == tenant]
    return files


def checkpoint_documents(folder: Path, tenant: str | None = None) -> list[tuple[str, bytes]]:
    """(name, bytes) of every checkpoint file in ``folder``, in name order;
    with ``tenant``, only the files named for that tenant's log, so that
    reading one tenant's checkpoints costs what that tenant has, not what
    the whole ledger has."""
    if tenant is None:
        paths = folder.glob("*.json")
    else:
        paths = (
            path
            for path in folder.glob(f"*-{glob.escape(tenant)}.json")
            if _tenant_of(path.name) == tenant
        )
    return [(path.name, path.read_bytes()) for path in sorted(paths)]


def load_checkpoints(
    folder: Path, trusted_public_pem: str, tenant: str | None = None
) -> list[Checkpoint]:
    """Checkpoints signed by audit's key; anything else is ignored, not trusted."""
    return read_checkpoint_files(folder, trusted_public_pem, tenant).checkpoints


class CheckpointBook:
    """Audit's checkpoints: taken every ``interval`` seconds and at shutdown,
    written as signed files and published on the events stream."""

    def __init__(
        self,
        database: Database,
        signer: CheckpointSigner,
        folder: Path,
        refused: Callable[[], None] | None = None,
        witnessing: Witnessing | None = None,
    ) -> None:
        self._db = database
        self._signer = signer
        self.folder = folder
        self._refused = refused
        """Counts a tenant whose log no longer extends its last checkpoint."""
        self._witnessing = witnessing
        """Has each tenant's newest checkpoint cosigned by the witness."""

    async def take(
        self,
        publish: Callable[[bytes], Awaitable[None]] | None = None,
        *,
        tenant: str | None = None,
    ) -> int:
        """Sign every tenant's head that grew (``tenant``'s only, when named:
        an evidence export reads and proves that tenant's log, not the
        whole ledger); the number of checkpoints signed."""
        files = await asyncio.to_thread(self.files, tenant)
        last, times = files.latest_heads(), files.latest_times()
        taken = await self._db.read(
            lambda c: self._signer.take_round(c, last, times, tenant=tenant)
        )
        for tenant in taken.inconsistent:
            log.error(
                "a tenant's ledger no longer extends its last checkpoint: nothing signed",
                extra={"tenant": tenant},
            )
            if self._refused is not None:
                self._refused()
        documents = taken.documents
        await asyncio.to_thread(self._signer.write, documents, self.folder)
        if publish is not None:
            for document in documents:
                await publish(json.dumps(document, sort_keys=True).encode())
        if self._witnessing is not None:
            newest = await asyncio.to_thread(self._unwitnessed, last, documents)
            await self._witnessing.round(self.folder, newest)
        return len(documents)

    def _unwitnessed(
        self, last: Mapping[str, LogHead], signed: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Each tenant's newest checkpoint: the one just signed, else its last
        one when the witness has not cosigned it yet (read from its file,
        which ``files`` verified), so a round reads no other file."""
        newest = list(signed)
        fresh = {d["checkpoint"]["tenant"] for d in signed}
        for tenant, head in last.items():
            if tenant in fresh or cosignature_of(self.folder, tenant, head.size):
                continue
            path = self.folder / _file_name(tenant, head.size)
            try:
                newest.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue  # gone since: verification reports it
        return newest

    def load(self, tenant: str | None = None) -> list[Checkpoint]:
        return load_checkpoints(self.folder, self._signer.public_pem, tenant)

    def files(self, tenant: str | None = None) -> CheckpointFiles:
        return read_checkpoint_files(self.folder, self._signer.public_pem, tenant)

    @property
    def public_pem(self) -> str:
        return self._signer.public_pem

    def documents(self, tenant: str | None = None) -> list[dict[str, Any]]:
        """The signed checkpoint documents that verify with audit's key (of
        ``tenant``'s log only, when named), each note with the witness's
        cosignature line when there is one (``witnessed``: True)."""
        found = []
        files = checkpoint_documents(self.folder, tenant)
        vouched = read_checkpoint_documents(files, self._signer.public_pem).checkpoints
        trusted = {(c.tenant, c.length, c.head_hash, c.time) for c in vouched}
        for _name, data in files:
            try:
                document = json.loads(data)
                c = document["checkpoint"]
            except (ValueError, KeyError, TypeError):
                continue  # not audit's: verification reports it
            if not isinstance(c, dict) or not isinstance(document, dict):
                continue
            if (c["tenant"], c["length"], c["head_hash"], c["time"]) in trusted:
                line = cosignature_of(self.folder, c["tenant"], c["length"])
                if line and document.get("note"):
                    document["note"] = cosigned_note(document["note"].encode(), line).decode()
                    document["witnessed"] = True
                found.append(document)
        return found

    async def every(
        self, seconds: float, publish: Callable[[bytes], Awaitable[None]] | None = None
    ) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await self.take(publish)
            except Exception:  # noqa: BLE001 - the next round tries again
                log.warning("checkpoint failed; will retry")
