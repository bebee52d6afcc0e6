"""``quire.export.v1.ExportService`` on every service's gRPC server: the
records the service owns (``quire.exportrecords``), a page at a time, to
operators only.

The access policy (``quire.accesspolicy``) lets only an operator's bearer
token reach it (admission, whose own API leaves tokens to its servicers,
passes every bearer token on), and the servicer asks whose token it is
(``authorize``: admission checks its own token table, every other service
asks admission, ``quire.operatorcheck``) before it reads anything. Pages
follow ``quire.paging``: a bounded size, and a token bound to the RPC and
the collection. Errors leave through ``quire.grpcstatus``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

import grpc
from sqlalchemy import Connection

from quire.database import Database
from quire.export.v1 import export_service_pb2 as pb
from quire.export.v1 import export_service_pb2_grpc as pb_grpc
from quire.exportrecords import Collections, ExportedPage
from quire.grpcstatus import abort_with
from quire.paging import PageTokens

__all__ = ["SERVICE_NAME", "Authorize", "ExportServicer", "with_export"]

SERVICE_NAME = "quire.export.v1.ExportService"
RPC = "ExportRecords"

Authorize = Callable[[grpc.aio.ServicerContext], Awaitable[object]]
"""Raises ``Unauthenticated`` unless the call carries an operator's token."""


class ExportServicer(pb_grpc.ExportServiceServicer):
    """One service's collections, exported read-only."""

    def __init__(
        self,
        database: Database,
        collections: Collections,
        *,
        authorize: Authorize,
        pages: PageTokens,
        domain: str,
    ) -> None:
        self._database = database
        self._collections = collections
        self._authorize = authorize
        self._pages = pages
        self._domain = domain

    async def ExportRecords(  # noqa: N802 - gRPC method name
        self, request: pb.ExportRecordsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ExportRecordsResponse:
        try:
            await self._authorize(context)
            reader = self._collections.reader(request.collection)
            page = self._pages.page(
                RPC,
                request.page_size,
                request.page_token,
                {"collection": int(request.collection)},
            )
            page = replace(page, size=min(page.size, reader.page_limit))

            def read(connection: Connection) -> ExportedPage:
                return self._collections.page(
                    request.collection, connection, after=page.after, size=page.size
                )

            exported = await self._database.read(read)
        except Exception as error:  # noqa: BLE001 - translated here, once
            await abort_with(context, error, self._domain)
        if exported.more:
            exported.response.next_page_token = page.next_token(exported.rows[-1][0])
        return exported.response


def with_export(
    register: Callable[[grpc.aio.Server], None], servicer: ExportServicer
) -> Callable[[grpc.aio.Server], None]:
    """``register``, then the export servicer, on the same server."""

    def both(server: grpc.aio.Server) -> None:
        register(server)
        pb_grpc.add_ExportServiceServicer_to_server(servicer, server)

    return both
