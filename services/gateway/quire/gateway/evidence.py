"""A job's evidence over HTTP: the caller's own job's ledger entries with
their proofs, verifiable offline (``docs/evidence-format.md``).

The body is the document exactly as audit wrote it (admission's
``GetJobEvidence``), never parsed and serialized again here: a verifier
checks these bytes, and reads them strictly (no repeated member names).
Another tenant's job is a 404, like one that does not exist.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from quire.admission.v1 import admission_service_pb2 as pb
from quire.gateway.admission import Admission, admission_of
from quire.gateway.problems import problem_responses

__all__ = ["router", "Evidence"]

router = APIRouter(tags=["jobs"])
AdmissionDep = Annotated[Admission, Depends(admission_of)]
MAX_SIZE = 2**63 - 1


class EvidenceEntry(BaseModel):
    """One ledger entry of the job, with its inclusion proof against ``checkpoint``."""

    index: int = Field(description="The entry's leaf index in the tenant's log.")
    entry: str = Field(description="base64 of the entry's bytes (a TransitionEvent).")
    inclusion_proof: list[str] = Field(description="base64 hashes, RFC 9162 section 2.1.3.")
    occur_time: str | None = Field(default=None, description="Shown from the bytes (field 16).")
    attempt: int = Field(default=0, description="Shown from the bytes (field 7).")
    note: str = Field(default="", description="Shown from the bytes (field 19).")
    signer_identity: str = Field(default="", description="Shown from the bytes (field 20).")
    signature_level: str = Field(default="", description="Shown from the bytes (field 21).")
    key_version: str = Field(default="", description="Shown from the bytes (field 14).")


class EvidenceConsistency(BaseModel):
    """A proof that ``checkpoint`` extends an earlier checkpoint of the same log."""

    checkpoint: str = Field(description="The earlier signed checkpoint note.")
    proof: list[str] = Field(description="base64 hashes, RFC 9162 section 2.1.4.")


class Evidence(BaseModel):
    """The evidence document, format ``quire-evidence/1`` (docs/evidence-format.md section 6).

    Verify it offline with ``quire evidence verify FILE`` and keys taken from
    outside the file: audit's checkpoint key and the witness's verifier key."""

    format: str = Field(description='"quire-evidence/1".')
    origin: str = Field(description='The tenant\'s log: "quire/{tenant}".')
    job: str = Field(description='"jobs/{job_id}".')
    checkpoint: str = Field(description="A signed, witness-cosigned checkpoint note.")
    entries: list[EvidenceEntry]
    consistency: list[EvidenceConsistency] = Field(default_factory=list)
    public_key: str = Field(description="Audit's checkpoint key (PEM), for convenience only.")
    public_key_sha256: str = Field(description="Its pin; trust a pin from outside the file.")


@router.get(
    "/v1/pdf/job/get/{job_id}/evidence",
    response_class=Response,
    summary="The job's evidence: its ledger entries with proofs, verifiable offline.",
    responses={
        200: {
            "model": Evidence,
            "description": "The evidence document, as audit wrote it (verify these bytes).",
        },
        **problem_responses(),
    },
)
async def get_job_evidence(
    job_id: str,
    request: Request,
    admission: AdmissionDep,
    since_size: Annotated[
        int,
        Query(
            ge=0,
            le=MAX_SIZE,
            description="The size of a checkpoint of your log you kept from an earlier"
            " export: the evidence then also proves that it extends that one.",
        ),
    ] = 0,
) -> Response:
    evidence = await admission.unary(
        admission.stub.GetJobEvidence,
        pb.GetJobEvidenceRequest(name=f"jobs/{job_id}", since_size=since_size),
        request,
    )
    return Response(content=evidence.json, media_type="application/json")
