"""Who may call what: one server interceptor per process holds every RPC to a
rule from its service's table (``quire.accesspolicy``) before a servicer
sees the call.

A call is let through when
- its caller proof (``quire.callers``) names a service the rule admits, or
- the rule admits operators and its bearer token is an operator's (asked of
  admission, which owns the tokens: ``quire.operatorcheck``), or a reviewer's
  where the rule admits reviewers too (the review calls: ``STAFF``), or
- the rule leaves the bearer token to the servicer (admission's own API,
  whose servicers authenticate tenants and operators) and one is present.

Everything else is refused before the request is even parsed: no
credentials, or bad ones, UNAUTHENTICATED; a proven service the rule does not
admit PERMISSION_DENIED (``CALLER_NOT_ALLOWED``); a reviewer's token where
the rule admits operators only PERMISSION_DENIED (``REVIEWER_NOT_ALLOWED``);
an RPC missing from the table PERMISSION_DENIED for everyone (fail closed). Health and reflection
stay open, because probes carry no credentials.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from quire.callers import PROOF_HEADER, CallerVerifier
from quire.errors import PermissionDenied, QuireError, Unauthenticated
from quire.grpcstatus import abort_with
from quire.operatorcheck import OperatorCheck

__all__ = ["Rule", "OPERATOR", "STAFF", "BEARER", "read_by", "AccessInterceptor", "OPEN_PREFIXES"]

OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
"""Methods every caller may use: health checks and server reflection."""

Metadata = Sequence[tuple[str, str | bytes]]


@dataclass(frozen=True)
class Rule:
    """Who may call one RPC."""

    callers: frozenset[str] = frozenset()
    """Services whose proven identity is enough."""
    operator: bool = False
    """An operator's bearer token is enough."""
    reviewer: bool = False
    """With ``operator``: a reviewer's bearer token is enough too (review calls)."""
    bearer: bool = False
    """Any bearer token gets the call to the servicer, which decides whose it is."""


OPERATOR = Rule(operator=True)
"""Operators only: every write, and reads that span tenants."""
STAFF = Rule(operator=True, reviewer=True)
"""Operators and reviewers: the review calls, and nothing else."""
BEARER = Rule(bearer=True)
"""Admission's own API: a token must be present; the servicer checks it."""


def read_by(*services: str) -> Rule:
    """A read for these services, and for operators."""
    return Rule(callers=frozenset(services), operator=True)


def _bearer(metadata: Metadata) -> str:
    for key, value in metadata:
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return ""


def _proof(metadata: Metadata) -> str | None:
    for key, value in metadata:
        if key == PROOF_HEADER and isinstance(value, str):
            return value
    return None


class AccessInterceptor(grpc.aio.ServerInterceptor):
    """Admits or refuses each call by its RPC's rule; see the module docstring."""

    def __init__(
        self,
        rules: Mapping[str, Rule],
        *,
        verifier: CallerVerifier,
        operators: OperatorCheck | None,
        domain: str,
    ) -> None:
        self._rules = dict(rules)
        self._verifier = verifier
        self._operators = operators
        self._domain = domain

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = details.method
        handler = await continuation(details)
        if handler is None or method.startswith(OPEN_PREFIXES):
            return handler
        try:
            await self.admit(method, tuple(details.invocation_metadata or ()))
        except QuireError as error:
            return _refusal(handler, error, self._domain)
        return handler

    async def admit(self, method: str, metadata: Metadata) -> str:
        """Who the call is from (a service, ``operator``, ``reviewer`` or
        ``bearer``); raises to refuse."""
        rule = self._rules.get(method)
        if rule is None:
            raise PermissionDenied("this RPC admits no caller")
        proof = None if rule.bearer else _proof(metadata)
        caller = self._verifier.verify(proof, method) if proof is not None else None
        if caller is not None and caller in rule.callers:
            return caller
        if _bearer(metadata):
            if rule.bearer:
                return "bearer"
            if rule.operator and self._operators is not None:
                if rule.reviewer:
                    return (await self._operators.staff_in(metadata)).role
                await self._operators.operator_in(metadata)
                return "operator"
        if caller is not None:
            raise PermissionDenied(f"{caller} may not call this RPC")
        raise Unauthenticated("a service identity or an operator token is required")


def _refusal(handler: grpc.RpcMethodHandler, error: QuireError, domain: str) -> Any:
    """A handler of ``handler``'s shape that aborts with ``error``; the request
    stays unparsed (no deserializer)."""

    async def refuse(_request: object, context: grpc.aio.ServicerContext) -> None:
        await abort_with(context, error, domain)

    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(refuse)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(refuse)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(refuse)
    return grpc.stream_stream_rpc_method_handler(refuse)
