"""Having each tenant's latest checkpoint cosigned by the witness
(``quire.witness.v1.WitnessService``, in the signer's process).

After every checkpoint round, audit sends each tenant's newest checkpoint
that is not yet cosigned, with an RFC 9162 consistency proof from the size
the witness last cosigned, and keeps the witness's cosignature line in a
file of its own beside the checkpoint (``<length>-<tenant>.cosig``, created
once). When the witness holds another size than audit thought (audit's
folder was restored, or another replica asked first) it says so, and audit
asks once more with a proof from that size. A refusal — the history no
longer extends what the witness cosigned — is logged, counted with the
checkpoint refusals (``quire_audit_checkpoints_refused_total``, alert
``QuireCheckpointRefused``) and tried again next round; nothing else waits
on the witness.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from quire.audit.tenantlog import tenant_entries, tenant_tree
from quire.database import Database
from quire.privatefiles import write_private
from quire.witness.v1 import witness_service_pb2 as pb
from quire.witness.v1 import witness_service_pb2_grpc as pb_grpc

__all__ = ["Witnessing", "cosignature_path", "cosignature_of"]

log = logging.getLogger(__name__)

TIMEOUT_SECONDS = 10.0


def cosignature_path(folder: Path, tenant: str, length: int) -> Path:
    return folder / f"{length:012d}-{tenant}.cosig"


def cosignature_of(folder: Path, tenant: str, length: int) -> str:
    """The witness's cosignature line for a checkpoint, or "" when there is none
    (or the file holds no whole line)."""
    try:
        line = cosignature_path(folder, tenant, length).read_text()
    except (OSError, UnicodeDecodeError):
        return ""
    return line if line.startswith("\u2014 ") and line.endswith("\n") else ""


def _witnessed_size(folder: Path, tenant: str) -> int:
    sizes = [int(path.name.split("-", 1)[0]) for path in folder.glob(f"*-{tenant}.cosig")]
    return max(sizes, default=0)


class Witnessing:
    """Asks the witness to cosign each tenant's newest checkpoint, keeping each
    cosignature in a file beside it; a refusal is logged and counted, never waited on."""

    def __init__(
        self,
        witness: pb_grpc.WitnessServiceStub,
        database: Database,
        log_public_key: bytes,
        refused: Callable[[], None] | None = None,
    ) -> None:
        self._witness = witness
        self._db = database
        self._log_key = log_public_key
        self._refused = refused

    async def round(self, folder: Path, documents: list[dict[str, Any]]) -> int:
        """Have each tenant's newest checkpoint in ``documents`` cosigned;
        returns how many were."""
        latest: dict[str, dict[str, Any]] = {}
        for document in documents:
            checkpoint = document["checkpoint"]
            held = latest.get(checkpoint["tenant"])
            if document.get("note") and (
                held is None or checkpoint["length"] > held["checkpoint"]["length"]
            ):
                latest[checkpoint["tenant"]] = document
        cosigned = 0
        for tenant, document in sorted(latest.items()):
            length = int(document["checkpoint"]["length"])
            if cosignature_of(folder, tenant, length):
                continue
            try:
                line = await self._ask(tenant, length, document["note"], folder)
            except grpc.aio.AioRpcError as error:
                if error.code() is grpc.StatusCode.FAILED_PRECONDITION:
                    log.error(
                        "the witness refused a checkpoint: the ledger no longer extends"
                        " what it cosigned",
                        extra={"tenant": tenant},
                    )
                    if self._refused is not None:
                        self._refused()
                    continue
                log.warning("witness unavailable (%s); next round", error.code().name)
                return cosigned
            if line:
                await asyncio.to_thread(_keep, cosignature_path(folder, tenant, length), line)
                cosigned += 1
        return cosigned

    async def _ask(self, tenant: str, length: int, note: str, folder: Path) -> str:
        witnessed = _witnessed_size(folder, tenant)
        for _ in range(2):  # the size audit knows of, then the witness's own
            if witnessed > length:
                log.error(
                    "the witness holds a larger checkpoint than audit's newest",
                    extra={"tenant": tenant},
                )
                if self._refused is not None:
                    self._refused()
                return ""
            proof = await self._proof(tenant, witnessed, length)
            reply = await self._witness.AddCheckpoint(
                pb.AddCheckpointRequest(
                    old_size=witnessed,
                    consistency_proof=proof,
                    checkpoint=note.encode(),
                    log_public_key=self._log_key,
                ),
                timeout=TIMEOUT_SECONDS,
            )
            if reply.line:
                return str(reply.line)
            witnessed = int(reply.size)
        return ""

    async def _proof(self, tenant: str, old: int, new: int) -> list[bytes]:
        if not 0 < old < new:
            return []
        return await self._db.read(
            lambda c: tenant_tree(tenant_entries(c, tenant, new)).consistency_proof(old, new)
        )


def _keep(path: Path, line: str) -> None:
    """The line in a file of its own, created whole (written aside, then
    linked into place) or not at all; a leftover partial file is replaced."""
    if not write_private(path, line.encode(), exclusive=True) and not cosignature_of(
        path.parent, *_named(path)
    ):
        write_private(path, line.encode())


def _named(path: Path) -> tuple[str, int]:
    length, _, tenant = path.name.removesuffix(".cosig").partition("-")
    return tenant, int(length)
