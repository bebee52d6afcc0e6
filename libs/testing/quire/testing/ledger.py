"""A job's ledger entries as an operator reads them: audit's ListJobEvents,
page after page, with the stack's operator token."""

from __future__ import annotations

from pathlib import Path

import grpc

from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.cli.args import bearer_metadata
from quire.stack.info import StackInfo

__all__ = ["ledger_entries"]


async def ledger_entries(
    data_dir: Path, job: str, *, page_size: int = 100
) -> list[audit_service_pb2.LedgerEntry]:
    """Every entry of ``job`` in ledger order, from the stack in ``data_dir``."""
    info = StackInfo.read(data_dir)
    entries: list[audit_service_pb2.LedgerEntry] = []
    token = ""
    async with grpc.aio.insecure_channel(info.endpoints["audit"]) as channel:
        stub = audit_service_pb2_grpc.AuditServiceStub(channel)
        while True:
            page = await stub.ListJobEvents(
                audit_service_pb2.ListJobEventsRequest(
                    job=job, page_size=page_size, page_token=token
                ),
                metadata=bearer_metadata(info.operator_token()),
            )
            entries.extend(page.entries)
            token = page.next_page_token
            if not token:
                return entries
