"""The console's own parts, without a stack: its session cookie (sealed,
expiring, tamper-evident), the CSRF comparison, and the timeline drawn from
ledger events."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from google.protobuf import duration_pb2, timestamp_pb2
from starlette.requests import Request
from starlette.responses import Response

from quire.errors import InvalidSetting
from quire.gateway.console.csrf import matches
from quire.gateway.console.deadletters import budget_seconds
from quire.gateway.console.pages import Refusal
from quire.gateway.console.sessions import COOKIE, Sessions, load_key
from quire.gateway.console.timeline import trace_link
from quire.gateway.console.timelinemodel import timeline_of
from quire.jobs import state_value
from quire.type import job_pb2, queue_pb2


def _request(cookie: str = "", scheme: str = "http", forwarded: str = "") -> Request:
    headers = [(b"host", b"127.0.0.1")]
    if cookie:
        headers.append((b"cookie", f"{COOKIE}={cookie}".encode()))
    if forwarded:
        headers.append((b"x-forwarded-proto", forwarded.encode()))
    return Request(
        {"type": "http", "scheme": scheme, "path": "/", "headers": headers, "query_string": b""}
    )


def _signed_in(sessions: Sessions, request: Request) -> str:
    response = Response()
    sessions.start(
        response, request, token="qt_secret", name="reviewers/-/tokens/r1", role="reviewer"
    )
    header = response.headers["set-cookie"]
    return header.split(";")[0].split("=", 1)[1]


def test_a_session_cookie_is_sealed_http_only_strict_and_scoped() -> None:
    sessions = Sessions(Fernet.generate_key(), session_seconds=60)
    response = Response()
    sessions.start(
        response, _request(), token="qt_secret", name="operators/-/tokens/o", role="operator"
    )
    header = response.headers["set-cookie"].lower()
    assert "httponly" in header and "samesite=strict" in header and "path=/console" in header
    assert "secure" not in header  # plain HTTP: a Secure cookie would never come back
    assert "qt_secret" not in header  # the token travels sealed
    tls = Response()
    sessions.start(tls, _request(forwarded="https"), token="t", name="n", role="operator")
    assert "secure" in tls.headers["set-cookie"].lower()


def test_a_session_opens_with_its_key_only_and_not_once_edited() -> None:
    key = Fernet.generate_key()
    sessions = Sessions(key, session_seconds=60)
    cookie = _signed_in(sessions, _request())
    session = sessions.of(_request(cookie))
    assert session is not None and session.role == "reviewer" and not session.is_operator
    assert session.token == "qt_secret" and len(session.csrf) > 30
    assert Sessions(Fernet.generate_key(), session_seconds=60).of(_request(cookie)) is None
    edited = cookie[:-5] + ("A" if cookie[-5] != "A" else "B") + cookie[-4:]
    assert sessions.of(_request(edited)) is None
    assert sessions.of(_request("not-a-session")) is None


def test_a_session_ends_when_its_time_is_up() -> None:
    sessions = Sessions(Fernet.generate_key(), session_seconds=1)
    cookie = _signed_in(sessions, _request())
    assert sessions.of(_request(cookie)) is not None
    time.sleep(2.1)
    assert sessions.of(_request(cookie)) is None


def test_the_key_file_must_hold_a_fernet_key(tmp_path: Path) -> None:
    good = tmp_path / "key"
    good.write_bytes(Fernet.generate_key() + b"\n")
    assert Fernet(load_key(good))
    bad = tmp_path / "bad"
    bad.write_text("not a key")
    with pytest.raises(InvalidSetting):
        load_key(bad)
    with pytest.raises(InvalidSetting):
        load_key(tmp_path / "missing")
    assert load_key(None) != load_key(None)  # none configured: one per process


def test_csrf_secrets_match_only_exactly_and_never_empty() -> None:
    assert matches("abc", "abc")
    assert not matches("abc", "abd")
    assert not matches("", "")
    assert not matches("abc", "")


@pytest.mark.parametrize("text", ["0", "-5", "1.5", "x", str(8 * 24 * 3600)])
def test_a_retry_budget_is_whole_positive_seconds_within_a_week(text: str) -> None:
    with pytest.raises(Refusal):
        budget_seconds(text)


def test_a_retry_budget_left_empty_keeps_the_deadline() -> None:
    assert budget_seconds("  ") is None
    assert budget_seconds("90") == 90


def test_a_trace_link_needs_a_template_and_an_id() -> None:
    assert trace_link("https://t.example/trace/{trace_id}", "ab" * 16) == (
        "https://t.example/trace/" + "ab" * 16
    )
    assert trace_link("", "ab" * 16) == ""
    assert trace_link("https://t.example/{trace_id}", "") == ""


def _event(state: str, at: datetime, **fields: object) -> queue_pb2.TransitionEvent:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(at)
    return queue_pb2.TransitionEvent(
        job="jobs/j", tenant="tenants/t", to_state=state_value(state), occur_time=stamp, **fields
    )


def test_a_timeline_places_each_state_from_its_entry_to_the_next() -> None:
    start = datetime(2026, 12, 5, 12, 0, 0)
    wait = job_pb2.PhaseTiming(
        stage="validate", phase="queue_wait", duration=duration_pb2.Duration(seconds=1)
    )
    work = job_pb2.PhaseTiming(
        stage="validate", phase="validate", duration=duration_pb2.Duration(seconds=2)
    )
    deadline = timestamp_pb2.Timestamp()
    deadline.FromDatetime(start + timedelta(seconds=20))
    events = [
        _event("ACCEPTED", start, deadline=deadline, trace_id="cd" * 16),
        _event("VALIDATING", start + timedelta(seconds=1)),
        _event("ASSEMBLING", start + timedelta(seconds=5), timings=[wait, work], attempt=2),
        _event("COMPLETED", start + timedelta(seconds=10)),
    ]
    timeline = timeline_of(events, now=start + timedelta(hours=1))
    assert [bar.state for bar in timeline.bars] == [
        "ACCEPTED",
        "VALIDATING",
        "ASSEMBLING",
        "COMPLETED",
    ]
    assert [bar.seconds for bar in timeline.bars] == [1.0, 4.0, 5.0, 0.0]
    assert timeline.seconds == 10.0  # ended: not stretched to now
    validating = timeline.bars[1]
    assert validating.offset == pytest.approx(10.0) and validating.width == pytest.approx(40.0)
    # The wait is the ACCEPTED job's (waiting for the validator), the work
    # VALIDATING's, though the entry that left VALIDATING reported both.
    assert [(p.phase, p.share) for p in validating.phases] == [("validate", 50.0)]
    assert [(p.phase, p.share) for p in timeline.bars[0].phases] == [("queue_wait", 100.0)]
    assert timeline.budget_seconds == 20.0 and timeline.budget_used == pytest.approx(50.0)
    assert timeline.trace_id == "cd" * 16 and timeline.attempts == 2
    assert not any(bar.ongoing for bar in timeline.bars)


def test_a_job_still_moving_has_its_last_state_running_until_now() -> None:
    start = datetime(2026, 12, 5, 12, 0, 0)
    events = [_event("ACCEPTED", start), _event("NEEDS_REVIEW", start + timedelta(seconds=2))]
    timeline = timeline_of(events, now=start + timedelta(seconds=12))
    assert timeline.bars[-1].ongoing and timeline.bars[-1].seconds == 10.0
    assert timeline.deadline is None and timeline.budget_used is None and timeline.trace_id == ""


def test_no_entries_is_an_empty_timeline() -> None:
    assert timeline_of([], now=datetime(2026, 1, 1)).bars == ()
