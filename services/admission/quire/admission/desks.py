"""What the front door asks of the parts behind its batch and notification
calls. The servicer authenticates and hands on; these answer."""

from __future__ import annotations

from typing import Protocol

from quire.admission.tenants.directory import Tenant
from quire.admission.v1 import batch_pb2, notification_pb2

__all__ = ["BatchDesk", "NotificationDesk"]


class BatchDesk(Protocol):
    """The batch calls, for a tenant already authenticated (``Batches``)."""

    async def submit(
        self, tenant: Tenant, request: batch_pb2.SubmitBatchRequest
    ) -> batch_pb2.Batch: ...

    async def get(self, tenant: Tenant, name: str) -> batch_pb2.Batch: ...

    async def list_jobs(
        self, tenant: Tenant, request: batch_pb2.ListBatchJobsRequest
    ) -> batch_pb2.ListBatchJobsResponse: ...

    async def cancel(
        self, tenant: Tenant, request: batch_pb2.CancelBatchRequest
    ) -> batch_pb2.CancelBatchResponse: ...


class NotificationDesk(Protocol):
    """The notification calls, for a tenant already authenticated (``Notifications``)."""

    async def set_endpoint(
        self, tenant: Tenant, request: notification_pb2.SetNotificationEndpointRequest
    ) -> notification_pb2.SetNotificationEndpointResponse: ...

    async def get_endpoint(self, tenant: Tenant) -> notification_pb2.NotificationEndpoint: ...

    async def list_attempts(
        self, tenant: Tenant, request: notification_pb2.ListNotificationAttemptsRequest
    ) -> notification_pb2.ListNotificationAttemptsResponse: ...
