"""The signer killed (SIGKILL) after writing the signed artifact and before
committing or acknowledging: on redelivery it finds and reuses the artifact,
so the job has exactly one signed artifact and completes once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.blobstore import sha256_file
from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.stack.supervisor import Stack
from quire.testing.pdfs import write_text_pdf
from quire.testing.sealedstore import stack_store

pytestmark = [pytest.mark.stack, pytest.mark.fault]


async def test_a_signer_killed_after_writing_the_artifact_signs_nothing_twice(
    tmp_path: Path,
) -> None:
    faults = tmp_path / "faults"
    stack = Stack(
        tmp_path / "stack",
        env={
            "QUIRE_FAULTS": "signer.after_artifact",
            "QUIRE_FAULTS_DIR": str(faults),
            "QUIRE_ACK_WAIT_SECONDS": "2",
        },
    )
    info = await asyncio.to_thread(stack.start)
    try:
        async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
            digest = (await client.upload(write_text_pdf(tmp_path / "d.pdf", ["once"]))).sha256
            job = await client.submit([PacketItem("doc", digest)])
            job = await client.wait(job.name, timeout=90)
            assert state_name(job.state) == "COMPLETED"
            output = tmp_path / "signed.pdf"
            await client.download(job.name, output)
        assert (faults / "signer.after_artifact.fired").exists(), "the signer really was killed"
        assert stack.restarts("signer") == 1
        artifacts = list((Path(stack.data_dir) / "blobs" / "signed").rglob("*.pdf"))
        assert len(artifacts) == 1, "exactly one signed artifact"
        stored = artifacts[0].relative_to(Path(stack.data_dir) / "blobs").as_posix()
        assert stack_store(Path(stack.data_dir)).digest(stored)[0] == job.output_digest
        assert sha256_file(output)[0] == job.output_digest
        async with grpc.aio.insecure_channel(info.endpoints["audit"]) as channel:
            entries = (
                await audit_service_pb2_grpc.AuditServiceStub(channel).ListJobEvents(
                    audit_service_pb2.ListJobEventsRequest(job=job.name, page_size=100),
                    metadata=bearer_metadata(info.operator_token()),
                )
            ).entries
        assert [state_name(e.event.to_state) for e in entries].count("COMPLETED") == 1
    finally:
        await asyncio.to_thread(stack.stop)
