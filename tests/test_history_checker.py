"""The history checker (issue 42, "What must be shown" 3): fed a history and
the system's facts built by hand, it reports each broken property naming
the job (a lost job, a duplicate signature, a contradicted state, a broken
chain, a job stuck running, an untyped refusal, a duplicated submit), and a
clean history passes every property."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import grpc
import pytest

from quire.pipeline import State
from quire.reasons import ReasonCode
from quire.testing.history import (
    PROPERTIES,
    History,
    HistoryLog,
    Kind,
    Op,
    Rpc,
    SystemFacts,
    check,
    verdicts_markdown,
)
from quire.testing.history.facts import (
    Artifact,
    Evidence,
    JobRecord,
    LedgerEntry,
    LedgerFinding,
    LedgerVerification,
    Signed,
)
from quire.testing.history.ops import HistoryDamaged

PATH = (
    State.ACCEPTED,
    State.VALIDATING,
    State.REVIEWING,
    State.ASSEMBLING,
    State.SIGNING,
    State.COMMITTING,
    State.COMPLETED,
)
CERTIFICATE = "c" * 64
GRACE = 30.0


def _digest(job: str) -> str:
    return (job.removeprefix("jobs/") * 64)[:64]


def _entries(job: str, states: tuple[str, ...], start: int) -> list[LedgerEntry]:
    """One entry per state, from sequence ``start``; SIGNING's successors carry the digest."""
    entries = []
    for offset, state in enumerate(states):
        signed = state in (State.COMMITTING, State.COMPLETED)
        entries.append(
            LedgerEntry(
                sequence=start + offset,
                event_id=f"{job}-{offset}",
                job=job,
                tenant="t1",
                from_state=states[offset - 1] if offset else "UNSPECIFIED",
                to_state=state,
                reason_code="",
                output_digest=_digest(job) if signed else "",
                decodes=True,
                columns_match=True,
            )
        )
    return entries


def _record(job: str, states: tuple[str, ...] = PATH, start: int = 1) -> JobRecord:
    """A job as a healthy system holds it after ``states``."""
    entries = tuple(_entries(job, states, start))
    done = State.COMPLETED in states
    views = tuple(_views(states))
    return JobRecord(
        job=job,
        tenant="t1",
        state=views[-1],
        entries=entries,
        views=views,
        signature_records=(_digest(job),) if done else (),
        signature=Signed(_digest(job), CERTIFICATE, "v1") if done else None,
        artifact=Artifact(_digest(job), 1, True, CERTIFICATE) if done else None,
        evidence=Evidence((), tuple(states)),
    )


def _views(states: tuple[str, ...]) -> list[str]:
    """The fold's state after each entry, for the simple paths used here (a
    retry's new generation starts again after FAILED)."""
    return list(states)


class Client:
    """Writes one client process's history by hand, its clock a counter."""

    def __init__(self, process: str, clock: list[float]) -> None:
        self.process = process
        self.clock = clock
        self.ops: list[Op] = []

    def _op(self, kind: Kind, rpc: Rpc, call: int | None = None, **said: object) -> int:
        self.clock[0] += 1.0
        index = len(self.ops)
        self.ops.append(
            Op(
                self.process,
                index,
                kind,
                rpc,
                index if call is None else call,
                self.clock[0],
                1.7e9 + self.clock[0],
                **said,  # type: ignore[arg-type]
            )
        )
        return index

    def submit(self, request_id: str, job: str) -> None:
        call = self._op(Kind.INVOKE, Rpc.SUBMIT, request_id=request_id)
        self._op(Kind.ACCEPTED, Rpc.SUBMIT, call, request_id=request_id, job=job, state="ACCEPTED")

    def refused(
        self, rpc: Rpc, code: str, reason: str = "", *, retryable: bool = False, **said: str
    ) -> None:
        call = self._op(Kind.INVOKE, rpc, **said)
        self._op(Kind.REFUSED, rpc, call, code=code, reason=reason, retryable=retryable, **said)

    def watch(self, job: str, states: tuple[str, ...] = PATH, start: int = 1) -> None:
        call = self._op(Kind.INVOKE, Rpc.WATCH, job=job)
        for offset, state in enumerate(states):
            self._op(Kind.OBSERVED, Rpc.WATCH, call, job=job, state=state, sequence=start + offset)

    def get(self, job: str, state: str) -> None:
        call = self._op(Kind.INVOKE, Rpc.GET, job=job)
        self._op(Kind.OBSERVED, Rpc.GET, call, job=job, state=state)

    def fetch(self, job: str, digest: str | None = None) -> None:
        call = self._op(Kind.INVOKE, Rpc.DOWNLOAD, job=job)
        self._op(Kind.FETCHED, Rpc.DOWNLOAD, call, job=job, digest=digest or _digest(job))


def _history(*clients: Client) -> History:
    return History(tuple(op for client in clients for op in client.ops))


def _facts(*records: JobRecord, **changes: object) -> SystemFacts:
    facts = SystemFacts(
        jobs={record.job: record for record in records},
        ledger=LedgerVerification(ok=True, entries=21, chains=1, checkpoints_checked=1),
        grace_seconds=GRACE,
        tenants=("t1",),
    )
    return dataclasses.replace(facts, **changes)  # type: ignore[arg-type]


def _clean() -> tuple[list[Client], list[JobRecord]]:
    """Three jobs, two clients: each job submitted, watched to the end,
    read and fetched; one submit refused UNAVAILABLE (typed, retryable) and
    sent again under its request id."""
    clock = [0.0]
    one, two = Client("client-1", clock), Client("client-2", clock)
    one.refused(Rpc.SUBMIT, "UNAVAILABLE", "QUEUE_UNAVAILABLE", request_id="r1", retryable=True)
    one.submit("r1", "jobs/a")
    one.submit("r2", "jobs/b")
    two.submit("r3", "jobs/c")
    records = []
    for index, job in enumerate(("jobs/a", "jobs/b", "jobs/c")):
        start = 1 + index * len(PATH)
        client = two if job == "jobs/c" else one
        client.watch(job, PATH, start)
        two.get(job, "COMPLETED")
        client.fetch(job)
        records.append(_record(job, PATH, start))
    return [one, two], records


def _violations(history: History, facts: SystemFacts, name: str) -> dict[str, list[str]]:
    verdicts = check(history, facts)
    by_subject: dict[str, list[str]] = {}
    for violation in verdicts[name].violations:
        by_subject.setdefault(violation.subject, []).append(violation.detail)
    others = [v.prop.name for v in verdicts.violated() if v.prop.name != name]
    assert others == [], verdicts.summary()
    return by_subject


def test_a_clean_history_holds_every_property() -> None:
    clients, records = _clean()
    verdicts = check(_history(*clients), _facts(*records))
    assert verdicts.ok, verdicts.summary()
    assert [v.prop for v in verdicts] == list(PROPERTIES)
    assert verdicts["ended"].checked == 3
    assert verdicts["refusals_typed"].checked == 1
    assert verdicts["no_contradiction"].checked == 3 * len(PATH) + 3


def test_a_lost_job_is_reported() -> None:
    clients, records = _clean()
    clients[0].submit("r4", "jobs/d")
    found = _violations(_history(*clients), _facts(*records), "ended")
    assert found == {"jobs/d": ["acknowledged, never in the ledger"]}


def test_a_job_the_ledger_holds_nothing_of_is_lost_too() -> None:
    clients, records = _clean()
    records[1] = JobRecord("jobs/b")
    verdicts = check(_history(*clients), _facts(*records))
    assert verdicts["ended"].subjects == ["jobs/b"]
    assert "jobs/b" in verdicts["no_contradiction"].subjects, "its states were seen"


def test_a_job_stuck_running_after_the_grace_period_is_reported() -> None:
    clients, records = _clean()
    clients[0].submit("r4", "jobs/d")
    stuck = _record("jobs/d", PATH[:4], start=100)
    found = _violations(_history(*clients), _facts(*records, stuck), "ended")
    assert found == {"jobs/d": ["still ASSEMBLING after the 30 s grace period"]}


def test_two_terminal_entries_of_one_generation_are_reported() -> None:
    clients, records = _clean()
    twice = _record("jobs/b", (*PATH, State.FAILED), start=8)
    views = (*twice.views[:-1], State.COMPLETED)  # the fold keeps the completion
    records[1] = dataclasses.replace(twice, views=views, state=State.COMPLETED)
    found = _violations(_history(*clients), _facts(*records), "ended")
    assert found == {"jobs/b": ["2 terminal entries in generation 0: COMPLETED, FAILED"]}


def test_admission_disagreeing_with_the_ledger_is_reported() -> None:
    clients, records = _clean()
    records[2] = dataclasses.replace(records[2], state="SIGNING")
    verdicts = check(_history(*clients), _facts(*records))
    assert [(v.subject, v.detail) for v in verdicts["ended"].violations] == [
        ("jobs/c", "admission shows SIGNING, the ledger COMPLETED")
    ]


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"signature_records": ("x" * 64, "y" * 64)}, "2 signature records"),
        ({"artifact": Artifact("a" * 64, 2, False, "")}, "2 signatures in the artifact"),
        ({"signature": None}, "GetSignature finds none"),
        (
            {"artifact": Artifact("a" * 64, 1, False, CERTIFICATE)},
            "the artifact's signature does not verify against the signer's keys",
        ),
    ],
    ids=["two-records", "two-in-the-artifact", "no-record", "unverified"],
)
def test_a_duplicate_or_missing_signature_is_reported(
    change: dict[str, object], detail: str
) -> None:
    clients, records = _clean()
    records[0] = dataclasses.replace(records[0], **change)  # type: ignore[arg-type]
    verdicts = check(_history(*clients), _facts(*records))
    assert verdicts["one_signature"].subjects == ["jobs/a"]
    assert detail in [v.detail for v in verdicts["one_signature"].violations]


def test_two_signed_digests_in_the_ledger_are_a_duplicate_signature() -> None:
    clients, records = _clean()
    job = records[1]
    resigned = dataclasses.replace(job.entries[5], output_digest="e" * 64)
    records[1] = dataclasses.replace(job, entries=(*job.entries[:5], resigned, job.entries[6]))
    verdicts = check(_history(*clients), _facts(*records))
    assert verdicts["one_signature"].subjects == ["jobs/b"]
    assert "the ledger records 2 signed digests" in verdicts.summary()


def test_a_client_fetching_other_bytes_is_reported() -> None:
    clients, records = _clean()
    clients[1].fetch("jobs/c", "f" * 64)
    found = _violations(_history(*clients), _facts(*records), "one_signature")
    assert found == {"jobs/c": ["a client fetched other bytes than the ledger's digest"]}


def test_a_signature_of_a_job_that_did_not_complete_is_reported() -> None:
    clients, records = _clean()
    clients[0].submit("r4", "jobs/d")
    cancelled = _record("jobs/d", (*PATH[:4], State.CANCELLED), start=100)
    cancelled = dataclasses.replace(cancelled, signature_records=("d" * 64,))
    found = _violations(_history(*clients), _facts(*records, cancelled), "one_signature")
    assert found == {"jobs/d": ["ended CANCELLED, yet the signer keeps a signature of it"]}


def test_the_signers_intent_alone_is_no_signature_of_a_failed_job() -> None:
    """The signer records its intent before it signs; a job that failed
    afterwards (its artifact never stored, on a full disk) keeps the intent,
    which has no digest: nothing was signed, nothing is reported."""
    clients, records = _clean()
    clients[0].submit("r4", "jobs/d")
    failed = _record("jobs/d", (*PATH[:5], State.FAILED), start=100)
    failed = dataclasses.replace(failed, signature_records=("",))
    assert _violations(_history(*clients), _facts(*records, failed), "one_signature") == {}


def test_a_completion_without_its_whole_history_is_reported() -> None:
    clients, records = _clean()
    skipped = tuple(s for s in PATH if s != State.SIGNING)
    records[2] = _record("jobs/c", skipped, start=15)
    clients = [Client("client-3", [100.0])]
    clients[0].submit("r3", "jobs/c")
    found = _violations(_history(*clients), _facts(*records), "history_whole")
    assert found == {"jobs/c": ["completed at sequence 20 without SIGNING"]}


def test_a_history_out_of_order_is_reported() -> None:
    clients, records = _clean()
    job = records[0]
    swapped = (job.entries[0], job.entries[1], job.entries[3], job.entries[2], *job.entries[4:])
    swapped = tuple(
        dataclasses.replace(entry, sequence=index + 1) for index, entry in enumerate(swapped)
    )
    records[0] = dataclasses.replace(job, entries=swapped)
    verdicts = check(History(()), _facts(*records))
    assert [(v.subject, v.detail) for v in verdicts["history_whole"].violations] == [
        ("jobs/a", "ASSEMBLING (sequence 3) before REVIEWING (4)")
    ]


def test_a_contradicted_state_is_reported() -> None:
    """Client 1 saw the job COMPLETED; client 2 asked after that, and was told SIGNING."""
    clients, records = _clean()
    clients[1].get("jobs/a", "SIGNING")
    found = _violations(_history(*clients), _facts(*records), "no_contradiction")
    assert found == {"jobs/a": ["seen COMPLETED (client-1), then SIGNING (client-2)"]}


def test_a_read_answered_late_is_no_contradiction() -> None:
    """A read asked before the completion was seen may still show SIGNING."""
    clock = [0.0]
    one, two = Client("client-1", clock), Client("client-2", clock)
    one.submit("r1", "jobs/a")
    read = two._op(Kind.INVOKE, Rpc.GET, job="jobs/a")  # noqa: SLF001
    one.watch("jobs/a")
    two._op(Kind.OBSERVED, Rpc.GET, read, job="jobs/a", state="SIGNING")  # noqa: SLF001
    verdicts = check(_history(one, two), _facts(_record("jobs/a")))
    assert verdicts.ok, verdicts.summary()


def test_a_completion_the_ledger_later_lost_is_reported() -> None:
    clients, records = _clean()
    records[0] = _record("jobs/a", PATH[:-1])
    verdicts = check(_history(*clients), _facts(*records))
    found = {v.detail for v in verdicts["no_contradiction"].violations}
    assert verdicts["no_contradiction"].subjects == ["jobs/a"]
    assert "seen COMPLETED at sequence 7, where it has no ledger entry" in found
    assert "seen COMPLETED (GetJob), a state the ledger never gave it" in found
    assert "seen COMPLETED (client-1); the ledger ends it COMMITTING" in found


def test_a_watch_showing_another_state_than_the_ledger_is_reported() -> None:
    clients, records = _clean()
    clients[0].watch("jobs/b", (State.ASSEMBLING,), start=9)
    found = _violations(_history(*clients), _facts(*records), "no_contradiction")
    assert found == {"jobs/b": ["seen ASSEMBLING at sequence 9; the ledger shows VALIDATING there"]}


def test_a_dead_letter_retry_may_take_a_job_back() -> None:
    """FAILED, an operator's retry, then assembled again and completed."""
    states = (*PATH[:4], State.FAILED, State.ASSEMBLING, *PATH[4:])
    record = _record("jobs/a", states)
    clock = [0.0]
    one = Client("client-1", clock)
    one.submit("r1", "jobs/a")
    one.get("jobs/a", "FAILED")
    one.get("jobs/a", "ASSEMBLING")
    one.get("jobs/a", "COMPLETED")
    one.fetch("jobs/a")
    # The retry entry is the one that goes FAILED -> ASSEMBLING.
    entries = list(record.entries)
    entries[5] = dataclasses.replace(
        entries[5], from_state=State.FAILED, reason_code=ReasonCode.DEAD_LETTER_RETRIED.value
    )
    entries[4] = dataclasses.replace(entries[4], reason_code="RETRY_LIMIT_REACHED")
    record = dataclasses.replace(record, entries=tuple(entries))
    verdicts = check(_history(one), _facts(record))
    assert verdicts.ok, verdicts.summary()
    without_retry = dataclasses.replace(
        record, entries=tuple(dataclasses.replace(e, reason_code="") for e in entries)
    )
    assert not check(_history(one), _facts(without_retry))["no_contradiction"].holds


def test_a_broken_chain_is_reported() -> None:
    clients, records = _clean()
    broken = LedgerVerification(
        ok=False, entries=21, chains=1, findings=(LedgerFinding("edited", 9, "t1", "jobs/b"),)
    )
    found = _violations(_history(*clients), _facts(*records, ledger=broken), "ledger_verifies")
    assert found == {"jobs/b": ["VerifyLedger: edited (tenant t1)"]}


def test_evidence_that_does_not_verify_is_reported() -> None:
    clients, records = _clean()
    refused = Evidence(("entry 3 is not in the signed log",), ())
    records[2] = dataclasses.replace(records[2], evidence=refused)
    found = _violations(_history(*clients), _facts(*records), "ledger_verifies")
    assert found == {"jobs/c": ["evidence: entry 3 is not in the signed log"]}


def test_entries_the_evidence_does_not_prove_are_reported() -> None:
    clients, records = _clean()
    records[1] = dataclasses.replace(records[1], evidence=Evidence((), PATH[:-1]))
    found = _violations(_history(*clients), _facts(*records), "ledger_verifies")
    assert found == {"jobs/b": ["ListJobEvents lists entries its evidence does not prove"]}


@pytest.mark.parametrize(
    ("code", "reason", "detail"),
    [
        ("INVALID_ARGUMENT", "", "SubmitJob INVALID_ARGUMENT without a reason code"),
        ("INTERNAL", "INTERNAL", "SubmitJob INTERNAL INTERNAL: an unexpected error, not a refusal"),
        ("UNKNOWN", "", "SubmitJob UNKNOWN (no reason): an unexpected error, not a refusal"),
        (
            "RESOURCE_EXHAUSTED",
            "TENANT_JOBS_EXCEEDED",
            "SubmitJob RESOURCE_EXHAUSTED TENANT_JOBS_EXCEEDED without a retry hint",
        ),
        (
            "FAILED_PRECONDITION",
            "QUEUE_UNAVAILABLE",
            "SubmitJob FAILED_PRECONDITION QUEUE_UNAVAILABLE: a transient fault refused as final",
        ),
    ],
)
def test_an_untyped_or_unretryable_refusal_is_reported(code: str, reason: str, detail: str) -> None:
    clients, records = _clean()
    retryable = code == "RESOURCE_EXHAUSTED"
    clients[0].refused(Rpc.SUBMIT, code, reason, request_id="r9", retryable=retryable)
    found = _violations(_history(*clients), _facts(*records), "refusals_typed")
    assert found == {"request r9": [detail]}


def test_a_refusal_about_a_job_names_the_job() -> None:
    clients, records = _clean()
    clients[1].refused(Rpc.GET, "PERMISSION_DENIED", job="jobs/b")
    found = _violations(_history(*clients), _facts(*records), "refusals_typed")
    assert found == {"jobs/b": ["GetJob PERMISSION_DENIED without a reason code"]}


@pytest.mark.parametrize("code", ["UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"])
def test_a_service_out_of_reach_is_no_untyped_refusal(code: str) -> None:
    clients, records = _clean()
    clients[0].refused(Rpc.SUBMIT, code, request_id="r1", retryable=code != "CANCELLED")
    verdicts = check(_history(*clients), _facts(*records))
    assert verdicts.ok, verdicts.summary()


def test_a_duplicated_submit_is_reported() -> None:
    """One request id acknowledged with two jobs."""
    clients, records = _clean()
    clients[1].submit("r1", "jobs/d")
    clients[1].watch("jobs/d", start=100)
    clients[1].fetch("jobs/d")
    found = _violations(
        _history(*clients), _facts(*records, _record("jobs/d", start=100)), "one_job_per_request"
    )
    assert found == {"request r1": ["acknowledged with 2 jobs: jobs/a, jobs/d"]}


def test_one_job_answering_two_request_ids_is_reported() -> None:
    clients, records = _clean()
    clients[1].submit("r9", "jobs/b")
    found = _violations(_history(*clients), _facts(*records), "one_job_per_request")
    assert found == {"jobs/b": ["acknowledged for 2 request ids"]}


def test_a_job_accepted_for_no_client_is_a_duplicate() -> None:
    """Every submit was answered, yet admission accepted one job more."""
    clients, records = _clean()
    found = _violations(
        _history(*clients), _facts(*records, unclaimed=("jobs/e",)), "one_job_per_request"
    )
    assert found == {"jobs/e": ["accepted for no client: 1 such jobs for 0 unanswered request ids"]}


def test_a_submit_never_answered_may_leave_a_job_unclaimed() -> None:
    clients, records = _clean()
    clients[0].refused(Rpc.SUBMIT, "UNAVAILABLE", request_id="r5", retryable=True)
    verdicts = check(_history(*clients), _facts(*records, unclaimed=("jobs/e",)))
    assert verdicts.ok, verdicts.summary()


def test_the_report_says_each_verdict_and_names_the_jobs() -> None:
    clients, records = _clean()
    clients[0].submit("r4", "jobs/d")
    text = verdicts_markdown(check(_history(*clients), _facts(*records)))
    assert text.startswith("## History check: 1 of 7 violated\n")
    assert "| `ended` | every acknowledged job reached" in text
    assert "**violated** | 4 acknowledged jobs | `jobs/d` |" in text
    assert "| `one_signature` | each completed job has exactly one signature" in text
    assert "### `ended` violated\n\n- `jobs/d`: acknowledged, never in the ledger\n" in text
    clean = verdicts_markdown(check(_history(*_clean()[0]), _facts(*_clean()[1])))
    assert clean.startswith("## History check: every property holds\n")
    assert clean.count("| holds |") == len(PROPERTIES)


def test_a_history_round_trips_through_its_files(tmp_path: Path) -> None:
    with HistoryLog(tmp_path / "c1.jsonl", "c1") as log:
        call = log.invoke(Rpc.SUBMIT, request_id="r1")
        log.record(Kind.ACCEPTED, Rpc.SUBMIT, call=call, request_id="r1", job="jobs/a")
        log.record(Kind.OBSERVED, Rpc.WATCH, call=call, job="jobs/a", state="SIGNING", sequence=4)
    with HistoryLog(tmp_path / "c2.jsonl", "c2") as log:
        log.record(Kind.REFUSED, Rpc.GET, job="jobs/a", code="UNAVAILABLE", retry_after=1.5)
    history = History.read(tmp_path.glob("*.jsonl"))
    assert [(op.process, op.index, op.kind) for op in history.ops] == [
        ("c1", 0, Kind.INVOKE),
        ("c1", 1, Kind.ACCEPTED),
        ("c1", 2, Kind.OBSERVED),
        ("c2", 0, Kind.REFUSED),
    ]
    assert history.ops[2].sequence == 4 and history.ops[3].retry_after == 1.5
    assert history.invoked_at(history.ops[1]) == history.ops[0].monotonic
    assert '"job"' not in (tmp_path / "c1.jsonl").read_text().splitlines()[0], "defaults left out"


def test_a_torn_last_line_is_skipped_and_counted(tmp_path: Path) -> None:
    with HistoryLog(tmp_path / "c1.jsonl", "c1") as log:
        log.invoke(Rpc.SUBMIT, request_id="r1")
    with (tmp_path / "c1.jsonl").open("a") as handle:
        handle.write('{"call":1,"index":1,"kind":"acc')  # killed mid-line
    history = History.read([tmp_path / "c1.jsonl"])
    assert len(history.ops) == 1 and history.torn == 1


def test_a_damaged_line_inside_a_history_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c1.jsonl"
    with HistoryLog(path, "c1") as log:
        log.invoke(Rpc.SUBMIT, request_id="r1")
    path.write_text("not json\n" + path.read_text())
    with pytest.raises(HistoryDamaged, match="line 1"):
        History.read([path])


def test_the_gatherer_asks_again_while_told_to_and_no_longer_when_refused() -> None:
    """A read refused as transient (a replica just healed) is asked again;
    any other refusal is the gatherer's error at once."""
    from grpc.aio import AioRpcError, Metadata

    from quire.testing.history import gather

    def refusal(code: grpc.StatusCode) -> AioRpcError:
        return AioRpcError(code, Metadata(), Metadata(), "said")

    answers: list[object] = [refusal(grpc.StatusCode.UNAVAILABLE)] * 2 + ["read"]
    calls = 0

    async def read() -> object:
        nonlocal calls
        calls += 1
        answer = answers.pop(0)
        if isinstance(answer, AioRpcError):
            raise answer
        return answer

    assert asyncio.run(gather.patiently(read)) == "read" and calls == 3
    answers[:] = [refusal(grpc.StatusCode.PERMISSION_DENIED), "never"]
    with pytest.raises(AioRpcError):
        asyncio.run(gather.patiently(read))
    assert answers == ["never"]
