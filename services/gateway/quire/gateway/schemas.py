"""The HTTP API's documents, as pydantic models: what OpenAPI describes and
what every answer is checked against before it leaves."""

from __future__ import annotations

from pydantic import Base64Bytes, BaseModel, ConfigDict, Field, ValidationInfo, field_validator

__all__ = [
    "Violation",
    "Problem",
    "SourceReference",
    "MergeItem",
    "MergeRequest",
    "JobStatus",
    "SourceDocument",
    "BatchPacket",
    "BatchRequest",
    "BatchJobCount",
    "BatchStatus",
    "BatchJob",
    "BatchJobsPage",
    "BatchCancellation",
    "Health",
]

SHA256_PATTERN = "^[0-9a-f]{64}$"
INT32_MAX = 2**31 - 1


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Violation(_Document):
    """One field of the request and what is wrong with it (``google.rpc.BadRequest``)."""

    field: str
    description: str
    reason: str = ""


class Problem(_Document):
    """RFC 9457 problem details, with Quire's reason code and retry hint."""

    type: str = Field(description="A URN naming the problem: urn:quire:problem:{reason}.")
    title: str
    status: int
    detail: str
    reason: str = Field(description="The stable UPPER_SNAKE reason code, as in the gRPC API.")
    violations: list[Violation] = Field(default_factory=list)
    retry_after_seconds: float | None = None


class SourceReference(_Document):
    """A source the pipeline fetches from one of the tenant's registered source systems."""

    system: str = Field(max_length=64, description="A source system registered for the tenant.")
    key: str = Field(
        max_length=512,
        description='The record\'s key in that system: 1-256 of [A-Za-z0-9._:/-], no "..".',
    )
    content_type: str = Field(
        max_length=128, description='"application/pdf" or "application/json".'
    )


class MergeItem(_Document):
    """One source of the packet; its position alone decides its place. Exactly
    one of sha256 (an upload) and source (a reference) is given."""

    position: int = Field(ge=0, le=INT32_MAX)
    document_id: str = Field(max_length=256)
    # ``source`` first: the check of sha256 below reads it.
    source: SourceReference | None = Field(
        default=None, description="A source named by reference instead of an upload."
    )
    sha256: str = Field(
        default="",
        validate_default=True,
        description="Lower-case hex sha256 of an uploaded source; required without source.",
    )

    @field_validator("sha256")
    @classmethod
    def _an_upload_or_a_reference(cls, sha256: str, info: ValidationInfo) -> str:
        """Neither given: the item names no source (reported at sha256, as
        before references). A source that failed its own check is not in
        ``info.data``: that failure is the one reported."""
        if not sha256 and "source" in info.data and info.data["source"] is None:
            raise ValueError("give sha256 (an uploaded source) or source (a reference)")
        return sha256


class InlineSource(_Document):
    """A source carried in the request itself, so a small packet costs one
    request: the checks an upload meets, and an item names it by sha256."""

    sha256: str = Field(max_length=64, description="Lower-case hex sha256 of the bytes.")
    content_type: str = Field(
        max_length=128, description='"application/pdf" or "application/json".'
    )
    content: Base64Bytes = Field(description="The bytes, base64 (standard alphabet, padded).")


class MergeRequest(_Document):
    """An ordered manifest: ``POST /v1/pdf/merge``."""

    idempotency_key: str | None = Field(
        default=None,
        max_length=256,
        description="Maps to request_id; or the Idempotency-Key header (they must agree).",
    )
    items: list[MergeItem] = Field(max_length=10_000)
    sources: list[InlineSource] = Field(
        default_factory=list,
        max_length=10_000,
        description="Small sources sent with the request instead of uploaded first (4 MiB"
        " in all by default, INLINE_SOURCES_TOO_LARGE past it); each must be named by an item.",
    )
    ruleset: str = Field(default="", max_length=256)
    render_profile: str = Field(default="", max_length=64)
    priority: str = Field(default="", max_length=32, description='"interactive" or "batch".')
    bundle_id: str = Field(default="", max_length=256)
    budget_seconds: float | None = Field(
        default=None,
        ge=0,
        le=10**9,
        allow_inf_nan=False,
        description="The job's budget from acceptance: it must end by then. Unset: the"
        " service's default for a packet naming sources by reference, none otherwise.",
    )


class PhaseTiming(_Document):
    """How long one phase of the job's work took at one stage."""

    stage: str
    phase: str
    seconds: float
    source_system: str | None = Field(
        default=None, description='For a "fetch" phase: the source system fetched from.'
    )


class SourcePin(_Document):
    """What the pipeline fetched and pinned for a source named by reference."""

    position: int
    system: str
    key: str
    sha256: str = Field(description="Digest of the bytes used (after normalisation).")
    size_bytes: int
    fetched_sha256: str = Field(description="Digest of the bytes as the system sent them.")
    schema_version: str | None
    fetch_time: str | None
    normalisations: list[str]


class SourceWait(_Document):
    """A source system the job waits for: the validator deferred it until the
    system's circuit breaker lets a call through again."""

    system: str = Field(description="The source system id, as registered for the tenant.")
    breaker: str = Field(
        description='The system\'s circuit breaker: "open", "half-open" or "closed".'
    )
    retry_time: str | None = Field(description="When the job's task comes back to the validator.")
    since: str | None = Field(description="When the job began waiting for this system.")
    reason_code: str = Field(description="Why the job waits: SOURCE_UNAVAILABLE.")


class JobStatus(_Document):
    """The job status document (``quire.jobstatus.job_status_document``)."""

    job_id: str
    name: str
    state: str
    terminal: bool
    item_count: int
    manifest_digest: str
    output_digest: str | None
    failure_code: str | None
    failure_detail: str | None
    ruleset_version: str | None
    key_version: str | None
    bundle_id: str | None
    batch: str | None
    create_time: str | None
    update_time: str | None
    timings: list[PhaseTiming]
    deadline: str | None = Field(
        default=None, description="When the job's budget runs out; null for none."
    )
    pins: list[SourcePin] = Field(default_factory=list)
    track: str | None = Field(
        default=None,
        description='The rollout track the job was pinned to when accepted: "candidate" or'
        ' "baseline"; null when no rollout was open. A candidate-track job is run by the'
        " rollout's candidate (its workers, its ruleset) while the rollout is open.",
    )
    source_waits: list[SourceWait] = Field(
        default_factory=list,
        description="While the job waits for source systems (it stays VALIDATING): one per"
        " system; empty otherwise.",
    )
    deliveries: int = Field(
        default=0,
        ge=0,
        description="Every delivery of the job's tasks to a stage worker so far, from its"
        " ledger entries: for each stage (and operator retry generation) the highest delivery"
        " count a step recorded, summed. 0 before any stage has recorded a step.",
    )
    attempt: int = Field(
        default=0,
        ge=0,
        description="The delivery count of the step recorded last: 1 on a first try, more"
        " while a stage works on a redelivery. 0 before any stage step.",
    )


class SourceDocument(_Document):
    """An uploaded source, stored under its digest."""

    name: str
    sha256: str
    size_bytes: int
    content_type: str


class BatchPacket(_Document):
    """One packet of a batch: what ``POST /v1/pdf/merge`` would carry."""

    bundle_id: str = Field(default="", max_length=256)
    items: list[MergeItem] = Field(max_length=10_000)
    ruleset: str = Field(default="", max_length=256)
    render_profile: str = Field(default="", max_length=64)


class BatchRequest(_Document):
    """A portfolio: packets inline, or the sha256 of an uploaded JSON manifest."""

    idempotency_key: str | None = Field(default=None, max_length=256)
    packets: list[BatchPacket] = Field(default_factory=list, max_length=10_000)
    manifest_sha256: str = Field(default="", max_length=64)


class BatchJobCount(_Document):
    """How many of a batch's jobs are in one state."""

    state: str
    count: int


class BatchStatus(_Document):
    """A batch's progress: counts by state."""

    batch_id: str
    name: str
    state: str
    packet_count: int
    dispatched_count: int
    cancelled_undispatched_count: int
    terminal_count: int
    job_counts: list[BatchJobCount]
    create_time: str | None
    update_time: str | None
    finish_time: str | None


class BatchJob(_Document):
    """One packet of a batch and, once dispatched, its job."""

    index: int
    bundle_id: str
    job_id: str | None
    state: str | None
    cancelled_undispatched: bool
    reason_code: str | None


class BatchJobsPage(_Document):
    """One page of a batch's packets; ``next_page_token`` is null on the last."""

    jobs: list[BatchJob]
    next_page_token: str | None


class BatchCancellation(_Document):
    """What a cancel did: the counts add up to the batch's packet count."""

    batch: BatchStatus
    not_dispatched_cancelled: int
    in_flight_finishing: int
    already_terminal: int


class Health(_Document):
    """The gateway serves (``status`` is ``ok``)."""

    status: str
