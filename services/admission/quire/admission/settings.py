"""Admission's own settings: the front door's limits, batches and
completion notifications, read once in admission's ``main``
(``quire.admission.config``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from quire.backoff import Backoff, Jitter
from quire.environment import Settings, Variable
from quire.errors import InvalidSetting

__all__ = ["AdmissionSettings", "BatchSettings", "NotificationSettings", "read_secret_file"]

MIB = 1024 * 1024
GIB = 1024 * MIB


def read_secret_file(path: Path, variable: str) -> str:
    """The one line a mounted Secret holds; ``InvalidSetting`` naming the
    variable when it cannot be read or is empty."""
    try:
        value = path.read_text().strip()
    except OSError:
        raise InvalidSetting(variable, "a readable file") from None
    if not value:
        raise InvalidSetting(variable, "a file that is not empty")
    return value


class AdmissionSettings(Settings):
    """The front door's limits. Upload ceiling and outstanding quota are
    defaults that a tenant's own limits override."""

    max_upload_bytes: int = 25 * MIB
    """The largest upload (a tenant's own ceiling overrides it)."""
    allowed_content_types: ClassVar[frozenset[str]] = frozenset(
        {"application/pdf", "application/json"}
    )
    """What an upload may declare itself to be."""
    max_manifest_items: int = 200
    """Items one manifest may list."""
    chunk_bytes: ClassVar[int] = 256 * 1024
    """Size of each chunk of a download stream."""
    max_outstanding_jobs: int = 100
    """Non-terminal jobs a tenant may have before new ones are refused."""
    queue_age_budget_seconds: float = 60.0
    """Refuse new work when the oldest ready validate message is older than this."""
    queue_age_cache_seconds: float = 1.0
    """How long a reading of the queue's age is reused."""
    idempotency_window_seconds: float = 24 * 3600.0
    """How long a request_id keeps returning the job it made."""
    retry_after_seconds: float = 5.0
    """The retry hint given when refusing for load."""
    max_tenant_uploads: int = 16
    """Uploads one tenant may have open at once in this process."""
    max_uploads_in_flight: int = 1024
    """Uploads open at once in this process, all tenants together (each may hold a descriptor)."""
    upload_bytes_in_flight: int = 512 * MIB
    """Declared bytes of the uploads open in this process, reserved when the header arrives."""
    tenant_upload_share_bytes: int = Field(
        default_factory=lambda data: data["upload_bytes_in_flight"] // 4
    )
    """Declared bytes one tenant's open uploads may reserve: a quarter of
    ``upload_bytes_in_flight`` unless set."""
    upload_idle_seconds: float = 30.0
    """An upload that moves fewer than ``upload_min_bytes_per_second`` for this long is closed."""
    upload_min_bytes_per_second: int = 8 * 1024
    """The slowest rate an upload may keep up, measured over windows of ``upload_idle_seconds``."""
    upload_max_seconds: float = 900.0
    """The longest an upload may take from its first message to its last."""
    upload_linger_seconds: float = 5.0
    """How long a refused upload is still read (and discarded) so the caller hears the reason."""
    upload_linger_bytes: int = 64 * MIB
    """How many bytes of a refused upload are read and discarded at most."""
    storage_quota_bytes: int = 10 * GIB
    """Bytes of stored uploads one tenant may keep (its own quota overrides it)."""
    inline_source_bytes: int = 4 * MIB
    """Bytes of sources a SubmitJob may carry inline, all together; admission
    accepts request messages this much larger than gRPC's default."""
    operator_token_file: Path | None = None
    """A file (a mounted Secret) holding the first operator token, so every
    replica and the operators agree on it. Unset, admission makes one on first
    start and writes it, with a development tenant's, into its own directory."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AdmissionSettings:
        return cls.read(env)


class BatchSettings(Settings):
    """Batches: how big one may be, and how fast admission's dispatcher turns
    their packets into jobs (``quire.admission.batches.dispatch``)."""

    model_config = SettingsConfigDict(env_prefix="QUIRE_BATCH_")

    max_packets: int = Field(10_000, ge=1)
    """Packets one SubmitBatch may carry."""
    max_manifest_bytes: int = Field(16 * MIB, ge=1)
    """The largest uploaded batch manifest (JSON) SubmitBatch reads."""
    window: int = Field(32, ge=1)
    """Batch children in flight (created, not yet known ended), all tenants
    together, while no interactive work is in the pipeline."""
    shared_window: int = Field(3, ge=1)
    """The window while interactive work waits or runs at some stage (or did
    within ``interactive_hold_seconds``): the capacity batch work leaves to it."""
    interactive_hold_seconds: float = Field(3.0, ge=0)
    """How long interactive work counts as present after it was last seen."""
    rate: float = Field(50.0, ge=0.01)
    """Children created per second at most (a token bucket)."""
    page_size: int = Field(16, ge=1)
    """Children created in one transaction."""
    tick_seconds: float = Field(0.2, ge=0.01)
    """How often the dispatcher looks for work when it has none."""
    lease_seconds: float = Field(5.0, ge=0.5)
    """How long the dispatch lease lasts unless renewed; another replica takes it after."""
    finish_poll_seconds: float = Field(0.5, ge=0.05)
    """How often the end tracker asks audit which children and notified jobs ended."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> BatchSettings:
        return cls.read(env)


class NotificationSettings(Settings):
    """Delivery of completion notifications to tenants' callback URLs
    (admission's notifier; ``quire.notifysign`` says how they are signed)."""

    model_config = SettingsConfigDict(env_prefix="QUIRE_NOTIFY_")

    max_attempts: int = Field(12, ge=1)
    """Tries per notification before it is abandoned (each is listed to the tenant)."""
    backoff_base_seconds: float = Field(2.0, ge=0)
    """The first retry waits up to this; each further one up to twice as long (full jitter)."""
    backoff_cap_seconds: float = Field(600.0, ge=0)
    """The longest wait between two tries."""
    timeout_seconds: float = Field(10.0, ge=0.1)
    """One POST, from connecting to the last byte of the reply."""
    concurrency: int = Field(16, ge=1)
    """POSTs in flight at once in this process."""
    tenant_concurrency: int = Field(4, ge=1)
    """POSTs in flight at once to one tenant, so one slow receiver cannot take every slot."""
    poll_seconds: float = Field(1.0, ge=0.05)
    """How often the outbox is looked at for notifications due."""
    allow_loopback_http: Annotated[bool, Variable("QUIRE_NOTIFY_LOOPBACK_HTTP")] = False
    """Accept ``http://`` URLs to a loopback address (the embedded stack sets it: tests,
    a receiver on the same machine). Otherwise only ``https://``."""

    @property
    def backoff(self) -> Backoff:
        """How long the next try waits (full jitter: many receivers' retries spread out)."""
        return Backoff(self.backoff_base_seconds, self.backoff_cap_seconds, Jitter.FULL)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> NotificationSettings:
        return cls.read(env)
