"""Validator process: ``python -m quire.validator.main``."""

from __future__ import annotations

import asyncio
import os

import grpc

from quire.blobstore import LocalBlobStore
from quire.database import Database
from quire.jobgate import JobGate
from quire.sandbox import SandboxPool
from quire.settings import SandboxSettings, ServiceSettings, ValidationLimits
from quire.stageservice import Registrar, StageService, run_stage_service
from quire.validator import tables
from quire.validator.pdfchecks import PdfLimits
from quire.validator.servicer import ValidatorServicer
from quire.validator.v1 import validator_service_pb2_grpc as pb_grpc
from quire.validator.work import ValidatorWork

SERVICE = "validator"


async def main() -> None:
    settings = ServiceSettings.from_env(SERVICE)
    pool = SandboxPool(
        SandboxSettings.from_env(os.environ, SERVICE),
        name="pdf-inspection",
        preload=("magic", "pikepdf"),
    )

    def build(
        database: Database, blobs: LocalBlobStore, _gate: JobGate
    ) -> tuple[ValidatorWork, Registrar]:
        def register(server: grpc.aio.Server) -> None:
            pb_grpc.add_ValidatorServiceServicer_to_server(ValidatorServicer(database), server)

        limits = ValidationLimits.from_env()
        pdf_limits = PdfLimits(
            max_pages=limits.max_pages, max_decompressed_bytes=limits.max_decompressed_bytes
        )
        return ValidatorWork(blobs=blobs, sandbox=pool, limits=pdf_limits), register

    await run_stage_service(
        settings,
        StageService(
            stage="validate",
            entry_state="ACCEPTED",
            metadata=tables.metadata,
            leases=tables.leases,
            grpc_service_name="quire.validator.v1.ValidatorService",
        ),
        build=build,
        on_close=pool.close,
        warm=pool.warm,
    )


if __name__ == "__main__":
    asyncio.run(main())
