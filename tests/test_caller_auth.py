"""Every internal API asks who is calling (DESIGN.md invariant 11).

Every RPC of every service, enumerated from the generated descriptors, is
refused without credentials; a service identity the stack does not trust is
refused; a trusted one is held to its RPCs; a proof cannot be replayed or
used late; operators get their RPCs; tenants never reach evidence but through
admission; and health answers on its own port without credentials (with
mutual TLS on too: tests/test_configured_secrets.py, on its stack configured
as production is).

Every test here runs on the session's shared stack.
"""

from __future__ import annotations

import importlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from quire.access import OPEN_PREFIXES
from quire.accesspolicy import POLICIES
from quire.audit.v1 import audit_service_pb2 as apb
from quire.audit.v1 import audit_service_pb2_grpc as agrpc
from quire.callers import PROOF_HEADER, CallerProofInterceptors, CallerVerifier, ClockSkew, prove
from quire.cli.args import bearer_metadata
from quire.errors import Unauthenticated
from quire.export.v1 import export_service_pb2 as xpb
from quire.export.v1 import export_service_pb2_grpc as export_grpc
from quire.grpcstatus import reason_of
from quire.identity import IdentitySettings, ServiceIdentity, TrustStore
from quire.reasons import ReasonCode
from quire.settings import SERVICES
from quire.signer.v1 import signer_service_pb2 as spb
from quire.signer.v1 import signer_service_pb2_grpc as sgrpc
from quire.stack.supervisor import Stack, StackInfo
from quire.tls import aio_channel
from quire.validator.v1 import validator_service_pb2 as vpb
from quire.validator.v1 import validator_service_pb2_grpc as vgrpc

GEN = Path(__file__).resolve().parents[1] / "gen" / "quire"
UNKNOWN_JOB = "jobs/" + "ab" * 14
ROTATE_KEY = "/quire.signer.v1.SignerService/RotateKey"


SHARED_APIS = {
    "diagnostics": ("validator", "assembler", "signer"),
    "witness": ("signer",),
    "export": tuple(SERVICES),
}
"""APIs of their own package that other processes serve (the witness runs in
the signer; every service exports its own records)."""


def _methods() -> Iterator[tuple[str, str, Any]]:
    """(process, /pkg.Service/Method, method descriptor) for every RPC Quire serves."""
    for module_path in sorted(GEN.glob("*/v1/*_pb2.py")):
        package = module_path.parent.parent.name
        module = importlib.import_module(f"quire.{package}.v1.{module_path.stem}")
        for service in SHARED_APIS.get(package, (package,)):
            for descriptor in module.DESCRIPTOR.services_by_name.values():
                for method in descriptor.methods:
                    yield service, f"/{descriptor.full_name}/{method.name}", method


METHODS = list(_methods())


def test_the_descriptors_name_every_service() -> None:
    assert {service for service, _, _ in METHODS} == set(SERVICES)
    assert ROTATE_KEY in {name for _, name, _ in METHODS}


def test_every_rpc_has_a_rule_and_every_rule_an_rpc() -> None:
    served = {(service, name) for service, name, _ in METHODS}
    ruled = {(service, name) for service, rules in POLICIES.items() for name in rules}
    assert served - ruled == set(), "an RPC without a rule is refused to everyone"
    assert ruled - served == set(), "a rule for an RPC that no longer exists"


def _raw_call(channel: grpc.aio.Channel, name: str, method: Any, metadata: Any) -> Any:
    """Call ``name`` with an empty request, whatever its streaming shape; bytes in, bytes out."""
    kinds = (method.client_streaming, method.server_streaming)
    plain = {"request_serializer": None, "response_deserializer": None}
    if kinds == (False, False):
        return channel.unary_unary(name, **plain)(b"", metadata=metadata, timeout=10)
    if kinds == (False, True):
        return channel.unary_stream(name, **plain)(b"", metadata=metadata, timeout=10)
    if kinds == (True, False):
        return channel.stream_unary(name, **plain)(iter([b""]), metadata=metadata, timeout=10)
    # No request is sent: a refusal that lands while the client still writes
    # one reads INTERNAL on the client now and then (gRPC's core fails the
    # send), not the server's status.
    return channel.stream_stream(name, **plain)(metadata=metadata, timeout=10)


async def _outcome(call: Any) -> grpc.StatusCode:
    try:
        if isinstance(call, grpc.aio.UnaryStreamCall | grpc.aio.StreamStreamCall):
            async for _ in call:
                pass
        else:
            await call
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


@pytest.mark.stack
@pytest.mark.parametrize(("service", "name", "method"), METHODS, ids=[m[1] for m in METHODS])
async def test_every_rpc_without_credentials_is_unauthenticated(
    stack: Stack, service: str, name: str, method: Any
) -> None:
    info = StackInfo.read(stack.data_dir)
    async with aio_channel(info.endpoints[service], None) as channel:
        code = await _outcome(_raw_call(channel, name, method, metadata=()))
    assert code == grpc.StatusCode.UNAUTHENTICATED, f"{name} answered {code.name}"


def _identity(stack: Stack, service: str) -> ServiceIdentity:
    return ServiceIdentity.load(
        IdentitySettings.from_env(service, stack.data_dir, {"QUIRE_DATA_DIR": str(stack.data_dir)})
    )


@pytest.mark.stack
@pytest.mark.parametrize("name", ["admission", "intruder"])
async def test_an_identity_the_stack_does_not_trust_is_unauthenticated(
    stack: Stack, name: str
) -> None:
    stranger = ServiceIdentity.generate(name)  # admission's name, or no one's, with its own key
    info = StackInfo.read(stack.data_dir)
    async with aio_channel(info.endpoints["audit"], None, CallerProofInterceptors(stranger)) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await agrpc.AuditServiceStub(ch).GetJob(apb.GetJobRequest(name=UNKNOWN_JOB))
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.stack
async def test_admission_reads_what_it_may_and_may_not_rotate_the_signing_key(
    stack: Stack,
) -> None:
    info = StackInfo.read(stack.data_dir)
    admission = _identity(stack, "admission")
    async with aio_channel(
        info.endpoints["signer"], None, CallerProofInterceptors(admission)
    ) as ch:
        signer = sgrpc.SignerServiceStub(ch)
        keys = await signer.ListKeys(spb.ListKeysRequest())
        assert keys.keys, "a read admission may make"
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await signer.RotateKey(spb.RotateKeyRequest())
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert reason_of(refused.value) == "CALLER_NOT_ALLOWED"
    async with aio_channel(info.endpoints["signer"], None) as channel:
        listed = await sgrpc.SignerServiceStub(channel).ListKeys(
            spb.ListKeysRequest(), metadata=bearer_metadata(info.operator_token())
        )
    assert [k.version for k in listed.keys] == [k.version for k in keys.keys], "nothing rotated"


@pytest.mark.stack
async def test_another_service_may_not_read_what_only_admission_reads(stack: Stack) -> None:
    info = StackInfo.read(stack.data_dir)
    validator = _identity(stack, "validator")
    async with aio_channel(
        info.endpoints["signer"], None, CallerProofInterceptors(validator)
    ) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await sgrpc.SignerServiceStub(ch).GetSignature(spb.GetSignatureRequest(job=UNKNOWN_JOB))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.stack
async def test_a_replayed_late_early_or_misdirected_proof_is_refused(stack: Stack) -> None:
    info = StackInfo.read(stack.data_dir)
    admission = _identity(stack, "admission")
    method = "/quire.audit.v1.AuditService/GetJob"
    async with aio_channel(info.endpoints["audit"], None) as channel:
        audit = agrpc.AuditServiceStub(channel)

        async def get_job(proof: str) -> grpc.StatusCode:
            try:
                await audit.GetJob(
                    apb.GetJobRequest(name=UNKNOWN_JOB), metadata=((PROOF_HEADER, proof),)
                )
            except grpc.aio.AioRpcError as error:
                return error.code()
            return grpc.StatusCode.OK

        fresh = prove(admission, method)
        assert await get_job(fresh) == grpc.StatusCode.NOT_FOUND, "admitted, and no such job"
        assert await get_job(fresh) == grpc.StatusCode.UNAUTHENTICATED, "replayed"
        for late_or_early in (time.time() - 120, time.time() + 120):
            proof = prove(admission, method, now=late_or_early)
            # A trusted service's proof from another time: its clock or ours
            # is wrong (CLOCK_SKEW), a refusal that may pass later.
            assert await get_job(proof) == grpc.StatusCode.UNAVAILABLE
        other = prove(admission, "/quire.audit.v1.AuditService/BatchGetJobs")
        assert await get_job(other) == grpc.StatusCode.UNAUTHENTICATED, "made for another RPC"
        forged = fresh.rsplit(".", 1)[0] + "." + prove(admission, method).rsplit(".", 1)[1]
        assert await get_job(forged) == grpc.StatusCode.UNAUTHENTICATED, "signature of another"


@pytest.mark.stack
async def test_an_operator_token_opens_operator_rpcs_and_a_tenant_token_does_not(
    stack: Stack,
) -> None:
    info = StackInfo.read(stack.data_dir)
    operator = bearer_metadata(info.operator_token())
    tenant = bearer_metadata(info.token())
    async with (
        aio_channel(info.endpoints["audit"], None) as audit_channel,
        aio_channel(info.endpoints["validator"], None) as validator_channel,
        aio_channel(info.endpoints["admission"], None) as admission_channel,
    ):
        audit = agrpc.AuditServiceStub(audit_channel)
        validator = vgrpc.ValidatorServiceStub(validator_channel)
        exports = [
            (export_grpc.ExportServiceStub(audit_channel), xpb.COLLECTION_LEDGER_ROWS),
            (export_grpc.ExportServiceStub(admission_channel), xpb.COLLECTION_ACCEPTED_JOBS),
        ]
        assert (await audit.VerifyLedger(apb.VerifyLedgerRequest(), metadata=operator)).ok
        await validator.ListReviews(vpb.ListReviewsRequest(), metadata=operator)
        for export, collection in exports:  # every tenant's records: operators only
            request = xpb.ExportRecordsRequest(collection=collection)
            assert (await export.ExportRecords(request, metadata=operator)).service
        refusals = [
            *(
                export.ExportRecords(xpb.ExportRecordsRequest(collection=c), metadata=tenant)
                for export, c in exports
            ),
            audit.ExportEvidence(apb.ExportEvidenceRequest(job=UNKNOWN_JOB), metadata=tenant),
            audit.ListJobEvents(apb.ListJobEventsRequest(job=UNKNOWN_JOB), metadata=tenant),
            audit.VerifyLedger(apb.VerifyLedgerRequest(), metadata=tenant),
            validator.GetValidation(vpb.GetValidationRequest(job=UNKNOWN_JOB), metadata=tenant),
        ]
        for call in refusals:  # tenants see their evidence only through admission
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def _health(address: str) -> int:
    """The overall status a probe without credentials reads at ``address``."""
    async with grpc.aio.insecure_channel(address) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
    return reply.status


@pytest.mark.stack
async def test_the_health_port_answers_without_credentials_and_serves_nothing_else(
    stack: Stack,
) -> None:
    info = StackInfo.read(stack.data_dir)
    assert set(info.health_endpoints) == set(SERVICES)
    for service, address in info.health_endpoints.items():
        assert await _health(address) == health_pb2.HealthCheckResponse.SERVING, service
        async with aio_channel(info.endpoints[service], None) as main_port:
            reply = await health_pb2_grpc.HealthStub(main_port).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, "open on the main port"
    async with aio_channel(info.health_endpoints["audit"], None) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as absent:
            await agrpc.AuditServiceStub(channel).GetJob(
                apb.GetJobRequest(name=UNKNOWN_JOB), metadata=bearer_metadata(info.operator_token())
            )
    assert absent.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert all(prefix.startswith("/grpc.") for prefix in OPEN_PREFIXES)


def _tampered(proof: str) -> str:
    """``proof`` with one character of its signature changed, for certain
    (writing fixed characters over its end leaves it genuine whenever it
    already ended with them)."""
    middle = len(proof) - 20
    changed = "B" if proof[middle] == "A" else "A"
    return proof[:middle] + changed + proof[middle + 1 :]


def test_the_verifier_holds_a_proof_to_its_method_window_and_one_use() -> None:
    admission = ServiceIdentity.generate("admission")
    now = [1_000_000.0]
    verifier = CallerVerifier(TrustStore.of([admission]), clock=lambda: now[0])
    method = "/quire.signer.v1.SignerService/GetSignature"
    proof = prove(admission, method, now=now[0])
    assert verifier.verify(proof, method) == "admission"
    for skewed in (now[0] - 61, now[0] + 61):
        with pytest.raises(ClockSkew) as refused_for_clock:
            verifier.verify(prove(admission, method, now=skewed), method)
        assert refused_for_clock.value.reason == ReasonCode.CLOCK_SKEW
    refused = [
        (proof, method),  # replayed
        (_tampered(prove(admission, method, now=now[0] - 61)), method),  # forged, and late
        (prove(admission, method, now=now[0]), ROTATE_KEY),
        (prove(ServiceIdentity.generate("admission"), method, now=now[0]), method),
        ("admission.1.2", method),
        ("admission.notatime.n.c2ln", method),
        (f"admission.{int(now[0] * 1000)}.n.!!!", method),
    ]
    for bad, for_method in refused:
        with pytest.raises(Unauthenticated):
            verifier.verify(bad, for_method)
    now[0] += 121  # remembered nonces are forgotten once their proofs could not pass anyway
    assert verifier.verify(prove(admission, method, now=now[0], nonce=uuid.uuid4().hex), method)
    assert verifier.remembered == 1
