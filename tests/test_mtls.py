"""Mutual TLS: with certificate paths set, every service demands a client
certificate from the stack's CA, and the pipeline still runs end to end."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from quire.client import AdmissionClient, PacketItem
from quire.errors import InvalidSetting
from quire.jobs import state_name
from quire.stack.supervisor import Stack
from quire.testing.pdfs import write_text_pdf
from quire.testing.pki import TestCA
from quire.tls import TlsSettings

pytestmark = pytest.mark.stack


async def test_services_talk_over_mutual_tls_and_refuse_strangers(tmp_path: Path) -> None:
    ca = TestCA(tmp_path / "pki")
    cert, key = ca.issue("service")
    tls = TlsSettings(cert_file=cert, key_file=key, ca_file=ca.ca_file)
    stack = Stack(
        tmp_path / "stack",
        env={
            "QUIRE_TLS_CERT_FILE": str(cert),
            "QUIRE_TLS_KEY_FILE": str(key),
            "QUIRE_TLS_CA_FILE": str(ca.ca_file),
        },
    )
    info = await asyncio.to_thread(stack.start)
    address = info.endpoints["admission"]
    try:
        async with AdmissionClient(address, info.token(), tls=tls) as client:
            digest = (await client.upload(write_text_pdf(tmp_path / "d.pdf", ["over tls"]))).sha256
            job = await client.wait((await client.submit([PacketItem("doc", digest)])).name)
            assert state_name(job.state) == "COMPLETED", "admission reached audit over mTLS"

        async with AdmissionClient(address, info.token()) as plaintext:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await plaintext.get_job(job.name)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

        stranger_ca = TestCA(tmp_path / "other", name="Someone else's CA")
        other_cert, other_key = stranger_ca.issue("intruder")
        intruder = TlsSettings(cert_file=other_cert, key_file=other_key, ca_file=ca.ca_file)
        async with AdmissionClient(address, info.token(), tls=intruder) as client:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await client.get_job(job.name)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await asyncio.to_thread(stack.stop)


def test_partial_tls_settings_are_refused() -> None:
    with pytest.raises(InvalidSetting) as refused:
        TlsSettings.from_env({"QUIRE_TLS_CERT_FILE": "/x.pem"})
    assert refused.value.variable == "QUIRE_TLS_KEY_FILE", "the first one missing is named"
    assert TlsSettings.from_env({}) is None
