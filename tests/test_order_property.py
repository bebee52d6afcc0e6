"""Invariant 1 on the real stack: whatever order the uploads arrive in, the
signed packet's pages follow the manifest's positions (property-based)."""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from pathlib import Path

import pypdf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quire.client import AdmissionClient, PacketItem
from quire.jobs import state_name
from quire.stack.supervisor import StackInfo
from quire.testing.pdfs import write_text_pdf

pytestmark = pytest.mark.stack
DOCUMENTS = 4


async def _packet(info: StackInfo, upload_order: list[int], manifest_order: list[int]) -> list[str]:
    run = uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory() as temp:
        paths = [
            write_text_pdf(
                Path(temp) / f"d{i}.pdf", [f"doc {i} {run} page {p}" for p in range(i % 2 + 1)]
            )
            for i in range(DOCUMENTS)
        ]
        async with AdmissionClient(info.endpoints["admission"], info.token()) as client:
            digests = {}
            for index in upload_order:
                digests[index] = (await client.upload(paths[index])).sha256
            items = [PacketItem(f"doc-{i}", digests[i]) for i in manifest_order]
            job = await client.wait((await client.submit(items)).name, timeout=60)
            assert state_name(job.state) == "COMPLETED"
            output = Path(temp) / "signed.pdf"
            await client.download(job.name, output)
        return [page.extract_text().strip() for page in pypdf.PdfReader(output).pages]


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    upload_order=st.permutations(list(range(DOCUMENTS))),
    manifest_order=st.permutations(list(range(DOCUMENTS))),
)
def test_pages_follow_manifest_positions_whatever_the_upload_order(
    stack,  # type: ignore[no-untyped-def]
    upload_order: list[int],
    manifest_order: list[int],
) -> None:
    info = StackInfo.read(stack.data_dir)
    pages = asyncio.run(_packet(info, list(upload_order), list(manifest_order)))
    documents = [int(text.split()[1]) for text in pages]
    expected = [i for i in manifest_order for _ in range(i % 2 + 1)]
    assert documents == expected
