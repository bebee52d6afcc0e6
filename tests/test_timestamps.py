"""PAdES B-T on the real stack: with a timestamp authority configured, every
signed packet carries a signature timestamp and still verifies everywhere."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest

from quire.cli.args import bearer_metadata
from quire.cli.verify import known_certificates
from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.pdfsignature import verify_signed_pdf
from quire.stack.supervisor import Stack
from quire.testing.pdfs import write_text_pdf
from quire.testing.pki import TestCA
from quire.testing.tsa import LocalTsa

pytestmark = pytest.mark.stack


async def test_packets_are_signed_b_t_when_a_timestamp_authority_is_configured(
    tmp_path: Path,
) -> None:
    tsa_cert, tsa_key = TestCA(tmp_path / "pki").issue_tsa()
    with LocalTsa(tsa_cert, tsa_key) as tsa:
        stack = Stack(tmp_path / "stack", env={"QUIRE_SIGNER_TSA_URL": tsa.url})
        info = await asyncio.to_thread(stack.start)
        try:
            async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
                digest = (await client.upload(write_text_pdf(tmp_path / "d.pdf", ["b-t"]))).sha256
                job = await client.wait((await client.submit([PacketItem("d", digest)])).name)
                assert state_name(job.state) == "COMPLETED"
                output = tmp_path / "signed.pdf"
                await client.download(job.name, output)
            certificates = await known_certificates(
                info.endpoints["signer"], metadata=bearer_metadata(info.operator_token())
            )
        finally:
            await asyncio.to_thread(stack.stop)
    report = await asyncio.to_thread(verify_signed_pdf, str(output), certificates)
    assert report.ok and report.timestamped
    if shutil.which("pdfsig"):
        checked = subprocess.run(
            ["pdfsig", str(output)], capture_output=True, text=True, timeout=60
        )
        assert "Signature is Valid" in checked.stdout
