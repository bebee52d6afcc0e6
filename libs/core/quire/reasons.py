"""Reason codes: stable UPPER_SNAKE strings shared by the API, the ledger and metrics.

A reason code is part of Quire's contract with its callers; never rename one.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ReasonCode"]


class ReasonCode(StrEnum):
    # Authentication and tenancy.
    UNAUTHENTICATED = "UNAUTHENTICATED"
    """The call carries no valid credential: a missing, unknown or revoked bearer
    token, no operator token where one is required, or a service's caller proof that is
    malformed or replayed (UNAUTHENTICATED, HTTP 401); call again with a valid token."""
    NOT_FOUND = "NOT_FOUND"
    """No such resource for this caller: a job, batch, review, ruleset or tenant that
    does not exist or is another tenant's, an RPC this service does not serve, or an unknown
    HTTP path (NOT_FOUND, HTTP 404)."""
    INVALID_TENANT = "INVALID_TENANT"
    """A tenant or source-system administration request Quire cannot take: a tenant
    name that is empty, too long or taken, a negative quota or retention period, a scheduling
    weight out of range, or a source-system registration the field violations say is wrong
    (INVALID_ARGUMENT)."""
    CSRF_TOKEN_INVALID = "CSRF_TOKEN_INVALID"
    """A console form came back without the secret the console put in it (a
    forged cross-site post, or a page opened before the session it was served
    in ended): refused, nothing done (HTTP 403); open the page again."""
    CALLER_NOT_ALLOWED = "CALLER_NOT_ALLOWED"
    """The caller proved who it is, but this RPC does not admit it: a service
    calling an RPC not meant for it, or a call that needs an operator token (PERMISSION_DENIED,
    HTTP 403)."""
    REVIEWER_NOT_ALLOWED = "REVIEWER_NOT_ALLOWED"
    """A reviewer's token on a call other than a review's: a reviewer may list,
    read, explain, see the pages of and resolve parked jobs' reviews, and nothing else (dead
    letters, diagnostics, exports, rollouts, tenants, tokens, keys and every other operator
    call are refused, PERMISSION_DENIED, HTTP 403); ask an operator."""
    # Uploads.
    UPLOAD_HEADER_MISSING = "UPLOAD_HEADER_MISSING"
    """An upload without its declaration: an UploadSource stream whose first
    message is not the header or that sends a second one, or an HTTP upload without
    Content-Length (INVALID_ARGUMENT, HTTP 411); upload again with it."""
    SIZE_EXCEEDS_DECLARATION = "SIZE_EXCEEDS_DECLARATION"
    """An upload sent more bytes than its header (or Content-Length) declared; nothing is kept
    (INVALID_ARGUMENT, HTTP 413). Upload again, declaring the true size."""
    SIZE_BELOW_DECLARATION = "SIZE_BELOW_DECLARATION"
    """An upload declared a size of zero or less, or ended with fewer bytes
    than it declared; nothing is kept (INVALID_ARGUMENT). Upload it again, whole."""
    SIZE_LIMIT_EXCEEDED = "SIZE_LIMIT_EXCEEDED"
    """An upload declared more bytes than the tenant may send in one source
    (its own limit, else ``QUIRE_MAX_UPLOAD_BYTES``) (INVALID_ARGUMENT, HTTP 413)."""
    CONTENT_TYPE_NOT_ALLOWED = "CONTENT_TYPE_NOT_ALLOWED"
    """An upload declared a content type Quire does not take (it takes
    application/pdf and application/json) (INVALID_ARGUMENT, HTTP 415)."""
    DIGEST_MISMATCH = "DIGEST_MISMATCH"
    """Bytes and their sha256 disagree: a declared digest that is not 64 lower-case
    hex digits, an upload whose bytes hash otherwise, or a digest already stored with another
    size (INVALID_ARGUMENT; upload again). A stored source or packet that no longer matches its
    digest ends the job REJECTED."""
    UPLOAD_IDLE_TIMEOUT = "UPLOAD_IDLE_TIMEOUT"
    """An upload stalled: nothing, or fewer bytes than
    ``QUIRE_UPLOAD_MIN_BYTES_PER_SECOND`` allows, arrived within ``QUIRE_UPLOAD_IDLE_SECONDS``, or
    it took longer than ``QUIRE_UPLOAD_MAX_SECONDS`` in all; nothing is kept (INVALID_ARGUMENT).
    Upload again."""
    TENANT_UPLOADS_EXCEEDED = "TENANT_UPLOADS_EXCEEDED"
    """The tenant already has as many uploads open on this admission
    process as it may (``QUIRE_MAX_TENANT_UPLOADS``) (RESOURCE_EXHAUSTED, HTTP 429); retry after
    the RetryInfo delay."""
    UPLOADS_IN_FLIGHT_EXCEEDED = "UPLOADS_IN_FLIGHT_EXCEEDED"
    """The admission process holds as many open uploads
    (``QUIRE_MAX_UPLOADS_IN_FLIGHT``) or declared bytes in flight
    (``QUIRE_UPLOAD_BYTES_IN_FLIGHT``) as it may (RESOURCE_EXHAUSTED, HTTP 429); retry after the
    RetryInfo delay."""
    TENANT_TEMP_SHARE_EXCEEDED = "TENANT_TEMP_SHARE_EXCEEDED"
    """The upload's declared size would take the tenant's open uploads
    past its share of the bytes in flight (``QUIRE_TENANT_UPLOAD_SHARE_BYTES``)
    (RESOURCE_EXHAUSTED, HTTP 429); retry once its other uploads have finished."""
    STORAGE_QUOTA_EXCEEDED = "STORAGE_QUOTA_EXCEEDED"
    """The upload would take the tenant's stored uploads past its storage quota."""
    UPLOAD_INTERRUPTED = "UPLOAD_INTERRUPTED"
    """The gateway's stream to admission broke before admission's answer could be
    read (admission answers before the end of an upload only to refuse it); upload again."""
    # Manifests and idempotency.
    INVALID_MANIFEST = "INVALID_MANIFEST"
    """A job, batch or operator request with fields Quire cannot take: a manifest
    item, ruleset, source system, bundle_id, batch manifest or inline source that the field
    violations say is wrong (INVALID_ARGUMENT); fix the request and send it again."""
    INLINE_SOURCES_TOO_LARGE = "INLINE_SOURCES_TOO_LARGE"
    """A SubmitJob's inline sources exceed the inline limit in all: upload them."""
    INLINE_SOURCE_UNUSED = "INLINE_SOURCE_UNUSED"
    """A SubmitJob carries a source no manifest item names."""
    INVALID_REQUEST = "INVALID_REQUEST"
    """An HTTP request the gateway cannot translate (its body or parameters do not fit the API)."""
    REQUEST_ID_MISSING = "REQUEST_ID_MISSING"
    """SubmitJob or SubmitBatch without a request_id (over HTTP, the
    Idempotency-Key): one is required so that a retried call is not taken twice
    (INVALID_ARGUMENT)."""
    REQUEST_ID_TOO_LONG = "REQUEST_ID_TOO_LONG"
    """A request_id longer than 128 characters (INVALID_ARGUMENT)."""
    REQUEST_ID_INVALID = "REQUEST_ID_INVALID"
    """A request_id with a control, format or other unprintable character."""
    REQUEST_ID_RESERVED = "REQUEST_ID_RESERVED"
    """SubmitJob with a request_id in the prefix batch packets' jobs use."""
    INVALID_PAGE = "INVALID_PAGE"
    """A list or watch request that cannot be served as asked: a negative page_size
    or after_sequence, a page_token not issued for this request and its filters, too many names
    in one BatchGetJobs, or a follow id already in use on the stream (INVALID_ARGUMENT)."""
    COLLECTION_NOT_HELD = "COLLECTION_NOT_HELD"
    """ExportRecords asks a service for a collection of records it does not own
    (INVALID_ARGUMENT): each collection has one owner (``quire.export.v1``)."""
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
    """A request_id used before, within
    ``QUIRE_IDEMPOTENCY_WINDOW_SECONDS``, for a different request (ALREADY_EXISTS, HTTP 409):
    send a new id, or the same request to get its first answer again."""
    # Completion notifications.
    INVALID_NOTIFICATION_URL = "INVALID_NOTIFICATION_URL"
    """A callback URL that is not https (or http to loopback where allowed), too long,
    or carries a user name, password or fragment."""
    # Load shedding.
    TENANT_QUOTA_EXCEEDED = "TENANT_QUOTA_EXCEEDED"
    """SubmitJob when the tenant has as many unfinished jobs as it may (its
    own limit, else ``QUIRE_MAX_OUTSTANDING_JOBS``) (RESOURCE_EXHAUSTED, HTTP 429); retry when
    some have finished."""
    QUEUE_BACKLOG = "QUEUE_BACKLOG"
    """SubmitJob while the pipeline is behind: the oldest ready job of the same
    priority has waited longer than ``QUIRE_QUEUE_AGE_BUDGET_SECONDS`` (RESOURCE_EXHAUSTED,
    HTTP 429); retry after the RetryInfo delay."""
    WATCHES_EXCEEDED = "WATCHES_EXCEEDED"
    """The process holds as many open WatchJob streams as it may (QUIRE_MAX_WATCHES)."""
    TENANT_WATCHES_EXCEEDED = "TENANT_WATCHES_EXCEEDED"
    """The tenant holds its share of the process's WatchJob streams (QUIRE_MAX_TENANT_WATCHES)."""
    SERVICE_DRAINING = "SERVICE_DRAINING"
    """The service is shutting down; a WatchJob stream ended UNAVAILABLE, watch again."""
    TEMP_SPACE_LOW = "TEMP_SPACE_LOW"
    """Admission's temporary space is low, so it takes no new upload or job for now
    (RESOURCE_EXHAUSTED, HTTP 429); retry after the RetryInfo delay."""
    # Job lifecycle.
    CANCELLED_BY_CLIENT = "CANCELLED_BY_CLIENT"
    """The job ended CANCELLED: its client cancelled it before signing
    began."""
    CANCEL_TOO_LATE = "CANCEL_TOO_LATE"
    """A cancel that lost: signing had begun or the job had ended, so nothing
    changed. CancelJob answers the job as audit records it (its state is not
    CANCELLED); the CLI, the Python client and the HTTP gateway name the
    outcome with this code."""
    JOB_CANCELLED = "JOB_CANCELLED"
    """An operator's action on a job its client cancelled: resolving its review or
    retrying its dead letter changes nothing (FAILED_PRECONDITION)."""
    JOB_NOT_COMPLETED = "JOB_NOT_COMPLETED"
    """DownloadArtifact for a job that has not COMPLETED, so it has no artifact
    (FAILED_PRECONDITION, HTTP 409); wait for the job to complete."""
    ARTIFACT_DIGEST_MISMATCH = "ARTIFACT_DIGEST_MISMATCH"
    """The signed artifact does not hash to its recorded digest: the job
    ends FAILED when audit finds so at completion, and a download is refused (DATA_LOSS). Ask an
    operator."""
    ARTIFACT_MISSING = "ARTIFACT_MISSING"
    """The signed artifact is not in storage: the job ends FAILED when audit finds
    it missing at completion; the HTTP gateway answers 404 when a download brings no bytes."""
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
    """A dead-letter retry before audit has recorded the job's failure
    (FAILED_PRECONDITION); try again shortly."""
    # Validation.
    TYPE_MISMATCH = "TYPE_MISMATCH"
    """A source's first bytes are not of its declared content type (or the same
    bytes were uploaded before with another type): an upload is refused (INVALID_ARGUMENT), a
    job is REJECTED."""
    ENCRYPTED_PDF = "ENCRYPTED_PDF"
    """A PDF that is encrypted or password-protected, which Quire cannot inspect:
    the job is REJECTED. Submit it unencrypted."""
    MALFORMED_PDF = "MALFORMED_PDF"
    """A PDF that does not open cleanly, or is damaged in a way Quire does not repair
    (or the ruleset allows no repair): the job is REJECTED, with the damage code as the reason
    detail."""
    CYCLIC_STRUCTURE = "CYCLIC_STRUCTURE"
    """A page tree, outline, form-field tree, name or number tree, annotation chain,
    function or object-stream chain that leads back to itself, or a form, pattern,
    appearance or soft mask that draws itself: refused before anything walks it."""
    PARSER_LIMIT_EXCEEDED = "PARSER_LIMIT_EXCEEDED"
    """Checking a source used up its sandbox (memory, CPU time, wall time,
    or it crashed the worker) and did so again when retried: the job is REJECTED. Split or
    simplify the source."""
    TOO_MANY_PAGES = "TOO_MANY_PAGES"
    """A PDF with more pages than the validator takes (``QUIRE_MAX_PAGES``, 2000 by
    default): the job is REJECTED."""
    DECOMPRESSED_SIZE_EXCEEDED = "DECOMPRESSED_SIZE_EXCEEDED"
    """A PDF whose streams decompress to more than the validator takes
    (``QUIRE_MAX_DECOMPRESSED_BYTES``, 256 MiB in all by default): the job is REJECTED."""
    ACTIVE_CONTENT = "ACTIVE_CONTENT"
    """A PDF carrying active content (JavaScript, launch or remote actions, embedded
    files, rich media, XFA forms) that the job's ruleset does not allow: the job is REJECTED."""
    SOURCE_MISSING = "SOURCE_MISSING"
    """A stored source is not in storage when a stage reads it (it was removed
    after the job was accepted): the job is REJECTED. Upload the source again and resubmit."""
    SCHEMA_INVALID = "SCHEMA_INVALID"
    """A JSON source that is not a JSON object, or that the ruleset's schema (or a
    rule reading its amounts) refuses: the job is REJECTED."""
    RULESET_UNKNOWN = "RULESET_UNKNOWN"
    """The job's ruleset version is not published on the validator (the job is
    REJECTED), or a rollout's candidate ruleset is not loaded when it is promoted
    (FAILED_PRECONDITION: roll it back)."""
    REQUIRED_FIELD_MISSING = "REQUIRED_FIELD_MISSING"
    """A ruleset's required_field rule found the field filled in no PDF of
    the job: the job is REJECTED."""
    REQUIRED_CLAUSE_MISSING = "REQUIRED_CLAUSE_MISSING"
    """A ruleset's required_clause rule found its clause in no PDF of the
    job: the job is REJECTED."""
    TOTAL_MISMATCH = "TOTAL_MISMATCH"
    """A JSON invoice's declared total is not its lines' quantities times unit
    prices plus tax, to the cent (the invoice_totals rule): the job is REJECTED."""
    CURRENCY_INVALID = "CURRENCY_INVALID"
    """A required_value rule naming this code (a shipped invoice ruleset's
    currency rule) found a currency outside its list: the job is REJECTED."""
    TAX_ID_INVALID = "TAX_ID_INVALID"
    """A required_value rule naming this code (a shipped invoice ruleset's seller
    tax id rule) found a tax id not of the required form: the job is REJECTED."""
    QUANTITY_INVALID = "QUANTITY_INVALID"
    """A JSON source's line whose quantity is missing, not a number or not
    positive (the positive_quantities rule): the job is REJECTED."""
    REQUIRED_VALUE_INVALID = "REQUIRED_VALUE_INVALID"
    """A required_value rule naming no code of its own found the value at
    its path missing, empty, not among its allowed values or not matching its pattern: the job
    is REJECTED."""
    REVIEW_REQUIRED = "REVIEW_REQUIRED"
    """The job waits in NEEDS_REVIEW: a rule, a repaired source or two readings
    that disagree ask for a person's decision; an operator approves or rejects it
    (``quire review``)."""
    REVIEW_REJECTED = "REVIEW_REJECTED"
    """The job ended REJECTED because an operator rejected its review."""
    REVIEW_ALREADY_RESOLVED = "REVIEW_ALREADY_RESOLVED"
    """A review decision after another operator had decided the other way
    (FAILED_PRECONDITION): the first decision stands."""
    PAGE_OUT_OF_RANGE = "PAGE_OUT_OF_RANGE"
    """RenderPage asked for a page the source does not have: pages count from 1
    to the page_count of the variant asked for, and a structured (JSON) source has none
    (INVALID_ARGUMENT)."""
    WIDTH_OUT_OF_RANGE = "WIDTH_OUT_OF_RANGE"
    """RenderPage asked for an image narrower than 200 or wider than 1600 pixels
    (0 means 800) (INVALID_ARGUMENT)."""
    SOURCE_NOT_REPAIRED = "SOURCE_NOT_REPAIRED"
    """RenderPage asked for the rewrite of a source the validator did not repair:
    only a repaired source has one; ask for the original (NOT_FOUND)."""
    RENDER_LIMIT_EXCEEDED = "RENDER_LIMIT_EXCEEDED"
    """ExplainReview or RenderPage cannot show a review's source within its limits:
    the source is larger than the validator decrypts in memory to show it (64 MiB), or the page
    would make an image past what RenderPage returns (40 megapixels, a 3 MiB PNG; ask for a
    narrower width) (FAILED_PRECONDITION)."""
    RENDER_UNAVAILABLE = "RENDER_UNAVAILABLE"
    """No longer given: before the assembler could render structured (JSON)
    sources, it REJECTED jobs that had them with this code. Kept for the jobs and ledger entries
    that carry it."""
    # Sources named by reference, fetched from a tenant's source systems.
    SOURCE_SCHEMA_INVALID = "SOURCE_SCHEMA_INVALID"
    """A fetched JSON source is not the structure its system's schema requires
    (a review verdict: REJECTED, never retried)."""
    SOURCE_NOT_FOUND = "SOURCE_NOT_FOUND"
    """The source system has no record under the key (HTTP 404 or 410): REJECTED."""
    SOURCE_TOO_LARGE = "SOURCE_TOO_LARGE"
    """A fetch brought more bytes than the system's limit; nothing of it is kept: REJECTED."""
    SOURCE_REFUSED = "SOURCE_REFUSED"
    """The source system refused the credential (HTTP 401 or 403), answered a status retrying
    cannot change, or cannot be called as registered (its address, credential or body encoding
    is not usable): FAILED, not retried; fix the source system's registration."""
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
    """The job ended FAILED: every delivery of a stage's task met a transient
    error. Its dead letter waits for an operator: ``quire diagnose`` shows what the tries met,
    ``quire dlq retry`` runs it again."""
    FORGED_MESSAGE = "FORGED_MESSAGE"
    """A queue message no trusted producer signed for its subject, or a task that
    contradicts what audit recorded: it is dropped and no job changes (operators see it in the
    logs)."""
    QUEUE_UNAVAILABLE = "QUEUE_UNAVAILABLE"
    """NATS JetStream did not answer: a publish failed, a queue could not be read
    or the job gate could not be reached (UNAVAILABLE); stages retry, and a caller may retry
    later."""
    STORAGE_UNAVAILABLE = "STORAGE_UNAVAILABLE"
    """The blob store could not be read or written just now (NATS did not
    answer, an I/O error) (UNAVAILABLE); stages retry with backoff, and a caller may retry
    later."""
    DATABASE_UNAVAILABLE = "DATABASE_UNAVAILABLE"
    """The service's database could not be reached, dropped the connection or
    stayed locked (UNAVAILABLE); a caller may retry later, and stages retry
    with backoff."""
    STORAGE_FAILED = "STORAGE_FAILED"
    """Storage refuses writes (read-only, permission denied): the job ends FAILED at
    once, as retrying cannot help until an operator fixes the storage and retries it
    (``quire dlq retry``)."""
    DATA_KEY_UNAVAILABLE = "DATA_KEY_UNAVAILABLE"
    """A tenant's data key could not be unwrapped: no configured key-encryption key fits."""
    DEAD_LETTER_RETRIED = "DEAD_LETTER_RETRIED"
    """A ledger entry recording that an operator retried the FAILED job's dead
    letter (``quire dlq retry``): the job goes back before the stage that gave up, as a new
    generation."""
    DEAD_LETTER_NOT_FOUND = "DEAD_LETTER_NOT_FOUND"
    """No dead letter is kept for this job (NOT_FOUND)."""
    DEAD_LETTER_RESOLVED = "DEAD_LETTER_RESOLVED"
    """The dead letter was already resolved the other way: a retry of one
    that was discarded, or a discard of one that was retried (FAILED_PRECONDITION)."""
    DEPENDENCY_UNAVAILABLE = "DEPENDENCY_UNAVAILABLE"
    """A service the call or task needs did not answer, or has not yet
    recorded what it needs (audit behind a stage, say) (UNAVAILABLE); stages retry, and a caller
    may retry later."""
    CLOCK_SKEW = "CLOCK_SKEW"
    """A service's call was refused because its clock and the called
    service's differ by more than the skew Quire tolerates (a caller proof
    more than 60 s from the receiver's time; ``quire.callers``) (UNAVAILABLE):
    one of the two hosts' clocks is wrong; the call succeeds again once it is
    set right, and stages retry meanwhile."""
    LEDGER_DAMAGED = "LEDGER_DAMAGED"
    """An entry of the tenant's ledger cannot be read as recorded bytes (a row
    rewritten in the database): no evidence or checkpoint is made over it;
    ``quire audit verify`` names the entry."""
    CHECKPOINT_INCONSISTENT = "CHECKPOINT_INCONSISTENT"
    """The witness refuses a checkpoint that does not extend the last one it
    cosigned for the log: a rewritten or forked history. An evidence export given a
    checkpoint larger than the tenant's log is refused with it too (FAILED_PRECONDITION)."""
    CHECKPOINT_SIGNATURE_INVALID = "CHECKPOINT_SIGNATURE_INVALID"
    """The witness refuses a checkpoint not signed by audit's checkpoint key."""
    SIGNING_FAILED = "SIGNING_FAILED"
    """The signer found the job's artifact already stored but not verifying with any
    of its keys; it never overwrites one, so the task is retried until it is dead-lettered. Ask an
    operator."""
    KEY_SOURCE_EXTERNAL = "KEY_SOURCE_EXTERNAL"
    """RotateKey on a signer whose key lives in a PKCS#11 token
    (FAILED_PRECONDITION): rotate the key in the token, then configure the new one."""
    INVALID_SETTING = "INVALID_SETTING"
    """A process was started with a setting it cannot use; it stops at once."""
    INTERNAL = "INTERNAL"
    """An unexpected error inside Quire (INTERNAL, HTTP 500, with no more said), or a job's
    ending on a state a stage should never meet. Nothing the caller sends can fix it: ask an
    operator, who finds the cause in the service's logs."""
