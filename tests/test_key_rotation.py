"""The signer on a real stack with file keys and a timestamp authority (one
stack for the module): with a TSA configured, a signed packet carries a
signature timestamp (PAdES B-T) and still verifies everywhere; and key
rotation in the middle of a stream of jobs keeps every packet verifiable,
each recording the key version it was signed with."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from quire.cli.args import bearer_metadata
from quire.cli.verify import known_certificates
from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.pdfsignature import verify_signed_pdf
from quire.signer.v1 import signer_service_pb2 as spb
from quire.signer.v1 import signer_service_pb2_grpc as sgrpc
from quire.stack.supervisor import Stack, StackInfo
from quire.testing.pdfs import write_text_pdf
from quire.testing.pki import TestCA
from quire.testing.tsa import LocalTsa

pytestmark = pytest.mark.stack
JOBS = 12


@pytest.fixture(scope="module")
def signing_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackInfo]:
    """A stack whose signer holds file keys and asks a local TSA for a
    timestamp on every signature. No test here but the rotation test rotates
    its key."""
    folder = tmp_path_factory.mktemp("signing")
    tsa_cert, tsa_key = TestCA(folder / "pki").issue_tsa()
    with LocalTsa(tsa_cert, tsa_key) as tsa:
        stack = Stack(folder / "stack", env={"QUIRE_SIGNER_TSA_URL": tsa.url})
        info = stack.start()
        try:
            yield info
        finally:
            stack.stop()


async def test_packets_are_signed_b_t_when_a_timestamp_authority_is_configured(
    signing_stack: StackInfo, tmp_path: Path
) -> None:
    info = signing_stack
    async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
        digest = (await client.upload(write_text_pdf(tmp_path / "d.pdf", ["b-t"]))).sha256
        job = await client.wait((await client.submit([PacketItem("d", digest)])).name)
        assert state_name(job.state) == "COMPLETED"
        output = tmp_path / "signed.pdf"
        await client.download(job.name, output)
    certificates = await known_certificates(
        info.endpoints["signer"], metadata=bearer_metadata(info.operator_token())
    )
    report = await asyncio.to_thread(verify_signed_pdf, str(output), certificates)
    assert report.ok and report.timestamped
    if shutil.which("pdfsig"):
        checked = subprocess.run(
            ["pdfsig", str(output)], capture_output=True, text=True, timeout=60
        )
        assert "Signature is Valid" in checked.stdout


async def test_rotation_mid_stream_keeps_every_packet_verifiable(
    signing_stack: StackInfo, tmp_path: Path
) -> None:
    info = signing_stack
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
