"""The embedded stack's zygote (``quire.stack.zygote``, ``quire.stack.forked``):
a forked service has its own session, output, working directory, environment
and arguments, inherits no descriptor, runs as ``__main__``, and its exit code
(or the signal that ended it) and CPU time come back; a dead zygote is
replaced, and its orphans still end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from quire.stack import forked
from quire.stack.forked import LOST, Zygote, reaped_cpu_seconds, spawn_service
from quire.stackdump import STACK_DUMP_SIGNAL

PROBE = "quire.testing.forkprobe"


def _probe_env(tmp_path: Path, exit_code: str) -> dict[str, str]:
    return {
        "FORKPROBE_FILE": str(tmp_path / "facts.json"),
        "FORKPROBE_EXIT": exit_code,
        "PYTHONUNBUFFERED": "1",
        "ONLY_THIS": "yes",
    }


def _facts(tmp_path: Path) -> dict[str, object]:
    for _ in range(200):
        if (tmp_path / "facts.json").exists():
            return json.loads((tmp_path / "facts.json").read_text())  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise AssertionError("the probe never wrote its facts")


@pytest.fixture
def zygote():  # type: ignore[no-untyped-def]
    """A zygote that has imported the probe too, as the stack's has each service."""
    running = Zygote(preload=(PROBE,))
    yield running
    running.close()


def test_a_forked_service_starts_as_python_m_would_and_its_exit_code_comes_back(
    zygote: Zygote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    before = reaped_cpu_seconds()
    process = zygote.spawn(PROBE, _probe_env(tmp_path, "3"), tmp_path / "probe.log")
    assert process.wait(timeout=30) == 3
    assert process.poll() == 3
    facts = _facts(tmp_path)
    assert facts["pid"] == process.pid
    assert facts["sid"] == process.pid, "a session of its own"
    assert facts["cwd"] == str(tmp_path)
    assert facts["name"] == "__main__"
    assert str(facts["argv0"]).endswith("forkprobe.py")
    assert facts["env"] == _probe_env(tmp_path, "3"), "the environment given, nothing else"
    assert facts["fds"] == [0, 1, 2, 3], "stdin, the log twice, and the listing's own"
    assert (tmp_path / "probe.log").read_text() == "probe ran\n", (
        "its module run afresh, no warning"
    )
    assert reaped_cpu_seconds() > before, "its CPU time is counted once it is reaped"


def test_a_killed_service_reports_the_signal_that_ended_it(zygote: Zygote, tmp_path: Path) -> None:
    process = zygote.spawn(PROBE, _probe_env(tmp_path, "wait"), tmp_path / "probe.log")
    _facts(tmp_path)
    assert process.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=0.3)
    process.kill()
    assert process.wait(timeout=30) == -signal.SIGKILL
    process.kill()  # already ended: nothing to signal, no error


def test_a_forked_service_writes_where_its_threads_are_when_asked_and_goes_on(
    zygote: Zygote, tmp_path: Path
) -> None:
    """What the supervisor asks of a service that never became healthy."""
    log = tmp_path / "probe.log"
    process = zygote.spawn(PROBE, _probe_env(tmp_path, "wait"), log)
    _facts(tmp_path)
    for dumps in (1, 2):  # a second answer shows it went on after the first
        process.send_signal(STACK_DUMP_SIGNAL)
        deadline = time.monotonic() + 10
        while log.read_text().count("Current thread") < dumps:
            assert time.monotonic() < deadline, f"stack {dumps} was not written"
            assert process.poll() is None, "it goes on after writing its stack"
            time.sleep(0.05)
    assert "forkprobe.py" in log.read_text(), "its own module's frames"
    assert "in main" in log.read_text(), "the frame it waits in, named"
    process.kill()
    assert process.wait(timeout=30) == -signal.SIGKILL


def test_a_dead_zygote_is_replaced_and_its_orphans_still_end(tmp_path: Path) -> None:
    first = spawn_service(PROBE, _probe_env(tmp_path, "wait"), tmp_path / "a.log")
    _facts(tmp_path)
    zygote = forked._shared  # noqa: SLF001 - the one to kill
    assert zygote is not None
    os.kill(zygote._process.pid, signal.SIGKILL)  # noqa: SLF001
    zygote._process.wait()  # noqa: SLF001
    (tmp_path / "facts.json").unlink()
    second = spawn_service(PROBE, _probe_env(tmp_path, "0"), tmp_path / "b.log")
    assert second.wait(timeout=30) == 0, "a new zygote forked it"
    assert forked._shared is not zygote  # noqa: SLF001
    first.kill()
    assert first.wait(timeout=30) == LOST, "ended, its code unknown without its zygote"


def test_a_service_polled_by_one_thread_and_waited_for_by_another_ends_once(
    zygote: Zygote, tmp_path: Path
) -> None:
    """The stack's watcher polls while a stop waits: the end is taken once (a
    pidfd closed twice killed the watcher thread)."""
    import threading

    process = zygote.spawn(PROBE, _probe_env(tmp_path, "wait"), tmp_path / "probe.log")
    _facts(tmp_path)
    failures: list[BaseException] = []
    done = threading.Event()

    def watch() -> None:
        try:
            while not done.is_set():
                process.poll()
        except BaseException as error:  # noqa: BLE001 - reported below
            failures.append(error)

    watchers = [threading.Thread(target=watch) for _ in range(3)]
    for watcher in watchers:
        watcher.start()
    process.terminate()
    assert process.wait(timeout=30) == -signal.SIGTERM
    done.set()
    for watcher in watchers:
        watcher.join()
    assert failures == []
    assert process.poll() == -signal.SIGTERM
