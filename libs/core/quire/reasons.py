"""Reason codes: stable UPPER_SNAKE strings shared by the API, the ledger and metrics.

A reason code is part of Quire's contract with its callers; never rename one.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ReasonCode"]


class ReasonCode(StrEnum):
    # Authentication and tenancy.
    UNAUTHENTICATED = "UNAUTHENTICATED"
    NOT_FOUND = "NOT_FOUND"
    INVALID_TENANT = "INVALID_TENANT"
    CALLER_NOT_ALLOWED = "CALLER_NOT_ALLOWED"
    # Uploads.
    UPLOAD_HEADER_MISSING = "UPLOAD_HEADER_MISSING"
    SIZE_EXCEEDS_DECLARATION = "SIZE_EXCEEDS_DECLARATION"
    SIZE_BELOW_DECLARATION = "SIZE_BELOW_DECLARATION"
    SIZE_LIMIT_EXCEEDED = "SIZE_LIMIT_EXCEEDED"
    CONTENT_TYPE_NOT_ALLOWED = "CONTENT_TYPE_NOT_ALLOWED"
    DIGEST_MISMATCH = "DIGEST_MISMATCH"
    UPLOAD_IDLE_TIMEOUT = "UPLOAD_IDLE_TIMEOUT"
    TENANT_UPLOADS_EXCEEDED = "TENANT_UPLOADS_EXCEEDED"
    UPLOADS_IN_FLIGHT_EXCEEDED = "UPLOADS_IN_FLIGHT_EXCEEDED"
    TENANT_TEMP_SHARE_EXCEEDED = "TENANT_TEMP_SHARE_EXCEEDED"
    STORAGE_QUOTA_EXCEEDED = "STORAGE_QUOTA_EXCEEDED"
    """The upload would take the tenant's stored uploads past its storage quota."""
    UPLOAD_INTERRUPTED = "UPLOAD_INTERRUPTED"
    """The gateway's stream to admission broke before admission's answer could be
    read (admission answers before the end of an upload only to refuse it); upload again."""
    # Manifests and idempotency.
    INVALID_MANIFEST = "INVALID_MANIFEST"
    INLINE_SOURCES_TOO_LARGE = "INLINE_SOURCES_TOO_LARGE"
    """A SubmitJob's inline sources exceed the inline limit in all: upload them."""
    INLINE_SOURCE_UNUSED = "INLINE_SOURCE_UNUSED"
    """A SubmitJob carries a source no manifest item names."""
    INVALID_REQUEST = "INVALID_REQUEST"
    """An HTTP request the gateway cannot translate (its body or parameters do not fit the API)."""
    REQUEST_ID_MISSING = "REQUEST_ID_MISSING"
    REQUEST_ID_TOO_LONG = "REQUEST_ID_TOO_LONG"
    REQUEST_ID_INVALID = "REQUEST_ID_INVALID"
    """A request_id with a control, format or other unprintable character."""
    REQUEST_ID_RESERVED = "REQUEST_ID_RESERVED"
    """SubmitJob with a request_id in the prefix batch packets' jobs use."""
    INVALID_PAGE = "INVALID_PAGE"
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
    # Completion notifications.
    INVALID_NOTIFICATION_URL = "INVALID_NOTIFICATION_URL"
    """A callback URL that is not https (or http to loopback where allowed), too long,
    or carries a user name, password or fragment."""
    # Load shedding.
    TENANT_QUOTA_EXCEEDED = "TENANT_QUOTA_EXCEEDED"
    QUEUE_BACKLOG = "QUEUE_BACKLOG"
    WATCHES_EXCEEDED = "WATCHES_EXCEEDED"
    """The process holds as many open WatchJob streams as it may (QUIRE_MAX_WATCHES)."""
    TENANT_WATCHES_EXCEEDED = "TENANT_WATCHES_EXCEEDED"
    """The tenant holds its share of the process's WatchJob streams (QUIRE_MAX_TENANT_WATCHES)."""
    SERVICE_DRAINING = "SERVICE_DRAINING"
    """The service is shutting down; a WatchJob stream ended UNAVAILABLE, watch again."""
    TEMP_SPACE_LOW = "TEMP_SPACE_LOW"
    # Job lifecycle.
    CANCELLED_BY_CLIENT = "CANCELLED_BY_CLIENT"
    CANCEL_TOO_LATE = "CANCEL_TOO_LATE"
    """A cancel that lost: signing had begun or the job had ended, so nothing
    changed. CancelJob answers the job as audit records it (its state is not
    CANCELLED); the CLI, the Python client and the HTTP gateway name the
    outcome with this code."""
    JOB_CANCELLED = "JOB_CANCELLED"
    JOB_NOT_COMPLETED = "JOB_NOT_COMPLETED"
    ARTIFACT_DIGEST_MISMATCH = "ARTIFACT_DIGEST_MISMATCH"
    ARTIFACT_MISSING = "ARTIFACT_MISSING"
    # Retention.
    BYTES_RETIRED = "BYTES_RETIRED"
    """A ledger entry recording bytes deleted under the retention policy."""
    ARTIFACT_RETIRED = "ARTIFACT_RETIRED"
    """The artifact's bytes were deleted under the retention policy (the ledger says so)."""
    JOB_NOT_ENDED = "JOB_NOT_ENDED"
    """A job's bytes are kept until it ends: nothing of a running job is retired."""
    DATA_SHREDDED = "DATA_SHREDDED"
    """The tenant's data key was destroyed (crypto-shredding): its bytes are unreadable."""
    TENANT_SHREDDED = "TENANT_SHREDDED"
    """A job or batch for a tenant whose data was crypto-shredded: it takes no new work."""
    HISTORY_INCOMPLETE = "HISTORY_INCOMPLETE"
    # Validation.
    TYPE_MISMATCH = "TYPE_MISMATCH"
    ENCRYPTED_PDF = "ENCRYPTED_PDF"
    MALFORMED_PDF = "MALFORMED_PDF"
    CYCLIC_STRUCTURE = "CYCLIC_STRUCTURE"
    """A page tree, outline, form-field tree, annotation chain, function or object-stream
    chain that leads back to itself: refused before anything walks it."""
    PARSER_LIMIT_EXCEEDED = "PARSER_LIMIT_EXCEEDED"
    TOO_MANY_PAGES = "TOO_MANY_PAGES"
    DECOMPRESSED_SIZE_EXCEEDED = "DECOMPRESSED_SIZE_EXCEEDED"
    ACTIVE_CONTENT = "ACTIVE_CONTENT"
    SOURCE_MISSING = "SOURCE_MISSING"
    SCHEMA_INVALID = "SCHEMA_INVALID"
    RULESET_UNKNOWN = "RULESET_UNKNOWN"
    REQUIRED_FIELD_MISSING = "REQUIRED_FIELD_MISSING"
    REQUIRED_CLAUSE_MISSING = "REQUIRED_CLAUSE_MISSING"
    TOTAL_MISMATCH = "TOTAL_MISMATCH"
    CURRENCY_INVALID = "CURRENCY_INVALID"
    TAX_ID_INVALID = "TAX_ID_INVALID"
    QUANTITY_INVALID = "QUANTITY_INVALID"
    REQUIRED_VALUE_INVALID = "REQUIRED_VALUE_INVALID"
    REVIEW_REQUIRED = "REVIEW_REQUIRED"
    REVIEW_REJECTED = "REVIEW_REJECTED"
    REVIEW_ALREADY_RESOLVED = "REVIEW_ALREADY_RESOLVED"
    RENDER_UNAVAILABLE = "RENDER_UNAVAILABLE"
    # Sources named by reference, fetched from a tenant's source systems.
    SOURCE_SCHEMA_INVALID = "SOURCE_SCHEMA_INVALID"
    """A fetched JSON source is not the structure its system's schema requires
    (a review verdict: REJECTED, never retried)."""
    SOURCE_NOT_FOUND = "SOURCE_NOT_FOUND"
    """The source system has no record under the key (HTTP 404 or 410): REJECTED."""
    SOURCE_TOO_LARGE = "SOURCE_TOO_LARGE"
    """A fetch brought more bytes than the system's limit; nothing of it is kept."""
    SOURCE_REFUSED = "SOURCE_REFUSED"
    """The source system refused the credential (HTTP 401 or 403): FAILED, not retried."""
    SOURCE_UNAVAILABLE = "SOURCE_UNAVAILABLE"
    """The source system kept failing, timing out or its breaker stayed open
    until the job's budget could not cover another try: FAILED."""
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    """The job's deadline passed (or would pass) before its sources could be
    fetched, for example after waiting in a queue: FAILED."""
    BUDGET_TOO_SHORT = "BUDGET_TOO_SHORT"
    """SubmitJob's budget cannot cover the slice reserved for render, signing
    and storage plus one source call; or a dead-letter retry's budget is not
    positive."""
    BUDGET_TOO_LONG = "BUDGET_TOO_LONG"
    """A dead-letter retry's budget is longer than the longest a job may ask
    for (``QUIRE_MAX_JOB_BUDGET_SECONDS``)."""
    # Rollouts (``quire rollout``, TenantAdminService.StartRollout and friends).
    INVALID_ROLLOUT = "INVALID_ROLLOUT"
    """A rollout request with a field out of its range (see the field violations)."""
    ROLLOUT_OPEN = "ROLLOUT_OPEN"
    """Another rollout of the same stage is open (CANARY): promote or roll it back first."""
    ROLLOUT_NOT_OPEN = "ROLLOUT_NOT_OPEN"
    """The rollout was already promoted or rolled back."""
    RULESET_CURRENT_CHANGED = "RULESET_CURRENT_CHANGED"
    """A ledger entry recording that the current version of a ruleset name (the
    one a job naming no version is pinned to) changed: first seen, or promoted."""
    # Infrastructure.
    RETRY_LIMIT_REACHED = "RETRY_LIMIT_REACHED"
    FORGED_MESSAGE = "FORGED_MESSAGE"
    QUEUE_UNAVAILABLE = "QUEUE_UNAVAILABLE"
    STORAGE_UNAVAILABLE = "STORAGE_UNAVAILABLE"
    STORAGE_FAILED = "STORAGE_FAILED"
    DATA_KEY_UNAVAILABLE = "DATA_KEY_UNAVAILABLE"
    """A tenant's data key could not be unwrapped: no configured key-encryption key fits."""
    DEAD_LETTER_RETRIED = "DEAD_LETTER_RETRIED"
    DEAD_LETTER_NOT_FOUND = "DEAD_LETTER_NOT_FOUND"
    DEAD_LETTER_RESOLVED = "DEAD_LETTER_RESOLVED"
    DEPENDENCY_UNAVAILABLE = "DEPENDENCY_UNAVAILABLE"
    LEDGER_DAMAGED = "LEDGER_DAMAGED"
    """An entry of the tenant's ledger cannot be read as recorded bytes (a row
    rewritten in the database): no evidence or checkpoint is made over it;
    ``quire audit verify`` names the entry."""
    CHECKPOINT_INCONSISTENT = "CHECKPOINT_INCONSISTENT"
    """The witness refuses a checkpoint that does not extend the last one it
    cosigned for the log: a rewritten or forked history."""
    CHECKPOINT_SIGNATURE_INVALID = "CHECKPOINT_SIGNATURE_INVALID"
    """The witness refuses a checkpoint not signed by audit's checkpoint key."""
    SIGNING_FAILED = "SIGNING_FAILED"
    KEY_SOURCE_EXTERNAL = "KEY_SOURCE_EXTERNAL"
    INVALID_SETTING = "INVALID_SETTING"
    """A process was started with a setting it cannot use; it stops at once."""
    INTERNAL = "INTERNAL"
