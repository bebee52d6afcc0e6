"""What the invariant checker reads of the assembler's and the signer's own
records, to tell where each signed artifact came from.

- The assembler commits, in one transaction, its ``assemblies`` row (the
  packet's blob key, sha256 and size) and its lease's outcome, whose
  ``next_task.assembled`` names the same packet for the signer.
- The signer's ``signatures`` row names the artifact, not what was signed.
  What it signed is in its lease's committed outcome: ``next_task`` is the
  sign task it acted on, ``assembled`` included (``quire.leases`` keeps the
  ``StageOutcome`` with the lease so a redelivery republishes it).

Lease rows are keyed ``jobs/{job}`` or ``jobs/{job}.g<generation>``
(``quire.leases.lease_key``); every generation's outcome is read.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from google.protobuf.message import DecodeError
from sqlalchemy import Connection, Table, select

from quire.assembler import tables as assembler_tables
from quire.type import queue_pb2

__all__ = ["PacketRef", "read_assemblies", "read_handed_packets"]


@dataclass(frozen=True)
class PacketRef:
    """An assembled packet as one record names it."""

    blob_key: str
    sha256: str
    size_bytes: int = 0
    """Known from the assembler's row; 0 where a task names the packet."""

    def same_packet(self, other: PacketRef) -> bool:
        return (self.blob_key, self.sha256) == (other.blob_key, other.sha256)


def _job_of_lease(key: str) -> str:
    job, _, _generation = key.partition(".g")
    return job


def read_assemblies(connection: Connection) -> dict[str, PacketRef]:
    """The assembler's ``assemblies`` rows: the packet committed for each job."""
    table = assembler_tables.assemblies
    rows = connection.execute(
        select(table.c.job, table.c.blob_key, table.c.sha256, table.c.size_bytes)
    )
    return {row.job: PacketRef(row.blob_key, row.sha256, int(row.size_bytes)) for row in rows}


def read_handed_packets(connection: Connection, leases: Table) -> dict[str, list[PacketRef]]:
    """The packet named by ``next_task.assembled`` of each committed outcome
    in a stage's lease table, by job; outcomes that hand nothing on, or name
    no packet, are left out. An outcome that does not decode names the empty
    packet, which matches no record."""
    handed: dict[str, list[PacketRef]] = defaultdict(list)
    rows = connection.execute(
        select(leases.c.job, leases.c.outcome).where(leases.c.outcome.is_not(None))
    )
    for row in rows:
        try:
            outcome = queue_pb2.StageOutcome.FromString(row.outcome)
        except DecodeError:
            handed[_job_of_lease(row.job)].append(PacketRef("", ""))
            continue
        if outcome.HasField("next_task") and outcome.next_task.HasField("assembled"):
            packet = outcome.next_task.assembled
            handed[_job_of_lease(row.job)].append(PacketRef(packet.blob_key, packet.sha256))
    return dict(handed)
