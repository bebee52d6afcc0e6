"""The operator tools ask, and check what they are told (DESIGN.md:
"The operator tools (``quire check``, retention) ask too, and verify the
answers").

Each service's records are served here by its real exporter
(``ExportServicer`` over the service's own collections) on 127.0.0.1, from
a copy of a real run's databases (tests/test_invariants.py's stopped run),
and ``quire check`` reads them through its client as it reads a running
stack's. A server that edits its answer in flight stands for a service (or
a database behind it) that lies: the check reports each lie by the kind it
would report the same damage in the database, and trusts none of it.

The export API itself pages within its bounds, binds a page token to its
collection, refuses a collection the service does not own with a typed
reason, and answers an operator's token only.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from sqlalchemy import MetaData
from test_invariants import FinishedRun, finished_run

from quire.admission import records as admission_records
from quire.assembler import records as assembler_records
from quire.audit import records as audit_records
from quire.database import Database
from quire.errors import Unauthenticated
from quire.export.v1 import export_service_pb2 as pb
from quire.export.v1 import export_service_pb2_grpc as pb_grpc
from quire.exportrecords import Collections
from quire.exportservice import ExportServicer
from quire.grpcstatus import details_of, reason_of
from quire.invariants import check
from quire.paging import PageTokens
from quire.settings import service_address_var
from quire.signer import records as signer_records
from quire.type import queue_pb2
from quire.validator import records as validator_records

pytestmark = pytest.mark.stack

OPERATOR_TOKEN = "operator-token-for-this-test"
Tamper = Callable[[pb.ExportRecordsResponse], None]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> FinishedRun:
    """The session's stopped run with one job of each outcome (shared with
    tests/test_invariants.py)."""
    return finished_run(tmp_path_factory)


@pytest.fixture
def copy(run: FinishedRun, tmp_path: Path) -> Path:
    """A private copy of the run's data directory with no ``stack.json``: a
    stack the checker finds by its addresses alone, as a cluster's."""
    target = tmp_path / "data"
    shutil.copytree(run.data_dir, target, ignore=shutil.ignore_patterns("nats", "logs"))
    (target / "stack.json").unlink()
    return target


async def _operator_only(context: grpc.aio.ServicerContext) -> str:
    metadata = dict(context.invocation_metadata() or ())
    if metadata.get("authorization") != f"Bearer {OPERATOR_TOKEN}":
        raise Unauthenticated("an operator token is required")
    return "operator"


class TamperingExport(ExportServicer):
    """The service's own exporter, whose answers ``tamper`` may edit."""

    def __init__(self, *args: object, tamper: Tamper | None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._tamper = tamper

    async def ExportRecords(  # noqa: N802 - gRPC method name
        self, request: pb.ExportRecordsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ExportRecordsResponse:
        response = await super().ExportRecords(request, context)
        if self._tamper is not None:
            self._tamper(response)
        return response


def _collections(data_dir: Path) -> dict[str, Collections]:
    env = {"QUIRE_DATA_DIR": str(data_dir)}
    return {
        "admission": admission_records.collections(),
        "validator": validator_records.collections(),
        "assembler": assembler_records.collections(),
        "signer": signer_records.collections(),
        "audit": audit_records.stored_collections(env),
    }


@dataclass
class Served:
    addresses: dict[str, str]
    tampers: dict[str, Tamper]

    def env(self) -> dict[str, str]:
        found = {service_address_var(s): a for s, a in self.addresses.items()}
        return {**found, "QUIRE_OPERATOR_TOKEN": OPERATOR_TOKEN}


async def _serve(data_dir: Path, served: Served, stop: asyncio.Event) -> None:
    servers, databases = [], []
    try:
        for service, collections in _collections(data_dir).items():
            # The exporters name their own tables: the database creates none.
            database = Database(f"sqlite:///{data_dir / service / f'{service}.db'}", MetaData())
            databases.append(database)
            server = grpc.aio.server()
            pb_grpc.add_ExportServiceServicer_to_server(
                TamperingExport(
                    database,
                    collections,
                    authorize=_operator_only,
                    pages=PageTokens.ephemeral(),
                    domain=f"{service}.quire",
                    tamper=_Later(served, service),
                ),
                server,
            )
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            servers.append(server)
            served.addresses[service] = f"127.0.0.1:{port}"
        await stop.wait()
    finally:
        for server in servers:
            await server.stop(grace=None)
        for database in databases:
            database.close()


class _Later:
    """Calls whatever tamper the test sets for ``service``, when it sets one."""

    def __init__(self, served: Served, service: str) -> None:
        self._served, self._service = served, service

    def __call__(self, response: pb.ExportRecordsResponse) -> None:
        tamper = self._served.tampers.get(self._service)
        if tamper is not None:
            tamper(response)


@pytest.fixture
def served(copy: Path) -> Iterator[Served]:
    """Each service's exporter over ``copy``'s databases, on a loop of its
    own; stopped when the test ends."""
    served = Served({}, {})
    ready, done = threading.Event(), threading.Event()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    async def main() -> None:
        task = asyncio.create_task(_serve(copy, served, stop))
        while len(served.addresses) < 5 and not task.done():
            await asyncio.sleep(0.01)
        ready.set()
        await task

    thread = threading.Thread(target=lambda: (loop.run_until_complete(main()), done.set()))
    thread.start()
    assert ready.wait(30), "the exporters serve"
    try:
        yield served
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        loop.close()


def _check(copy: Path, served: Served) -> set[tuple[str, str, str]]:
    return {(f.kind, f.job, f.detail) for f in check(copy, env=served.env()).findings}


def _ledger_rows(response: pb.ExportRecordsResponse) -> list[pb.LedgerRow]:
    if response.collection != pb.COLLECTION_LEDGER_ROWS:
        return []
    return [record.ledger_row for record in response.records]


def _event(row: pb.LedgerRow) -> queue_pb2.TransitionEvent:
    return queue_pb2.TransitionEvent.FromString(row.event)


def _row_of(job: str, to_state: str) -> Callable[[pb.LedgerRow], bool]:
    return lambda row: row.job == job and row.to_state == to_state


def test_honest_answers_through_the_api_pass_the_check(copy: Path, served: Served) -> None:
    report = check(copy, env=served.env())
    assert report.findings == [], report.findings
    assert not report.stopped, "no stack.json: the services were asked, as a cluster's are"
    assert report.jobs_accepted == 4 and report.artifacts == 1
    assert report.checkpoints_checked >= 1, "audit's exported checkpoints were verified"


def test_an_event_edited_in_flight_breaks_the_chain(
    run: FinishedRun, copy: Path, served: Served
) -> None:
    job = run.jobs["COMPLETED"]
    edited: list[int] = []

    def tamper(response: pb.ExportRecordsResponse) -> None:
        for row in filter(_row_of(job, "SIGNING"), _ledger_rows(response)):
            event = _event(row)
            event.attempt += 1
            row.event = event.SerializeToString(deterministic=True)
            edited.append(row.sequence)

    served.tampers["audit"] = tamper
    report = check(copy, env=served.env())
    assert edited, "the answer was edited"
    assert ("ledger_edited", job, edited[0]) in {
        (f.kind, f.job, f.sequence) for f in report.findings
    }


def test_a_column_claimed_in_flight_is_held_to_its_event(
    run: FinishedRun, copy: Path, served: Served
) -> None:
    job = run.jobs["REJECTED"]
    edited: list[int] = []

    def tamper(response: pb.ExportRecordsResponse) -> None:
        for row in filter(_row_of(job, "REJECTED"), _ledger_rows(response)):
            row.reason_code = "TOTAL_MISMATCH"
            edited.append(row.sequence)

    served.tampers["audit"] = tamper
    report = check(copy, env=served.env())
    assert {(f.kind, f.job, f.sequence) for f in report.findings} == {
        ("ledger_row_mismatch", job, edited[0])
    }


def test_an_entry_left_out_of_the_answer_is_missing_from_the_chain(
    run: FinishedRun, copy: Path, served: Served
) -> None:
    job = run.jobs["REJECTED"]

    def tamper(response: pb.ExportRecordsResponse) -> None:
        kept = [r for r in response.records if not _row_of(job, "VALIDATING")(r.ledger_row)]
        if response.collection == pb.COLLECTION_LEDGER_ROWS:
            del response.records[:]
            response.records.extend(kept)

    served.tampers["audit"] = tamper
    kinds = {f.kind for f in check(copy, env=served.env()).findings}
    assert {"ledger_deleted", "ledger_checkpoint"} & kinds, kinds


def test_a_job_index_that_claims_completion_disagrees_with_the_ledger(
    run: FinishedRun, copy: Path, served: Served
) -> None:
    job = run.jobs["REJECTED"]

    def tamper(response: pb.ExportRecordsResponse) -> None:
        for record in response.records:
            if record.HasField("job_index") and record.job_index.job == job:
                record.job_index.state = "COMPLETED"

    served.tampers["audit"] = tamper
    found = _check(copy, served)
    assert ("job_view_mismatch", job, "state") in found
    assert ("view_state_mismatch", job, "view COMPLETED, ledger REJECTED") in found


def test_a_signature_record_claimed_in_flight_is_held_to_the_ledger(
    run: FinishedRun, copy: Path, served: Served
) -> None:
    job = run.jobs["COMPLETED"]

    def tamper(response: pb.ExportRecordsResponse) -> None:
        for record in response.records:
            if record.HasField("signature") and record.signature.job == job:
                record.signature.sha256 = "0" * 64

    served.tampers["signer"] = tamper
    assert _check(copy, served) == {("signature_record_mismatch", job, "")}


def test_a_packet_claimed_in_flight_is_held_to_the_signed_bytes(
    run: FinishedRun, copy: Path, served: Served
) -> None:
    job = run.jobs["COMPLETED"]

    def tamper(response: pb.ExportRecordsResponse) -> None:
        for record in response.records:
            if record.HasField("packet") and record.packet.job == job:
                record.packet.sha256 = "0" * 64

    served.tampers["assembler"] = tamper
    found = {(f.kind, f.job) for f in check(copy, env=served.env()).findings}
    assert ("artifact_input_mismatch", job) in found


def test_a_job_admission_leaves_out_is_not_accepted(
    run: FinishedRun, copy: Path, served: Served
) -> None:
    job = run.jobs["CANCELLED"]

    def tamper(response: pb.ExportRecordsResponse) -> None:
        kept = [r for r in response.records if r.accepted_job.job != job]
        del response.records[:]
        response.records.extend(kept)

    served.tampers["admission"] = tamper
    assert _check(copy, served) == {("job_not_accepted", job, "")}


# -- the export API ----------------------------------------------------------


@pytest.fixture
async def audit_stub(served: Served) -> AsyncIterator[pb_grpc.ExportServiceStub]:
    async with grpc.aio.insecure_channel(served.addresses["audit"]) as channel:
        yield pb_grpc.ExportServiceStub(channel)


OPERATOR = (("authorization", f"Bearer {OPERATOR_TOKEN}"),)


async def test_a_collection_is_served_in_pages_each_row_once(
    audit_stub: pb_grpc.ExportServiceStub,
) -> None:
    sequences: list[int] = []
    token, pages = "", 0
    while True:
        page = await audit_stub.ExportRecords(
            pb.ExportRecordsRequest(
                collection=pb.COLLECTION_LEDGER_ROWS, page_size=3, page_token=token
            ),
            metadata=OPERATOR,
        )
        assert len(page.records) <= 3 and page.service == "audit"
        assert page.collection == pb.COLLECTION_LEDGER_ROWS
        assert page.sequence_gaps_are_deletions, "SQLite: a gap is a deletion"
        sequences += [record.ledger_row.sequence for record in page.records]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    whole = await audit_stub.ExportRecords(
        pb.ExportRecordsRequest(collection=pb.COLLECTION_LEDGER_ROWS, page_size=1000),
        metadata=OPERATOR,
    )
    assert pages >= 5 and not whole.next_page_token
    assert sequences == [record.ledger_row.sequence for record in whole.records]
    assert sequences == sorted(set(sequences))


async def test_a_page_token_holds_for_its_own_collection_only(
    audit_stub: pb_grpc.ExportServiceStub,
) -> None:
    first = await audit_stub.ExportRecords(
        pb.ExportRecordsRequest(collection=pb.COLLECTION_LEDGER_ROWS, page_size=1),
        metadata=OPERATOR,
    )
    assert first.next_page_token
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await audit_stub.ExportRecords(
            pb.ExportRecordsRequest(
                collection=pb.COLLECTION_JOB_INDEX, page_token=first.next_page_token
            ),
            metadata=OPERATOR,
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(refused.value) == "INVALID_PAGE"
    with pytest.raises(grpc.aio.AioRpcError) as negative:
        await audit_stub.ExportRecords(
            pb.ExportRecordsRequest(collection=pb.COLLECTION_LEDGER_ROWS, page_size=-1),
            metadata=OPERATOR,
        )
    assert reason_of(negative.value) == "INVALID_PAGE"


@pytest.mark.parametrize("collection", [pb.COLLECTION_ACCEPTED_JOBS, pb.COLLECTION_UNSPECIFIED])
async def test_a_collection_the_service_does_not_own_is_refused_with_a_reason(
    audit_stub: pb_grpc.ExportServiceStub, collection: pb.Collection
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await audit_stub.ExportRecords(
            pb.ExportRecordsRequest(collection=collection), metadata=OPERATOR
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(refused.value) == "COLLECTION_NOT_HELD"
    assert [v[0] for v in details_of(refused.value).violations] == ["collection"]


@pytest.mark.parametrize("metadata", [(), (("authorization", "Bearer a-tenant-token"),)])
async def test_only_an_operator_token_is_answered(
    audit_stub: pb_grpc.ExportServiceStub, metadata: tuple[tuple[str, str], ...]
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await audit_stub.ExportRecords(
            pb.ExportRecordsRequest(collection=pb.COLLECTION_LEDGER_ROWS), metadata=metadata
        )
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert reason_of(refused.value) == "UNAUTHENTICATED"
