import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from quire.type import job_pb2 as _job_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PageVariant(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PAGE_VARIANT_UNSPECIFIED: _ClassVar[PageVariant]
    PAGE_VARIANT_ORIGINAL: _ClassVar[PageVariant]
    PAGE_VARIANT_REWRITE: _ClassVar[PageVariant]
PAGE_VARIANT_UNSPECIFIED: PageVariant
PAGE_VARIANT_ORIGINAL: PageVariant
PAGE_VARIANT_REWRITE: PageVariant

class GetValidationRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class DocumentFinding(_message.Message):
    __slots__ = ("position", "sha256", "detected_type", "page_count", "reason_code")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    DETECTED_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    position: int
    sha256: str
    detected_type: str
    page_count: int
    reason_code: str
    def __init__(self, position: _Optional[int] = ..., sha256: _Optional[str] = ..., detected_type: _Optional[str] = ..., page_count: _Optional[int] = ..., reason_code: _Optional[str] = ...) -> None: ...

class RuleDecision(_message.Message):
    __slots__ = ("rule", "outcome", "reason_code", "detail", "position")
    RULE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    rule: str
    outcome: str
    reason_code: str
    detail: str
    position: int
    def __init__(self, rule: _Optional[str] = ..., outcome: _Optional[str] = ..., reason_code: _Optional[str] = ..., detail: _Optional[str] = ..., position: _Optional[int] = ...) -> None: ...

class Validation(_message.Message):
    __slots__ = ("job", "verdict", "reason_code", "documents", "lease_token", "ruleset_version", "ruleset_digest", "decisions")
    JOB_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RULESET_VERSION_FIELD_NUMBER: _ClassVar[int]
    RULESET_DIGEST_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    job: str
    verdict: str
    reason_code: str
    documents: _containers.RepeatedCompositeFieldContainer[DocumentFinding]
    lease_token: int
    ruleset_version: str
    ruleset_digest: str
    decisions: _containers.RepeatedCompositeFieldContainer[RuleDecision]
    def __init__(self, job: _Optional[str] = ..., verdict: _Optional[str] = ..., reason_code: _Optional[str] = ..., documents: _Optional[_Iterable[_Union[DocumentFinding, _Mapping]]] = ..., lease_token: _Optional[int] = ..., ruleset_version: _Optional[str] = ..., ruleset_digest: _Optional[str] = ..., decisions: _Optional[_Iterable[_Union[RuleDecision, _Mapping]]] = ...) -> None: ...

class Ruleset(_message.Message):
    __slots__ = ("version", "digest", "description", "body")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    version: str
    digest: str
    description: str
    body: str
    def __init__(self, version: _Optional[str] = ..., digest: _Optional[str] = ..., description: _Optional[str] = ..., body: _Optional[str] = ...) -> None: ...

class ListRulesetsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRulesetsResponse(_message.Message):
    __slots__ = ("rulesets", "next_page_token")
    RULESETS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    rulesets: _containers.RepeatedCompositeFieldContainer[Ruleset]
    next_page_token: str
    def __init__(self, rulesets: _Optional[_Iterable[_Union[Ruleset, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class Review(_message.Message):
    __slots__ = ("job", "status", "ruleset_version", "decisions", "operator", "note", "create_time", "resolve_time", "tenant", "sources")
    JOB_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RULESET_VERSION_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    RESOLVE_TIME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    job: str
    status: str
    ruleset_version: str
    decisions: _containers.RepeatedCompositeFieldContainer[RuleDecision]
    operator: str
    note: str
    create_time: _timestamp_pb2.Timestamp
    resolve_time: _timestamp_pb2.Timestamp
    tenant: str
    sources: _containers.RepeatedCompositeFieldContainer[ReviewSource]
    def __init__(self, job: _Optional[str] = ..., status: _Optional[str] = ..., ruleset_version: _Optional[str] = ..., decisions: _Optional[_Iterable[_Union[RuleDecision, _Mapping]]] = ..., operator: _Optional[str] = ..., note: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., resolve_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tenant: _Optional[str] = ..., sources: _Optional[_Iterable[_Union[ReviewSource, _Mapping]]] = ...) -> None: ...

class ReviewSource(_message.Message):
    __slots__ = ("position", "sha256", "detected_type", "page_count", "repaired", "rewrite_sha256", "damage_codes")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    DETECTED_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    REPAIRED_FIELD_NUMBER: _ClassVar[int]
    REWRITE_SHA256_FIELD_NUMBER: _ClassVar[int]
    DAMAGE_CODES_FIELD_NUMBER: _ClassVar[int]
    position: int
    sha256: str
    detected_type: str
    page_count: int
    repaired: bool
    rewrite_sha256: str
    damage_codes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, position: _Optional[int] = ..., sha256: _Optional[str] = ..., detected_type: _Optional[str] = ..., page_count: _Optional[int] = ..., repaired: _Optional[bool] = ..., rewrite_sha256: _Optional[str] = ..., damage_codes: _Optional[_Iterable[str]] = ...) -> None: ...

class ListReviewsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "tenant", "ruleset", "reason_code", "include_resolved")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    RULESET_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_RESOLVED_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    tenant: str
    ruleset: str
    reason_code: str
    include_resolved: bool
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., tenant: _Optional[str] = ..., ruleset: _Optional[str] = ..., reason_code: _Optional[str] = ..., include_resolved: _Optional[bool] = ...) -> None: ...

class GetReviewRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class ExplainReviewRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class ReviewFinding(_message.Message):
    __slots__ = ("rule", "outcome", "reason_code", "position", "subject", "expected", "found", "damage_codes")
    RULE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    DAMAGE_CODES_FIELD_NUMBER: _ClassVar[int]
    rule: str
    outcome: str
    reason_code: str
    position: int
    subject: str
    expected: str
    found: str
    damage_codes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, rule: _Optional[str] = ..., outcome: _Optional[str] = ..., reason_code: _Optional[str] = ..., position: _Optional[int] = ..., subject: _Optional[str] = ..., expected: _Optional[str] = ..., found: _Optional[str] = ..., damage_codes: _Optional[_Iterable[str]] = ...) -> None: ...

class ReviewExplanation(_message.Message):
    __slots__ = ("job", "findings")
    JOB_FIELD_NUMBER: _ClassVar[int]
    FINDINGS_FIELD_NUMBER: _ClassVar[int]
    job: str
    findings: _containers.RepeatedCompositeFieldContainer[ReviewFinding]
    def __init__(self, job: _Optional[str] = ..., findings: _Optional[_Iterable[_Union[ReviewFinding, _Mapping]]] = ...) -> None: ...

class RenderPageRequest(_message.Message):
    __slots__ = ("job", "position", "variant", "page", "width")
    JOB_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    PAGE_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    job: str
    position: int
    variant: PageVariant
    page: int
    width: int
    def __init__(self, job: _Optional[str] = ..., position: _Optional[int] = ..., variant: _Optional[_Union[PageVariant, str]] = ..., page: _Optional[int] = ..., width: _Optional[int] = ...) -> None: ...

class RenderedPage(_message.Message):
    __slots__ = ("png", "width", "height", "page_count")
    PNG_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    PAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    png: bytes
    width: int
    height: int
    page_count: int
    def __init__(self, png: _Optional[bytes] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., page_count: _Optional[int] = ...) -> None: ...

class ListReviewsResponse(_message.Message):
    __slots__ = ("reviews", "next_page_token")
    REVIEWS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    reviews: _containers.RepeatedCompositeFieldContainer[Review]
    next_page_token: str
    def __init__(self, reviews: _Optional[_Iterable[_Union[Review, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ResolveReviewRequest(_message.Message):
    __slots__ = ("job", "approve", "note", "operator", "request_id")
    JOB_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    job: str
    approve: bool
    note: str
    operator: str
    request_id: str
    def __init__(self, job: _Optional[str] = ..., approve: _Optional[bool] = ..., note: _Optional[str] = ..., operator: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class EvaluateManifestRequest(_message.Message):
    __slots__ = ("job", "ruleset")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RULESET_FIELD_NUMBER: _ClassVar[int]
    job: str
    ruleset: str
    def __init__(self, job: _Optional[str] = ..., ruleset: _Optional[str] = ...) -> None: ...

class Evaluation(_message.Message):
    __slots__ = ("job", "ruleset_version", "ruleset_digest", "verdict", "reason_code", "documents", "decisions")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RULESET_VERSION_FIELD_NUMBER: _ClassVar[int]
    RULESET_DIGEST_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    job: str
    ruleset_version: str
    ruleset_digest: str
    verdict: str
    reason_code: str
    documents: _containers.RepeatedCompositeFieldContainer[DocumentFinding]
    decisions: _containers.RepeatedCompositeFieldContainer[RuleDecision]
    def __init__(self, job: _Optional[str] = ..., ruleset_version: _Optional[str] = ..., ruleset_digest: _Optional[str] = ..., verdict: _Optional[str] = ..., reason_code: _Optional[str] = ..., documents: _Optional[_Iterable[_Union[DocumentFinding, _Mapping]]] = ..., decisions: _Optional[_Iterable[_Union[RuleDecision, _Mapping]]] = ...) -> None: ...

class ListSourceWaitsRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class ListSourceWaitsResponse(_message.Message):
    __slots__ = ("waits",)
    WAITS_FIELD_NUMBER: _ClassVar[int]
    waits: _containers.RepeatedCompositeFieldContainer[_job_pb2.SourceWait]
    def __init__(self, waits: _Optional[_Iterable[_Union[_job_pb2.SourceWait, _Mapping]]] = ...) -> None: ...
