"""Assembler process: ``python -m quire.assembler.main``."""

from __future__ import annotations

import os

import grpc

from quire.assembler import records as assembler_records
from quire.assembler import tables
from quire.assembler.servicer import AssemblerServicer
from quire.assembler.v1 import assembler_service_pb2_grpc as pb_grpc
from quire.assembler.work import AssemblerWork
from quire.blobstore import BlobStore
from quire.database import Database
from quire.groupcommit import Writes
from quire.jobgate import JobGate
from quire.peers import Peers
from quire.pipeline import stage
from quire.runtime import run_service
from quire.sandbox import SandboxPool
from quire.stageservice import Registrar, StageConfig, StageService, run_stage_service
from quire.workqueue import Publisher

SERVICE = "assembler"
SANDBOX_MODULES = ("pikepdf", "quire.assembler.merge")
"""What each merge worker's forkserver loads once (tests/test_sandbox_imports.py)."""


async def main() -> None:
    config = StageConfig.from_env(SERVICE, os.environ)  # every setting, read once
    pool = SandboxPool(config.sandbox, name="pdf-merge", preload=SANDBOX_MODULES)

    def build(
        database: Database,
        blobs: BlobStore,
        _gate: JobGate,
        _publisher: Publisher,
        _writes: Writes,
    ) -> tuple[AssemblerWork, Registrar]:
        def register(server: grpc.aio.Server) -> None:
            pb_grpc.add_AssemblerServiceServicer_to_server(AssemblerServicer(database), server)

        return AssemblerWork(blobs=blobs, sandbox=pool), register

    await run_stage_service(
        config,
        StageService(
            stage=stage("assemble"),
            metadata=tables.metadata,
            migrations=tables.MIGRATIONS,
            leases=tables.leases,
            grpc_service_name="quire.assembler.v1.AssemblerService",
            records=assembler_records.collections(),
            asks_audit=True,
        ),
        build=build,
        sandbox=pool,
        peers=Peers.load(config.service),
    )


def run() -> None:
    """The ``quire-assembler`` command."""
    run_service(SERVICE, main)


if __name__ == "__main__":
    run()
