"""The source-system server the fetch tests and benchmarks use
(``quire.testing.sourceserver``): records, tokens, every behaviour it can be
told, the call log, the HTTP control interface, bounded shutdown, and the
``python -m`` entry point."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from quire.stack.ports import free_port
from quire.testing.sourceserver import Call, SourceServer

KEY = "orders/2026/A-17"
MiB = 1 << 20


@pytest.fixture
def server() -> Iterator[SourceServer]:
    with SourceServer() as running:
        yield running


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5.0) as http:
        yield http


def test_records_are_served_with_their_bytes_and_content_type(
    server: SourceServer, client: httpx.Client
) -> None:
    assert server.url.startswith("http://127.0.0.1:")
    assert server.base_url("erp") == f"{server.url}/erp"
    pdf = b"%PDF-1.7\n" + bytes(range(256)) * 4
    server.put("erp", KEY, pdf, content_type="application/pdf")
    server.put_json("erp", "a:b.c-d_e", {"z": 1, "a": [1, 2]})
    server.put_json("crm", KEY, {"other": "system"})

    got = client.get(f"{server.base_url('erp')}/{KEY}")
    assert got.status_code == 200
    assert got.content == pdf
    assert got.headers["content-type"] == "application/pdf"
    assert got.headers["content-length"] == str(len(pdf))

    named = client.get(f"{server.base_url('erp')}/a:b.c-d_e")
    assert named.content == b'{"z": 1, "a": [1, 2]}'
    assert named.headers["content-type"] == "application/json"

    # The key is URL-decoded; another system under the same key has its own record.
    assert client.get(f"{server.base_url('erp')}/orders%2F2026%2FA-17").content == pdf
    assert client.get(f"{server.base_url('crm')}/{KEY}").json() == {"other": "system"}


def test_a_missing_key_is_404_with_a_json_error(server: SourceServer, client: httpx.Client) -> None:
    server.put_json("erp", KEY, {})
    missing = client.get(f"{server.base_url('erp')}/orders/2026/A-18")
    assert missing.status_code == 404
    assert missing.json()["key"] == "orders/2026/A-18"
    assert client.get(f"{server.base_url('nowhere')}/{KEY}").status_code == 404


def test_a_system_with_a_token_answers_only_its_bearer(
    server: SourceServer, client: httpx.Client
) -> None:
    server.put_json("crm", KEY, {"ok": True})
    server.put_json("erp", KEY, {"open": True})
    server.require_token("crm", "s3cret")
    url = f"{server.base_url('crm')}/{KEY}"

    assert client.get(url).status_code == 401
    assert client.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get(url, headers={"Authorization": "s3cret"}).status_code == 401
    right = client.get(url, headers={"Authorization": "Bearer s3cret"})
    assert right.status_code == 200
    assert right.json() == {"ok": True}
    assert client.get(f"{server.base_url('erp')}/{KEY}").status_code == 200

    assert [c.authorized for c in server.calls("crm")] == [False, False, False, True]
    assert [c.status for c in server.calls("crm")] == [401, 401, 401, 200]


def test_delay_holds_the_answer_and_calls_are_served_concurrently(
    server: SourceServer,
) -> None:
    server.put_json("erp", KEY, {"slow": True})
    server.behave("erp", delay=0.4)
    url = f"{server.base_url('erp')}/{KEY}"

    client = httpx.Client(timeout=5.0)  # one client, built once: shared by the threads

    def timed_get(_: int) -> tuple[int, float]:
        started = time.monotonic()
        status = client.get(url).status_code
        return status, time.monotonic() - started

    with client, ThreadPoolExecutor(3) as pool:
        results = list(pool.map(timed_get, range(3)))
        assert all(status == 200 for status, _ in results)
        assert all(elapsed >= 0.4 for _, elapsed in results)
        # Served one after another, each would arrive 0.4 s after the one before.
        for _ in range(500):  # a call is logged just after its answer is sent
            if len(server.calls("erp")) == 3:
                break
            time.sleep(0.01)
        arrivals = [call.at for call in server.calls("erp")]
        assert len(arrivals) == 3
        assert max(arrivals) - min(arrivals) < 0.6, "three delayed calls were served in turn"

        server.behave("erp")
        started = time.monotonic()
        assert client.get(url).status_code == 200
        assert time.monotonic() - started < 0.3, "no delay once told so"


def test_fail_times_answers_503_that_often_then_serves(
    server: SourceServer, client: httpx.Client
) -> None:
    server.put_json("erp", KEY, {"n": 1})
    server.behave("erp", fail_times=2)
    url = f"{server.base_url('erp')}/{KEY}"
    assert [client.get(url).status_code for _ in range(4)] == [503, 503, 200, 200]


def test_status_answers_every_call_until_reset(server: SourceServer, client: httpx.Client) -> None:
    server.put_json("erp", KEY, {"n": 1})
    server.behave("erp", status=429)
    url = f"{server.base_url('erp')}/{KEY}"
    assert [client.get(url).status_code for _ in range(3)] == [429, 429, 429]
    server.behave("erp")
    assert client.get(url).status_code == 200


def test_truncate_leaves_the_body_incomplete(server: SourceServer, client: httpx.Client) -> None:
    server.put("erp", KEY, b"0123456789" * 1000)
    server.behave("erp", truncate=True)
    url = f"{server.base_url('erp')}/{KEY}"
    with pytest.raises(httpx.RemoteProtocolError):
        client.get(url)
    assert server.calls("erp")[-1].status == 200

    server.behave("erp")
    assert client.get(url).content == b"0123456789" * 1000


def test_duplicate_events_sends_each_event_twice_in_a_row(
    server: SourceServer, client: httpx.Client
) -> None:
    events = [{"code": "picked"}, {"code": "shipped"}, {"code": "delivered"}]
    server.put_json("carrier", "nested", {"shipment": {"id": "S1", "events": events}})
    server.put_json("carrier", "flat", {"id": "S2", "events": events})
    server.put_json("carrier", "plain", {"id": "S3", "history": events})
    server.behave("carrier", duplicate_events=True)
    base = server.base_url("carrier")

    nested = client.get(f"{base}/nested").json()
    assert nested["shipment"]["id"] == "S1"
    assert nested["shipment"]["events"] == [e for e in events for _ in (0, 1)]
    assert client.get(f"{base}/flat").json()["events"] == [
        events[0],
        events[0],
        events[1],
        events[1],
        events[2],
        events[2],
    ]
    assert client.get(f"{base}/plain").json() == {"id": "S3", "history": events}

    server.behave("carrier")
    assert client.get(f"{base}/nested").json()["shipment"]["events"] == events


def test_oversize_streams_past_a_byte_limit(server: SourceServer, client: httpx.Client) -> None:
    server.put_json("erp", KEY, {"small": True})
    server.behave("erp", oversize=16 * MiB)
    url = f"{server.base_url('erp')}/{KEY}"

    read = 0
    with client.stream("GET", url) as response:
        assert response.status_code == 200
        assert "content-length" not in response.headers
        first = b""
        for chunk in response.iter_bytes():
            first = first or chunk
            read += len(chunk)
            if read > MiB:
                break
    assert read > MiB
    assert first.startswith(b'{"pad": "xxx')

    # Read to the end, a smaller one is exactly that many bytes of valid JSON.
    server.behave("erp", oversize=200_000)
    whole = client.get(url).content
    assert len(whole) == 200_000
    assert set(json.loads(whole)) == {"pad"}


def test_the_call_log_has_arrival_times_statuses_and_systems(
    server: SourceServer, client: httpx.Client
) -> None:
    server.put_json("erp", KEY, {})
    before = time.time()
    client.get(f"{server.base_url('erp')}/{KEY}")
    client.get(f"{server.base_url('erp')}/missing")
    client.get(f"{server.base_url('crm')}/{KEY}")
    after = time.time()

    calls = server.calls()
    assert [(c.system, c.key, c.status) for c in calls] == [
        ("erp", KEY, 200),
        ("erp", "missing", 404),
        ("crm", KEY, 404),
    ]
    assert all(before <= c.at <= after for c in calls)
    assert [c.at for c in calls] == sorted(c.at for c in calls)
    assert all(isinstance(c, Call) and c.authorized for c in calls)
    assert [c.key for c in server.calls("crm")] == [KEY]

    calls.clear()
    assert len(server.calls()) == 3


def test_the_control_interface_drives_the_server_over_http(
    server: SourceServer, client: httpx.Client
) -> None:
    control = f"{server.url}/_control"
    put = client.post(
        f"{control}/put/erp/{KEY}", content=b"a,b\n1,2\n", headers={"Content-Type": "text/csv"}
    )
    assert put.status_code == 200
    url = f"{server.base_url('erp')}/{KEY}"
    got = client.get(url)
    assert got.content == b"a,b\n1,2\n"
    assert got.headers["content-type"] == "text/csv"

    assert client.post(f"{control}/behave/erp", json={"fail_times": 1}).status_code == 200
    assert [client.get(url).status_code for _ in range(2)] == [503, 200]
    assert client.post(f"{control}/behave/erp", json={"bogus": 1}).status_code == 400
    assert client.post(f"{control}/behave/erp", json={"delay": -1}).status_code == 400

    assert client.post(f"{control}/token/erp", json={"token": "t0k"}).status_code == 200
    assert client.get(url).status_code == 401
    assert client.get(url, headers={"Authorization": "Bearer t0k"}).status_code == 200

    logged = client.get(f"{control}/calls").json()
    assert [(c["system"], c["key"], c["status"]) for c in logged] == [
        ("erp", KEY, 200),
        ("erp", KEY, 503),
        ("erp", KEY, 200),
        ("erp", KEY, 401),
        ("erp", KEY, 200),
    ]
    assert [c["authorized"] for c in logged] == [True, True, True, False, True]
    assert all(isinstance(c["at"], float) for c in logged)
    assert client.get(f"{control}/calls", params={"system": "crm"}).json() == []
    assert client.post(url, content=b"x").status_code == 405


def test_behave_refuses_nonsense(server: SourceServer) -> None:
    for bad in ({"delay": -0.1}, {"status": 99}, {"fail_times": -1}, {"oversize": 1.5}):
        with pytest.raises(ValueError):
            server.behave("erp", **bad)  # type: ignore[arg-type]


def test_stop_during_a_long_delay_is_quick() -> None:
    server = SourceServer().start()
    try:
        server.put_json("erp", KEY, {})
        # An idle keep-alive connection must not hold the stop up either.
        idle = httpx.Client(timeout=10.0)
        assert idle.get(f"{server.base_url('erp')}/{KEY}").status_code == 200
        server.behave("erp", delay=6.0)
        outcome: list[object] = []

        def slow_get() -> None:
            try:
                outcome.append(httpx.get(f"{server.base_url('erp')}/{KEY}", timeout=10.0))
            except httpx.HTTPError as exc:
                outcome.append(exc)

        waiting = threading.Thread(target=slow_get, daemon=True)
        waiting.start()
        for _ in range(500):  # until the server holds it
            if server.arrived("erp") == 2:
                break
            time.sleep(0.02)
        assert server.arrived("erp") == 2
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 1.5
        waiting.join(2.0)
        assert not waiting.is_alive()
        assert isinstance(outcome[0], httpx.HTTPError)
        assert server.calls("erp")[-1].status == 0
        idle.close()
    finally:
        server.stop()


def _first_line(process: subprocess.Popen[str], timeout: float) -> str:
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise AssertionError(f"no URL on stdout within {timeout} s")
    return process.stdout.readline().strip()


def test_python_m_serves_until_sigterm() -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "quire.testing.sourceserver", "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        url = _first_line(process, 10.0)
        assert url == f"http://127.0.0.1:{port}"
        with httpx.Client(timeout=5.0) as http:
            http.post(f"{url}/_control/put/erp/{KEY}", json={"from": "control"})
            assert http.get(f"{url}/erp/{KEY}").json() == {"from": "control"}
            assert http.get(f"{url}/_control/calls").json()[0]["status"] == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=5.0) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=5.0)
        if process.stdout is not None:
            process.stdout.close()
