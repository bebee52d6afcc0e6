"""The completion notification's signature scheme (``quire.notifysign``) and
which callback URLs a tenant may register (``quire.admission.notifications.callbackurl``)."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from quire.admission.notifications.callbackurl import MAX_URL_CHARS, check_callback_url, redacted
from quire.errors import InvalidInput
from quire.notifysign import (
    ReplayedNotification,
    ReplayGuard,
    SignatureRejected,
    signature_header,
    verify,
)

SECRET = "a" * 64
DELIVERY = "0123456789abcdef0123456789abcdef"
BODY = json.dumps({"name": "jobs/j1", "state": "COMPLETED"}).encode()
NOW = 1_800_000_000


def test_signature_is_hmac_sha256_over_timestamp_delivery_id_and_body() -> None:
    header = signature_header(SECRET, DELIVERY, BODY, NOW)
    expected = hmac.new(
        SECRET.encode(), f"{NOW}.{DELIVERY}.".encode() + BODY, hashlib.sha256
    ).hexdigest()
    assert header == f"t={NOW},v1={expected}"
    assert verify(SECRET, BODY, delivery_id=DELIVERY, signature=header, now=NOW)["name"] == (
        "jobs/j1"
    )


@pytest.mark.parametrize(
    ("secret", "body", "delivery_id"),
    [
        ("b" * 64, BODY, DELIVERY),  # another tenant's secret
        (SECRET, BODY.replace(b"COMPLETED", b"FAILED"), DELIVERY),  # tampered body
        (SECRET, BODY, "f" * 32),  # the signature moved to another delivery
    ],
)
def test_tampered_notification_is_refused(secret: str, body: bytes, delivery_id: str) -> None:
    header = signature_header(SECRET, DELIVERY, BODY, NOW)
    with pytest.raises(SignatureRejected):
        verify(secret, body, delivery_id=delivery_id, signature=header, now=NOW)


def test_a_changed_timestamp_breaks_the_signature() -> None:
    header = signature_header(SECRET, DELIVERY, BODY, NOW).replace(f"t={NOW}", f"t={NOW + 1}")
    with pytest.raises(SignatureRejected):
        verify(SECRET, BODY, delivery_id=DELIVERY, signature=header, now=NOW)


@pytest.mark.parametrize("skew", [-301, 301])
def test_stale_or_future_timestamp_is_refused(skew: int) -> None:
    header = signature_header(SECRET, DELIVERY, BODY, NOW)
    with pytest.raises(SignatureRejected, match="tolerance"):
        verify(SECRET, BODY, delivery_id=DELIVERY, signature=header, now=NOW + skew)


@pytest.mark.parametrize("header", ["", "t=1", "v1=ab", "t=x,v1=ab", "t=1,v1=" + "0" * 2000])
def test_malformed_signature_header_is_refused(header: str) -> None:
    with pytest.raises(SignatureRejected):
        verify(SECRET, BODY, delivery_id=DELIVERY, signature=header, now=NOW)


def test_one_matching_v1_among_several_is_enough() -> None:
    good = signature_header(SECRET, DELIVERY, BODY, NOW)
    header = f"t={NOW},v1={'0' * 64},{good.split(',')[1]}"
    assert verify(SECRET, BODY, delivery_id=DELIVERY, signature=header, now=NOW)


def test_replay_guard_refuses_a_delivery_id_seen_before() -> None:
    guard = ReplayGuard(capacity=2)
    guard.first_time("one")
    with pytest.raises(ReplayedNotification):
        guard.first_time("one")
    guard.first_time("two")
    guard.first_time("three")  # "one" is forgotten past the capacity
    guard.first_time("one")


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/quire",
        "https://hooks.example.com:8443/q?token=abc",
        "https://[2001:db8::1]/q",
    ],
)
def test_https_urls_are_accepted(url: str) -> None:
    assert check_callback_url(url, allow_loopback_http=False) == url


@pytest.mark.parametrize(
    ("url", "allowed"),
    [("http://127.0.0.1:8080/q", True), ("http://[::1]/q", True), ("http://localhost/q", True)],
)
def test_http_to_loopback_only_where_allowed(url: str, allowed: bool) -> None:
    assert check_callback_url(url, allow_loopback_http=allowed) == url
    with pytest.raises(InvalidInput):
        check_callback_url(url, allow_loopback_http=False)


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com/q",  # plain http off loopback
        "http://10.0.0.1/q",
        "ftp://hooks.example.com/q",
        "hooks.example.com/q",
        "https:///q",
        "https://user:pw@hooks.example.com/q",
        "https://user@hooks.example.com/q",
        "https://hooks.example.com/q#frag",
        "https://hooks.example.com/ q",
        "https://hooks.example.com:99999/q",
        "https://hooks.example.com/" + "a" * MAX_URL_CHARS,
    ],
)
def test_bad_urls_are_refused_with_a_field_violation(url: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_callback_url(url, allow_loopback_http=True)
    assert refused.value.reason == "INVALID_NOTIFICATION_URL"
    assert [v.field for v in refused.value.violations] == ["url"]


def test_redacted_url_leaves_out_path_and_query() -> None:
    assert (
        redacted("https://hooks.example.com:8443/p?token=abc") == "https://hooks.example.com:8443"
    )
