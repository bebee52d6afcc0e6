"""Issue 21: ``SignerService.GetSignature`` returns what was recorded — the
PAdES level and the signer identity of the job's ledger entry, not empty
strings."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.signer.v1 import signer_service_pb2 as spb
from quire.signer.v1 import signer_service_pb2_grpc as sgrpc
from quire.stack.supervisor import StackInfo
from quire.testing.ledger import ledger_entries
from quire.testing.pdfs import write_text_pdf
from quire.tls import aio_channel

pytestmark = pytest.mark.stack


async def test_get_signature_returns_the_level_and_identity_the_ledger_records(
    stack, client: AdmissionClient, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    path = write_text_pdf(tmp_path / "signed.pdf", [f"signed {uuid.uuid4().hex}"])
    digest = (await client.upload(path)).sha256
    job = await client.wait((await client.submit([PacketItem("doc", digest)])).name, timeout=90)
    assert state_name(job.state) == "COMPLETED"

    signed = [
        entry.event
        for entry in await ledger_entries(stack.data_dir, job.name)
        if entry.event.signature_level or entry.event.signer_identity
    ]
    assert signed, "the ledger records the signing"
    recorded = signed[0]  # the signer's hand-off (COMMITTING); later entries repeat it
    assert {(e.signature_level, e.signer_identity) for e in signed} == {
        (recorded.signature_level, recorded.signer_identity)
    }
    assert recorded.signature_level in ("B-B", "B-T") and recorded.signer_identity

    info = StackInfo.read(stack.data_dir)
    async with aio_channel(info.endpoints["signer"], None) as channel:
        signature = await sgrpc.SignerServiceStub(channel).GetSignature(
            spb.GetSignatureRequest(job=job.name),
            metadata=bearer_metadata(info.operator_token()),
        )
    assert signature.signing.level == recorded.signature_level
    assert signature.signing.signer_identity == recorded.signer_identity
    assert signature.signing.key_version == recorded.key_version == job.key_version
    assert signature.signing.certificate_sha256 == recorded.certificate_sha256
    assert signature.artifact.sha256 == recorded.output_digest == job.output_digest
