"""What the invariant checker reads of the assembler's and the signer's own
records, as they export them, to tell where each signed artifact came from.

- The assembler commits, in one transaction, its packet of the job (the
  packet's blob key, sha256 and size: ``COLLECTION_PACKETS``) and its
  lease's outcome, whose ``next_task.assembled`` names the same packet for
  the signer.
- The signer's signature record names the artifact, not what was signed.
  What it signed is in its lease's committed outcome: ``next_task`` is the
  sign task it acted on, ``assembled`` included (``quire.leases`` keeps the
  ``StageOutcome`` with the lease so a redelivery republishes it).

Leases are keyed ``jobs/{job}`` or ``jobs/{job}.g<generation>``
(``quire.leases.lease_key``); every generation's outcome is read.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from quire.export.v1 import export_service_pb2 as pb
from quire.type import queue_pb2

__all__ = ["PacketRef", "read_assemblies", "read_handed_packets"]


@dataclass(frozen=True)
class PacketRef:
    """An assembled packet as one record names it."""

    blob_key: str
    sha256: str
    size_bytes: int = 0
    """Known from the assembler's record; 0 where a task names the packet."""

    def same_packet(self, other: PacketRef) -> bool:
        return (self.blob_key, self.sha256) == (other.blob_key, other.sha256)


def _job_of_lease(key: str) -> str:
    job, _, _generation = key.partition(".g")
    return job


def read_assemblies(records: Iterable[pb.Record]) -> dict[str, PacketRef]:
    """The assembler's packets: the one committed for each job."""
    return {
        r.packet.job: PacketRef(r.packet.blob_key, r.packet.sha256, r.packet.size_bytes)
        for r in records
    }


def read_handed_packets(records: Iterable[pb.Record]) -> dict[str, list[PacketRef]]:
    """The packet named by ``next_task.assembled`` of each committed outcome
    a stage exported, by job; outcomes that hand nothing on, or name no
    packet, are left out. An outcome that does not decode names the empty
    packet, which matches no record."""
    handed: dict[str, list[PacketRef]] = defaultdict(list)
    for record in records:
        lease = record.lease_outcome
        try:
            outcome = queue_pb2.StageOutcome.FromString(lease.outcome)
        except DecodeError:
            handed[_job_of_lease(lease.lease)].append(PacketRef("", ""))
            continue
        if outcome.HasField("next_task") and outcome.next_task.HasField("assembled"):
            packet = outcome.next_task.assembled
            handed[_job_of_lease(lease.lease)].append(PacketRef(packet.blob_key, packet.sha256))
    return dict(handed)
