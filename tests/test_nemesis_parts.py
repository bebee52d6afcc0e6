"""The nemesis's parts that need no cluster: the seeded plan, which jobs
were in flight at a strike (from a history, from a replica's spans), the
fenced results a replica's log names, and a schedule's report."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

from quire.testing.history import History, Kind, Op, Rpc
from quire.testing.history.verdicts import PROPERTIES, Verdict, Verdicts
from quire.testing.nemesis.catalogue import KINDS as CATALOGUE_KINDS
from quire.testing.nemesis.catalogue import faults
from quire.testing.nemesis.fault import FaultRecord, Timeline
from quire.testing.nemesis.inflight import in_flight, open_calls, taken_unfinished, worked_on
from quire.testing.nemesis.leasecut import fenced_after
from quire.testing.nemesis.report import schedule_markdown, timeline_png
from quire.testing.nemesis.run import QueueSample, ScheduleResult, client_targets
from quire.testing.nemesis.scheduler import Nemesis, Planned, plan

KINDS = list(CATALOGUE_KINDS)


def test_a_seed_plans_the_same_schedule_every_time_and_every_kind_before_a_second() -> None:
    strikes = len(KINDS) + 2
    first = plan(7, KINDS, strikes=strikes, jobs=40, hold=(2.0, 5.0))
    assert first == plan(7, KINDS, strikes=strikes, jobs=40, hold=(2.0, 5.0))
    assert first != plan(8, KINDS, strikes=strikes, jobs=40, hold=(2.0, 5.0))
    assert sorted(p.kind for p in first[: len(KINDS)]) == sorted(KINDS)
    marks = [p.after_acknowledged for p in first]
    assert marks == sorted(marks) and 1 <= marks[0] and marks[-1] <= 30
    assert all(2.0 <= p.hold <= 5.0 and 0 <= p.pick < 1 for p in first)
    assert [f.kind for f in faults(["lease-cut", "kill-nats"])] == ["lease-cut", "kill-nats"]


class _FlickeringWork:
    """A fault whose targets take a moment to find, beside a workload whose
    one job in flight ends while they are found and a next one starts later."""

    kind = "kill-replica"

    def __init__(self) -> None:
        self.answers = [("jobs/a",), (), (), ("jobs/b",)]
        self.looks: list[tuple[float, tuple[str, ...]]] = []
        self.struck_at: float | None = None

    def in_flight(self) -> tuple[str, ...]:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        self.looks.append((time.monotonic(), answer))
        return answer

    def targets(self, cluster: object) -> list[str]:
        return ["validator-2"]

    async def strike(self, cluster: object, target: str) -> dict[str, str]:
        self.struck_at = time.monotonic()
        return {}

    async def heal(self, cluster: object, target: str) -> None:
        return None


def test_a_strike_waits_again_when_the_work_it_waited_for_ended_while_targets_were_found() -> None:
    fault = _FlickeringWork()
    nemesis = Nemesis(
        object(),  # type: ignore[arg-type]  # the fault asks nothing of it
        [fault],  # type: ignore[list-item]
        [Planned(fault.kind, 0, 0.0, 0.0)],
        Timeline(1),
        acknowledged=lambda: 1,
        in_flight=fault.in_flight,
    )
    timeline = asyncio.run(nemesis.run(asyncio.Event()))
    (record,) = timeline.records
    assert record.target == "validator-2" and fault.struck_at is not None
    # The last look before the strike saw work; the empty looks came before it.
    before = [answer for at, answer in fault.looks if at <= record.start]
    assert before[-1] == ("jobs/b",), fault.looks
    assert () in before


def _op(index: int, kind: Kind, at: float, job: str, state: str = "") -> Op:
    rpc = Rpc.SUBMIT if kind is Kind.ACCEPTED else Rpc.GET
    return Op("client-0", index, kind, rpc, index, at, at, job=job, state=state)


def test_in_flight_is_acknowledged_and_not_yet_seen_ended() -> None:
    history = History(
        (
            _op(0, Kind.ACCEPTED, 1.0, "jobs/a"),
            _op(1, Kind.ACCEPTED, 2.0, "jobs/b"),
            _op(2, Kind.OBSERVED, 3.0, "jobs/a", "COMPLETED"),
            _op(3, Kind.OBSERVED, 3.5, "jobs/b", "SIGNING"),
            _op(4, Kind.OBSERVED, 6.0, "jobs/b", "REJECTED"),
        )
    )
    assert in_flight(history, 0.5) == ()
    assert in_flight(history, 2.5) == ("jobs/a", "jobs/b")
    assert in_flight(history, 4.0) == ("jobs/b",)
    assert in_flight(history, 7.0) == ()


def test_worked_on_names_the_jobs_whose_spans_were_open_and_counts_open_calls(
    tmp_path: Path,
) -> None:
    spans = [
        {"name": "signer.process", "start_ns": 10 * 10**9, "end_ns": 20 * 10**9,
         "attributes": {"quire.job": "01open"}},
        {"name": "signer.process", "start_ns": 1 * 10**9, "end_ns": 5 * 10**9,
         "attributes": {"quire.job": "01done"}},
        {"name": "/quire.admission.v1.AdmissionService/WatchJob", "start_ns": 10 * 10**9,
         "end_ns": 20 * 10**9, "attributes": {}},
    ]  # fmt: skip
    (tmp_path / "spans.jsonl").write_text("".join(json.dumps(s) + "\n" for s in spans) + "{torn")
    assert worked_on([tmp_path, tmp_path / "missing"], 15.0) == ("jobs/01open",)
    assert open_calls([tmp_path], 15.0) == 1 and open_calls([tmp_path], 30.0) == 0


def test_a_killed_replica_held_the_deliveries_it_took_and_never_finished(
    tmp_path: Path,
) -> None:
    def span(name: str, end: int, job: str, attempt: int) -> dict[str, object]:
        attributes = {"quire.job": job, "quire.attempt": attempt}
        return {"name": name, "start_ns": 0, "end_ns": end * 10**9, "attributes": attributes}

    spans = [
        span("validate.queue_wait", 1, "01done", 1),
        span("validator.process", 4, "01done", 1),
        span("validate.queue_wait", 6, "01held", 1),  # taken; the kill at 10 s came first
        span("validate.queue_wait", 7, "01again", 1),
        span("validator.process", 8, "01again", 1),  # its first attempt ended (a retry)...
        span("validate.queue_wait", 9, "01again", 2),  # ...its second was held
        span("validate.queue_wait", 2, "01stuck", 1),  # never finished (its ack cut off)...
        span("validate.queue_wait", 5, "01stuck", 2),
        span("validator.process", 6, "01stuck", 2),  # ...but the next attempt ended
        span("validate.queue_wait", 12, "01later", 1),  # after the restart
    ]
    (tmp_path / "spans.jsonl").write_text("".join(json.dumps(s) + "\n" for s in spans))
    assert taken_unfinished([tmp_path], 10.0) == ("jobs/01again", "jobs/01held")
    assert taken_unfinished([tmp_path], 3.0) == ("jobs/01done", "jobs/01stuck")


def test_clients_are_given_every_replica_once_starting_from_each() -> None:
    class Replicas:
        def replicas(self, service: str) -> list[SimpleNamespace]:
            return [SimpleNamespace(address=f"10.0.0.{n}:50051") for n in (1, 2, 3)]

    assert client_targets(Replicas(), "admission") == [  # type: ignore[arg-type]
        "ipv4:10.0.0.1:50051,10.0.0.2:50051,10.0.0.3:50051",
        "ipv4:10.0.0.2:50051,10.0.0.3:50051,10.0.0.1:50051",
        "ipv4:10.0.0.3:50051,10.0.0.1:50051,10.0.0.2:50051",
    ]


def test_fenced_after_reads_the_stale_lease_lines_after_the_strike(tmp_path: Path) -> None:
    def line(when: float, message: str) -> str:
        moment = datetime.fromtimestamp(when, UTC).isoformat(timespec="milliseconds")
        return json.dumps({"time": moment.replace("+00:00", "Z"), "message": message})

    now = time.time()
    (tmp_path / "service.log").write_text(
        "\n".join(
            [
                line(now - 60, "stale lease for job jobs/01before (token 3); result discarded"),
                line(now + 1, "job jobs/01x done at attempt 2"),
                line(now + 2, "stale lease for job jobs/01after (token 4); result discarded"),
                line(now + 3, "stale lease for job jobs/01after (token 4); result discarded"),
                line(now + 90, "stale lease for job jobs/01later (token 2); result discarded"),
                "not json",
            ]
        )
    )
    assert fenced_after(tmp_path, now, now + 60) == ["jobs/01after"]
    assert fenced_after(tmp_path, now) == ["jobs/01after", "jobs/01later"]


def test_a_schedules_report_says_the_seed_the_verdicts_and_each_strike(tmp_path: Path) -> None:
    started = 100.0
    history = History(
        (
            _op(0, Kind.ACCEPTED, 101.0, "jobs/01a"),
            _op(1, Kind.OBSERVED, 104.0, "jobs/01a", "COMPLETED"),
        )
    )
    record = FaultRecord(
        "nats-minority",
        "nats-2",
        102.0,
        103.5,
        detail={"clients_on_it": "signer-1"},
        on_target=("jobs/01a",),
        in_flight=("jobs/01a",),
    )
    result = ScheduleResult(
        seed=42,
        planned=plan(42, ["nats-minority"], strikes=1, jobs=4, hold=(1.0, 2.0)),
        timeline=Timeline(42, started, [record]),
        history=history,
        verdicts=Verdicts(tuple(Verdict(prop, 1, ()) for prop in PROPERTIES)),
        started=started,
        seconds=6.0,
        queues=[QueueSample(101.0, 2, 0.5), QueueSample(102.0, 3, 1.5)],
    )
    markdown = schedule_markdown(result, "seed-42.png")
    assert "seed 42: clean" in markdown and "make partitions SEEDS=42" in markdown
    assert "| 1 | `nats-minority` | nats-2 | 2.0 | 3.5 | clients_on_it=signer-1 " in markdown
    assert "| 1: `01a` | 1: `01a` |" in markdown and "](seed-42.png)" in markdown
    timeline_png(result, tmp_path / "seed-42.png")
    assert (tmp_path / "seed-42.png").read_bytes()[:4] == b"\x89PNG"
