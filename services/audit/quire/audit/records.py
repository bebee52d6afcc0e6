"""What audit exports of its own records (``quire.export.v1``), for the
operator tools that check them against the hashed bytes (``quire check``)
and retire what outlived its period (``quire retention``).

- ``LEDGER_ROWS``: every ledger row as stored, by sequence: the columns are
  claims, the event bytes and the hashes what they are checked against, so
  a value that is not text (or bytes) is left unset, never made up;
- ``CHAIN_HEADS``, ``JOB_INDEX``, ``REFUSED_EVENTS``: the head row of each
  tenant's chain, the job index, the events kept out of the ledger;
- ``CHECKPOINT_FILES``: the signed checkpoint files as written, by name;
  ``CHECKPOINT_KEY``: the public key they are verified against.

``collections`` serves the running process (its checkpoint key as loaded);
``stored_collections`` is the ``quire.records`` entry point a stopped
stack's export uses (``quire.storedexport``): it reads the key file where
audit keeps it, and makes none when there is none.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from sqlalchemy import Connection, select

from quire.audit import tables
from quire.audit.config import AuditSettings
from quire.audit.verification import ledger_rows
from quire.database import as_utc
from quire.export.v1 import export_service_pb2 as pb
from quire.exportrecords import CollectionReader, Collections, Reader, Rows
from quire.paging import Position, keyset_after
from quire.settings import ServiceSettings
from quire.signingkeyfiles import ed25519_key

__all__ = ["collections", "stored_collections"]

SERVICE = "audit"
LEDGER_PAGE = 500
"""Ledger rows per page at most: each carries its event's bytes."""
CHECKPOINT_PAGE = 200
KEY_POSITION: Position = ("checkpoint-key",)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _bytes(value: object) -> bytes | None:
    return bytes(value) if isinstance(value, bytes | bytearray | memoryview) else None


def _ledger_row(row: Any) -> pb.Record:
    return pb.Record(
        ledger_row=pb.LedgerRow(
            sequence=row.sequence,
            event_id=_text(row.event_id),
            job=_text(row.job),
            tenant=_text(row.tenant),
            from_state=_text(row.from_state),
            to_state=_text(row.to_state),
            reason_code=_text(row.reason_code),
            event=_bytes(row.event),
            prev_hash=_text(row.prev_hash),
            entry_hash=_text(row.entry_hash),
        )
    )


def _ledger(connection: Connection, after: Position | None, limit: int) -> Rows:
    start = after[0] if after else 0
    rows = ledger_rows(connection, after=start if isinstance(start, int) else 0, limit=limit)
    return [((row.sequence,), _ledger_row(row)) for row in rows]


def _chain_heads(connection: Connection, after: Position | None, limit: int) -> Rows:
    table = tables.chain_heads
    query = select(table).order_by(table.c.tenant).limit(limit)
    where = keyset_after([table.c.tenant], after)
    rows = connection.execute(query if where is None else query.where(where))
    return [
        (
            (row.tenant,),
            pb.Record(
                chain_head=pb.ChainHeadRow(
                    tenant=row.tenant, head_hash=_text(row.head_hash), length=int(row.length)
                )
            ),
        )
        for row in rows
    ]


def _index_row(row: Any) -> pb.Record:
    count = row.item_count
    return pb.Record(
        job_index=pb.JobIndexRow(
            job=str(row.job),
            tenant=_text(row.tenant),
            state=_text(row.state),
            reason_code=_text(row.reason_code),
            item_count=count if isinstance(count, int) and not isinstance(count, bool) else None,
            manifest_digest=_text(row.manifest_digest),
            output_digest=_text(row.output_digest),
            ruleset_version=_text(row.ruleset_version),
            key_version=_text(row.key_version),
        )
    )


def _job_index(connection: Connection, after: Position | None, limit: int) -> Rows:
    table = tables.jobs
    query = select(table).order_by(table.c.job).limit(limit)
    where = keyset_after([table.c.job], after)
    rows = connection.execute(query if where is None else query.where(where))
    return [((str(row.job),), _index_row(row)) for row in rows]


def _refused(connection: Connection, after: Position | None, limit: int) -> Rows:
    table = tables.refused_events
    query = (
        select(
            table.c.event_id,
            table.c.job,
            table.c.producer,
            table.c.kind,
            table.c.to_state,
            table.c.refused_at,
        )
        .order_by(table.c.event_id)
        .limit(limit)
    )
    where = keyset_after([table.c.event_id], after)
    rows = connection.execute(query if where is None else query.where(where))
    found: Rows = []
    for row in rows:
        record = pb.RefusedEvent(
            event_id=row.event_id,
            job=str(row.job),
            producer=str(row.producer),
            kind=str(row.kind),
            to_state=str(row.to_state),
        )
        record.refuse_time.FromDatetime(as_utc(row.refused_at))
        found.append(((row.event_id,), pb.Record(refused_event=record)))
    return found


def _checkpoint_files(folder: Path) -> Reader:
    def read(_connection: Connection, after: Position | None, limit: int) -> Rows:
        names = sorted(path.name for path in folder.glob("*.json"))
        later = [name for name in names if after is None or name > str(after[0])][:limit]
        return [
            (
                (name,),
                pb.Record(
                    checkpoint_file=pb.CheckpointFile(
                        name=name, content=(folder / name).read_bytes()
                    )
                ),
            )
            for name in later
        ]

    return read


def _checkpoint_key(public_pem: str | None) -> Reader:
    def read(_connection: Connection, after: Position | None, _limit: int) -> Rows:
        if public_pem is None or after is not None:
            return []
        key = pb.CheckpointPublicKey(public_key_pem=public_pem)
        return [(KEY_POSITION, pb.Record(checkpoint_key=key))]

    return read


def collections(checkpoint_folder: Path, public_pem: str | None) -> Collections:
    """Audit's collections: its database's, its checkpoint files in
    ``checkpoint_folder`` and its checkpoint key (None: it has none yet)."""
    return Collections(
        SERVICE,
        {
            pb.COLLECTION_LEDGER_ROWS: CollectionReader(_ledger, LEDGER_PAGE, numbered=True),
            pb.COLLECTION_CHAIN_HEADS: CollectionReader(_chain_heads),
            pb.COLLECTION_JOB_INDEX: CollectionReader(_job_index),
            pb.COLLECTION_REFUSED_EVENTS: CollectionReader(_refused),
            pb.COLLECTION_CHECKPOINT_FILES: CollectionReader(
                _checkpoint_files(checkpoint_folder), CHECKPOINT_PAGE
            ),
            pb.COLLECTION_CHECKPOINT_KEY: CollectionReader(_checkpoint_key(public_pem)),
        },
    )


def _stored_public_pem(key_file: Path) -> str | None:
    """The public half of the checkpoint key in ``key_file``; None when audit never made one."""
    if not key_file.is_file():
        return None
    key = ed25519_key(key_file, variable="QUIRE_AUDIT_CHECKPOINT_KEY_FILE", generate=False)
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def stored_collections(env: Mapping[str, str]) -> Collections:
    """The ``quire.records`` entry point: audit's collections as its
    settings in ``env`` place them, read without writing anything."""
    directory = ServiceSettings.from_env(SERVICE, env).service_dir
    key_file = AuditSettings.from_env(env).checkpoint_key_file
    return collections(
        directory / "checkpoints",
        _stored_public_pem(key_file or directory / "keys" / "checkpoint.key"),
    )
