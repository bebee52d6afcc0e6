"""WitnessService: audit's checkpoints cosigned (``quire.signer.witness``),
and the witness's key published."""

from __future__ import annotations

import grpc

from quire.errors import FieldViolation, InvalidInput
from quire.grpcstatus import at_the_edge
from quire.reasons import ReasonCode
from quire.signer.witness import Witness
from quire.witness.v1 import witness_service_pb2 as pb
from quire.witness.v1 import witness_service_pb2_grpc as pb_grpc

__all__ = ["WitnessServicer"]

DOMAIN = "witness.quire"
MAX_NOTE_BYTES = 64 * 1024
MAX_PROOF_HASHES = 64
"""An RFC 9162 consistency proof of a log of up to 2^64 entries has fewer hashes."""


class WitnessServicer(pb_grpc.WitnessServiceServicer):
    """The WitnessService, in the signer's process: checks a request's shape, then
    asks the witness."""

    def __init__(self, witness: Witness) -> None:
        self._witness = witness

    @at_the_edge(DOMAIN)
    async def AddCheckpoint(  # noqa: N802 - gRPC method name
        self, request: pb.AddCheckpointRequest, context: grpc.aio.ServicerContext
    ) -> pb.Cosignature:
        if not request.checkpoint or len(request.checkpoint) > MAX_NOTE_BYTES:
            raise InvalidInput(
                ReasonCode.CHECKPOINT_SIGNATURE_INVALID,
                "a checkpoint note is required, at most 64 KiB",
                (FieldViolation("checkpoint", "empty or too large"),),
            )
        proof = list(request.consistency_proof)
        if len(proof) > MAX_PROOF_HASHES or any(len(h) != 32 for h in proof):
            raise InvalidInput(
                ReasonCode.CHECKPOINT_INCONSISTENT,
                "a consistency proof is at most 64 hashes of 32 bytes",
                (FieldViolation("consistency_proof", "malformed"),),
            )
        cosigned = await self._witness.add_checkpoint(
            request.old_size, proof, request.checkpoint, request.log_public_key
        )
        return pb.Cosignature(line=cosigned.line, size=cosigned.size)

    @at_the_edge(DOMAIN)
    async def GetWitnessKey(  # noqa: N802 - gRPC method name
        self, request: pb.GetWitnessKeyRequest, context: grpc.aio.ServicerContext
    ) -> pb.WitnessKey:
        return pb.WitnessKey(
            verifier_key=self._witness.verifier_key,
            name=self._witness.name,
            public_key_sha256=self._witness.public_key_sha256,
        )
