"""Every RPC of every service and who may call it — one table per service.

Reads of one job's records are open to admission (the front door, the one
service that answers tenants, after checking the job is theirs) and to
operators. Every write, and every read that spans tenants, needs an
operator; the review calls admit reviewers too (``STAFF``), and nothing else
does. Admission's own API keeps its bearer tokens, checked by its
servicers. An RPC missing here is refused to everyone; the caller-auth tests
enumerate the generated service descriptors, so a new RPC fails them until
it has a rule.
"""

from __future__ import annotations

from collections.abc import Mapping

from quire.access import BEARER, OPERATOR, STAFF, Rule, read_by

__all__ = ["POLICIES", "policy_for"]

ADMISSION = "admission"
FRONT_DOOR_READ = read_by(ADMISSION)


def _service(name: str, rules: Mapping[str, Rule]) -> dict[str, Rule]:
    return {f"/{name}/{method}": rule for method, rule in rules.items()}


DIAGNOSTICS = _service(
    "quire.diagnostics.v1.DiagnosticsService",
    # Every stage's kept error texts: operators only, each read recorded.
    {"ListDiagnostics": OPERATOR},
)
"""Served by every stage process (validator, assembler, signer)."""

EXPORT = _service(
    "quire.export.v1.ExportService",
    # Every tenant's records, for `quire check` and `quire retention`: operators only.
    {"ExportRecords": OPERATOR},
)
"""Served by every service; admission's is in its own table, below."""


POLICIES: Mapping[str, Mapping[str, Rule]] = {
    "admission": {
        **_service(
            "quire.admission.v1.AdmissionService",
            {
                "UploadSource": BEARER,
                "SubmitJob": BEARER,
                "GetJob": BEARER,
                "WatchJob": BEARER,
                "DownloadArtifact": BEARER,
                "ListJobs": BEARER,
                "CancelJob": BEARER,
                "SubmitBatch": BEARER,
                "GetBatch": BEARER,
                "ListBatchJobs": BEARER,
                "CancelBatch": BEARER,
                "SetNotificationEndpoint": BEARER,
                "GetNotificationEndpoint": BEARER,
                "ListNotificationAttempts": BEARER,
                "GetJobEvidence": BEARER,  # asks audit for the tenant's own job only
            },
        ),
        **_service(
            "quire.admission.v1.TenantAdminService",
            {
                "CreateTenant": BEARER,
                "ListTenants": BEARER,
                "UpdateTenantLimits": BEARER,
                "CreateToken": BEARER,
                "RevokeToken": BEARER,
                # Audit and validator forward an operator's token here.
                "WhoAmI": BEARER,
                "UpdateTenantRetention": BEARER,
                "ForgetSource": BEARER,  # `quire retention apply`, operator token
                "PutSourceSystem": BEARER,  # `quire sources`, operator token
                "ListSourceSystems": BEARER,
                "DeleteSourceSystem": BEARER,
                "StartRollout": BEARER,  # `quire rollout`, operator token
                "GetRollout": BEARER,
                "ListRollouts": BEARER,
                "PromoteRollout": BEARER,
                "RollbackRollout": BEARER,
                "ListCurrentRulesets": BEARER,
                # The operator console's reads: operators only (the servicer checks).
                "ListQueues": BEARER,
                "ListTenantBatches": BEARER,
                "GetTenantBatch": BEARER,
                "ListTenantBatchJobs": BEARER,
            },
        ),
        # Admission owns the operator tokens: its servicer checks them itself.
        **_service("quire.export.v1.ExportService", {"ExportRecords": BEARER}),
    },
    "audit": _service(
        "quire.audit.v1.AuditService",
        {
            # The assembler and the signer confirm a job before acting (quire.authority).
            "GetJob": read_by(ADMISSION, "assembler", "signer"),
            "WatchJob": FRONT_DOOR_READ,
            "FollowJobs": FRONT_DOOR_READ,  # admission's one stream of its relayed watches
            "BatchGetJobs": FRONT_DOOR_READ,
            "ListJobEvents": FRONT_DOOR_READ,
            # Admission names the tenant it authenticated (audit checks it
            # against the job's entries); an export for no tenant needs an operator.
            "ExportEvidence": FRONT_DOOR_READ,
            "GetCheckpointKey": FRONT_DOOR_READ,  # published: `quire audit key`
            "VerifyLedger": OPERATOR,  # every tenant's chain
            "ListDeadLetters": OPERATOR,  # every tenant's failed jobs
            "RetryDeadLetter": OPERATOR,
            "DiscardDeadLetter": OPERATOR,
            "RecordRetirement": OPERATOR,  # `quire retention apply`
            "CompareTracks": OPERATOR,  # `quire rollout status`: every tenant's jobs
            # Admission keeps each ruleset's current version and records its changes.
            "RecordRulesetChange": Rule(callers=frozenset({ADMISSION})),
        },
    )
    | EXPORT,
    "validator": _service(
        "quire.validator.v1.ValidatorService",
        {
            "GetValidation": FRONT_DOOR_READ,
            "ListRulesets": FRONT_DOOR_READ,  # admission pins a job's ruleset
            # Every tenant's parked jobs: operators and reviewers.
            "ListReviews": STAFF,
            "GetReview": STAFF,
            "ResolveReview": STAFF,
            "ExplainReview": STAFF,  # document values, computed in the sandbox
            "RenderPage": STAFF,  # page images, drawn in the sandbox
            "EvaluateManifest": OPERATOR,  # shadow evaluation runs the sandbox
            "ListSourceWaits": FRONT_DOOR_READ,  # a job's status while it waits
        },
    )
    | DIAGNOSTICS
    | EXPORT,
    "assembler": _service(
        "quire.assembler.v1.AssemblerService",
        {"GetAssembly": FRONT_DOOR_READ},
    )
    | DIAGNOSTICS
    | EXPORT,
    "signer": _service(
        "quire.signer.v1.SignerService",
        {
            "GetSignature": FRONT_DOOR_READ,
            "ListKeys": FRONT_DOOR_READ,
            "RotateKey": OPERATOR,
        },
    )
    | _service(
        # The witness of audit's checkpoints runs in the signer's process.
        "quire.witness.v1.WitnessService",
        {
            "AddCheckpoint": Rule(callers=frozenset({"audit"}), operator=False),
            "GetWitnessKey": FRONT_DOOR_READ,  # published: `quire witness key`
        },
    )
    | DIAGNOSTICS
    | EXPORT,
}


def policy_for(service: str) -> Mapping[str, Rule]:
    """``service``'s table; a service without one admits no call at all."""
    return POLICIES.get(service, {})
