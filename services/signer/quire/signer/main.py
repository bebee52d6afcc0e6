"""Signer process: ``python -m quire.signer.main``."""

from __future__ import annotations

import logging

import grpc

from quire.blobstore import BlobStore
from quire.database import Database
from quire.groupcommit import Writes
from quire.jobgate import JobGate
from quire.metrics import ServiceMetrics
from quire.paging import PageTokens
from quire.peers import Peers
from quire.pipeline import stage
from quire.runtime import run_service
from quire.sandbox import SandboxPool
from quire.signer import records as signer_records
from quire.signer import tables
from quire.signer.config import SignerConfig
from quire.signer.keystore import KeyStore
from quire.signer.servicer import SignerServicer
from quire.signer.v1 import signer_service_pb2_grpc as pb_grpc
from quire.signer.witness import Witness
from quire.signer.witnessservicer import WitnessServicer
from quire.signer.work import SignerWork
from quire.stageservice import Registrar, StageService, run_stage_service
from quire.witness.v1 import witness_service_pb2_grpc as witness_grpc
from quire.workqueue import Publisher

SERVICE = "signer"
SANDBOX_MODULES = ("pyhanko.sign", "pyhanko.sign.validation", "quire.signer.signing")
"""What each signing worker's forkserver loads once (tests/test_sandbox_imports.py)."""
log = logging.getLogger(__name__)


async def main() -> None:
    config = SignerConfig.from_env()
    pages = PageTokens.for_service(config.stage.service.identity)
    metrics = ServiceMetrics(SERVICE)
    pool = SandboxPool(
        config.stage.sandbox,
        name="pdf-signing",
        preload=SANDBOX_MODULES,
    )

    def build(
        database: Database,
        blobs: BlobStore,
        gate: JobGate,
        _publisher: Publisher,
        writes: Writes,
    ) -> tuple[SignerWork, Registrar]:
        keys = KeyStore(database, config.keys)
        active = keys.ensure_active_key()
        log.info(
            "active signing key %s (certificate %s)", active.version, active.certificate_sha256
        )

        witness = Witness(database, config.witness)

        def register(server: grpc.aio.Server) -> None:
            servicer = SignerServicer(database, keys, pages=pages)
            pb_grpc.add_SignerServiceServicer_to_server(servicer, server)
            witness_grpc.add_WitnessServiceServicer_to_server(WitnessServicer(witness), server)

        work = SignerWork(
            database=database,
            writes=writes,
            blobs=blobs,
            keys=keys,
            sandbox=pool,
            gate=gate,
            tsa_url=config.tsa_url,
            signatures=metrics.counter("quire_signatures_total"),
        )
        return work, register

    await run_stage_service(
        config.stage,
        StageService(
            stage=stage("sign"),
            metadata=tables.metadata,
            migrations=tables.MIGRATIONS,
            leases=tables.leases,
            grpc_service_name="quire.signer.v1.SignerService",
            records=signer_records.collections(),
            more_grpc_services=("quire.witness.v1.WitnessService",),
            asks_audit=True,
        ),
        build=build,
        sandbox=pool,
        peers=Peers.load(config.stage.service),
        metrics=metrics,
    )


def run() -> None:
    """The ``quire-signer`` command."""
    run_service(SERVICE, main)


if __name__ == "__main__":
    run()
