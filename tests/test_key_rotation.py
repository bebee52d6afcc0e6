"""Key rotation in the middle of a stream of jobs: every packet verifies, and
each records the key version it was signed with."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.pdfsignature import verify_signed_pdf
from quire.signer.v1 import signer_service_pb2 as spb
from quire.signer.v1 import signer_service_pb2_grpc as sgrpc
from quire.stack.supervisor import Stack
from quire.testing.pdfs import write_text_pdf

pytestmark = pytest.mark.stack
JOBS = 12


async def test_rotation_mid_stream_keeps_every_packet_verifiable(tmp_path: Path) -> None:
    stack = Stack(tmp_path / "stack")
    info = await asyncio.to_thread(stack.start)
    try:
        async with (
            AdmissionClient(info.endpoints["admission"], info.token()) as client,
            grpc.aio.insecure_channel(info.endpoints["signer"]) as channel,
        ):
            signer = sgrpc.SignerServiceStub(channel)
            digests = [
                (await client.upload(write_text_pdf(tmp_path / f"{i}.pdf", [f"job {i}"]))).sha256
                for i in range(JOBS)
            ]

            async def one(index: int) -> str:
                job = await client.submit([PacketItem("doc", digests[index])])
                return job.name

            first = await asyncio.gather(*(one(i) for i in range(JOBS // 2)))
            operator = bearer_metadata(info.operator_token())
            rotated = await signer.RotateKey(spb.RotateKeyRequest(), metadata=operator)
            second = await asyncio.gather(*(one(i) for i in range(JOBS // 2, JOBS)))
            assert rotated.version == "v2" and rotated.active

            listed = await signer.ListKeys(spb.ListKeysRequest(), metadata=operator)
            keys = {k.version: k for k in listed.keys}
            assert set(keys) == {"v1", "v2"} and keys["v2"].active and not keys["v1"].active
            versions = []
            for name in [*first, *second]:
                job = await client.wait(name, timeout=60)
                assert state_name(job.state) == "COMPLETED"
                output = tmp_path / f"{name.split('/')[1]}.pdf"
                await client.download(name, output)
                report = await asyncio.to_thread(
                    verify_signed_pdf, str(output), [k.certificate_pem for k in keys.values()]
                )
                assert report.ok
                assert report.certificate_sha256 == keys[job.key_version].certificate_sha256
                versions.append(job.key_version)
            assert all(v == "v2" for v in versions[JOBS // 2 :]), "jobs after rotation use v2"
            assert set(versions) <= {"v1", "v2"}
    finally:
        await asyncio.to_thread(stack.stop)
