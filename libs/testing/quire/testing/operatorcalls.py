"""Calling a service's operator API from a test: every unary call carries the
operator's bearer token."""

from __future__ import annotations

import grpc


class AsOperator(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    def __init__(self, token: str) -> None:
        self._metadata = (("authorization", f"Bearer {token}"),)

    async def intercept_unary_unary(self, continuation, details, request):  # type: ignore[no-untyped-def]
        details = grpc.aio.ClientCallDetails(
            details.method,
            details.timeout,
            self._metadata,
            details.credentials,
            details.wait_for_ready,
        )
        return await continuation(details, request)
