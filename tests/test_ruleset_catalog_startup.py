"""Admission asks the validator for its rulesets as soon as it starts, often
before the validator listens. That failed try puts the channel into gRPC's
reconnect back-off; the first job submitted after the stack reports ready must
still find the validator (it waits within its deadline, not fail at once with
"validator unavailable")."""

from __future__ import annotations

import grpc
import pytest

from quire.admission.rulesets import catalog as catalog_module
from quire.admission.rulesets.catalog import RulesetCatalog
from quire.errors import TransientError
from quire.stack.ports import free_port
from quire.validator.v1 import validator_service_pb2 as pb
from quire.validator.v1 import validator_service_pb2_grpc as pb_grpc


class _Rulesets(pb_grpc.ValidatorServiceServicer):
    async def ListRulesets(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return pb.ListRulesetsResponse(rulesets=[pb.Ruleset(version="default@1")])


async def test_a_catalog_asked_before_the_validator_listened_finds_it_once_it_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = free_port()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        catalog = RulesetCatalog(pb_grpc.ValidatorServiceStub(channel), ttl_seconds=0.0)
        with monkeypatch.context() as short:
            short.setattr(catalog_module, "TIMEOUT_SECONDS", 0.5)
            with pytest.raises(TransientError):
                await catalog.keys()  # nobody listens: refused, the channel backs off
        server = grpc.aio.server()
        pb_grpc.add_ValidatorServiceServicer_to_server(_Rulesets(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        try:
            assert await catalog.keys() == frozenset({"default@1"})
        finally:
            await server.stop(None)
