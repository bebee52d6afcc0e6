"""Audit's pushed word on a job (issue 37): a genuine, fresh, matching word
confirms a stage's task without a GetJob call; anything else — no word, a
word signed by another service, unsigned, altered, for another tenant or
manifest, or showing the job before the stage or ended — makes the stage ask
audit, and only audit's answer refuses. Real nats-server, real Ed25519
identities; audit's GetJob is a stand-in that records being asked."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest
from nats.aio.client import Client as NatsClient
from prometheus_client.parser import text_string_to_metric_families

from quire import auditword
from quire.auditword import AuditWord, WordTeller, word_for, word_subject
from quire.authority import AuthorityNotYet, JobAuthority, JobEnded
from quire.client import PacketItem
from quire.identity import ServiceIdentity, TrustStore
from quire.jobs import state_name
from quire.pipeline import State, stage
from quire.runtime import connect_nats
from quire.stack.natsserver import NatsServer
from quire.stack.supervisor import StackInfo
from quire.testing.pdfs import write_text_pdf
from quire.type import job_pb2, queue_pb2
from quire.wire import SIGNATURE_HEADER, ForgedMessage, WireSigner, WireVerifier

AUDIT = ServiceIdentity.generate("audit")
VALIDATOR = ServiceIdentity.generate("validator")
VERIFIER = WireVerifier(TrustStore.of([AUDIT, VALIDATOR]))
ASSEMBLE = stage("assemble")
TASK = queue_pb2.JobTask(job="jobs/0123456789abcdef", tenant="acme", manifest_digest="d" * 64)


class _Audit:
    """Audit's GetJob: answers with ``job`` (or NOT_FOUND), counting calls."""

    def __init__(self, job: job_pb2.Job | None) -> None:
        self.job = job
        self.asked = 0

    async def GetJob(self, request: object, *, timeout: float, wait_for_ready: bool) -> job_pb2.Job:  # noqa: N802
        self.asked += 1
        if self.job is None:
            raise _NotFound()
        return self.job


class _NotFound(grpc.aio.AioRpcError):
    def __init__(self) -> None:
        super().__init__(grpc.StatusCode.NOT_FOUND, grpc.aio.Metadata(), grpc.aio.Metadata())


def _recorded(state: State = State.ASSEMBLING, **changes: str) -> job_pb2.Job:
    job = job_pb2.Job(name=TASK.job, tenant=TASK.tenant, manifest_digest=TASK.manifest_digest)
    job.state = state.number  # type: ignore[assignment]
    for name, value in changes.items():
        setattr(job, name, value)
    return job


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[NatsClient]:
    client = await connect_nats(nats_server.url, "quire-test-word")
    yield client
    await client.close()


async def _word(nc: NatsClient) -> AuditWord:
    word = AuditWord(nc, ASSEMBLE, VERIFIER)
    await word.start()
    return word


async def _confirmed_by(word: AuditWord, audit: _Audit, *, wait_seconds: float = 0.5) -> list[str]:
    ways: list[str] = []
    authority = JobAuthority(
        audit,
        ASSEMBLE,
        patience_seconds=0.2,
        word=word,
        word_wait_seconds=wait_seconds,
        confirmed=ways.append,
    )
    await authority.confirm(TASK)
    return ways


async def test_audits_word_confirms_a_task_without_asking(nc: NatsClient) -> None:
    word = await _word(nc)
    audit = _Audit(None)  # asking would find nothing: only the word can confirm
    teller = WordTeller(nc, WireSigner(AUDIT))
    teller.tell(TASK.job, TASK.tenant, TASK.manifest_digest, State.ASSEMBLING.value)
    assert await _confirmed_by(word, audit) == ["word"]
    assert audit.asked == 0


async def test_a_task_waits_briefly_for_a_word_said_just_after_it_arrived(
    nc: NatsClient,
) -> None:
    word = await _word(nc)
    teller = WordTeller(nc, WireSigner(AUDIT))
    audit = _Audit(None)

    async def later() -> None:
        await asyncio.sleep(0.05)
        teller.tell(TASK.job, TASK.tenant, TASK.manifest_digest, State.ASSEMBLING.value)

    saying = asyncio.create_task(later())
    assert await _confirmed_by(word, audit, wait_seconds=2.0) == ["word"]
    await saying


async def test_without_a_word_the_stage_asks_audit(nc: NatsClient) -> None:
    word = await _word(nc)
    audit = _Audit(_recorded())
    started = time.monotonic()
    assert await _confirmed_by(word, audit, wait_seconds=0.1) == ["asked"]
    assert audit.asked == 1 and time.monotonic() - started >= 0.1


def _forgeries() -> list[tuple[str, bytes, dict[str, str]]]:
    subject = word_subject("assembler")
    genuine = word_for(
        TASK.job, TASK.tenant, TASK.manifest_digest, State.ASSEMBLING.value, WireSigner(AUDIT)
    )
    assert genuine is not None
    _subject, payload, _headers = genuine

    def signed(job: job_pb2.Job, by: ServiceIdentity = AUDIT) -> tuple[str, bytes, dict[str, str]]:
        data = job.SerializeToString()
        return subject, data, {SIGNATURE_HEADER: WireSigner(by).header(subject, data)}

    altered = _recorded(tenant="other")
    return [
        signed(_recorded(), by=VALIDATOR),  # a real key, not audit's
        (subject, payload, {}),  # unsigned
        (subject, altered.SerializeToString(), genuine[2]),  # changed after signing
        signed(_recorded(tenant="other")),  # another tenant's job
        signed(_recorded(manifest_digest="e" * 64)),  # another manifest
        signed(_recorded(State.ACCEPTED)),  # not at the stage yet
        signed(_recorded(State.REJECTED)),  # ended
        signed(_recorded(name="jobs/another")),  # another job's word, filed under this one
    ]


@pytest.mark.parametrize("forgery", range(len(_forgeries())))
async def test_a_word_that_does_not_verify_or_match_makes_the_stage_ask(
    nc: NatsClient, forgery: int
) -> None:
    word = await _word(nc)
    subject, payload, headers = _forgeries()[forgery]
    word.hear(TASK.job, payload, headers)
    audit = _Audit(_recorded())
    assert await _confirmed_by(word, audit, wait_seconds=0.0) == ["asked"]
    assert audit.asked == 1


async def test_a_forged_word_never_stands_in_for_audits_refusal(nc: NatsClient) -> None:
    """The job audit recorded ended; a forged word says otherwise: refused."""
    word = await _word(nc)
    _subject, payload, headers = _forgeries()[0]
    word.hear(TASK.job, payload, headers)
    audit = _Audit(_recorded(State.REJECTED))
    with pytest.raises(JobEnded):
        await _confirmed_by(word, audit, wait_seconds=0.0)
    audit_missing = _Audit(None)
    word.hear(TASK.job, payload, headers)
    with pytest.raises(AuthorityNotYet):
        await _confirmed_by(word, audit_missing, wait_seconds=0.0)


async def test_a_word_serves_one_confirmation_and_words_are_bounded(nc: NatsClient) -> None:
    word = await _word(nc)
    genuine = word_for(
        TASK.job, TASK.tenant, TASK.manifest_digest, State.ASSEMBLING.value, WireSigner(AUDIT)
    )
    assert genuine is not None
    word.hear(TASK.job, genuine[1], genuine[2])
    assert await word.confirms(TASK, wait_seconds=0.0)
    assert not await word.confirms(TASK, wait_seconds=0.0)  # a redelivery asks
    for n in range(auditword.KEPT_WORDS + 10):
        word.hear(f"jobs/{n:016x}", genuine[1], genuine[2])
    assert len(word) == auditword.KEPT_WORDS


def test_no_word_is_said_where_no_stage_asks() -> None:
    signer = WireSigner(AUDIT)
    for state in (State.ACCEPTED, State.VALIDATING, State.COMMITTING, State.COMPLETED):
        assert word_for(TASK.job, TASK.tenant, TASK.manifest_digest, state.value, signer) is None
    said = word_for(TASK.job, TASK.tenant, TASK.manifest_digest, State.SIGNING.value, signer)
    assert said is not None and said[0] == word_subject("signer")
    with pytest.raises(ForgedMessage):
        VERIFIER.producer(said[0], said[1] + b"x", said[2], allowed=frozenset({"audit"}))


def _confirmations(stack, service: str) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The service's ``quire_authority_confirmations_total`` by how."""
    address = StackInfo.read(stack.data_dir).metrics_endpoints[service]
    text = httpx.get(f"http://{address}/metrics", timeout=10).text
    return {
        sample.labels["by"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "quire_authority_confirmations_total"
    }


async def test_on_a_stack_audits_word_confirms_the_assembler_and_the_signer(  # type: ignore[no-untyped-def]
    stack, tenants, tmp_path
) -> None:
    client = await tenants("word")
    before = {s: _confirmations(stack, s) for s in ("assembler", "signer")}
    digest = (await client.upload(write_text_pdf(tmp_path / "w.pdf", ["word"]))).sha256
    job = await client.wait((await client.submit([PacketItem("w", digest)])).name, timeout=60)
    assert state_name(job.state) == "COMPLETED"
    for service in ("assembler", "signer"):
        after = _confirmations(stack, service)
        assert after.get("word", 0) - before[service].get("word", 0) == 1, service
        assert after.get("asked", 0) == before[service].get("asked", 0), service
