"""What the harness watches while the load runs.

- ``ProcSampler`` (a thread, /proc only): CPU seconds per process kind (each
  service's main process, its sandbox workers, nats-server and this client),
  the peak resident memory of the sandbox workers, the size of the blob
  store's temporary space (``blobs/.tmp``), and an estimate of SQLite lock
  waits in audit and admission (see ``LOCK_SYSCALLS``).
- ``QueueSampler`` (a thread with its own event loop): for every stage, the
  JetStream consumers' pending and unacknowledged counts and the age of the
  oldest message still in the work stream for that stage.
- ``LedgerReader`` (a thread): audit's ledger, read-only, as it grows.

Worker CPU is counted whole, short-lived workers included: a live process
contributes its own and its reaped children's CPU, and a service contributes
the CPU of the children it has reaped (``cutime``/``cstime``), so each
process is counted once, whether it is alive at the end or not.
"""

from __future__ import annotations

import asyncio
import os
import platform
import resource
import sqlite3
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from quire.jobs import state_name
from quire.pipeline import STAGE_NAMES, State
from quire.runtime import connect_nats
from quire.type import queue_pb2
from quire.workqueue.topology import (
    PRIORITIES,
    WORK_STREAM,
    consumer_name,
    work_subject,
)

__all__ = [
    "SERVICES",
    "WORKER_SERVICES",
    "ProcSampler",
    "QueueSampler",
    "LedgerReader",
    "Event",
]

SERVICES = ("admission", "validator", "assembler", "signer", "audit")
WORKER_SERVICES = ("validator", "assembler", "signer")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
# SQLite's busy handler sleeps (usleep -> clock_nanosleep) while another
# connection holds the write lock; the services' hot paths do not otherwise
# sleep in these calls, so threads found in them are counted as lock waits.
LOCK_SYSCALLS = {"x86_64": {35, 230}, "aarch64": {101, 115}}.get(platform.machine(), set())
LOCK_SERVICES = ("admission", "audit")


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw.rsplit(")", 1)[1].split()  # [0] state, [1] ppid, [11..14] times


def _cpu(fields: list[str], children: bool) -> float:
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLOCK_TICKS


def _status_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree() -> dict[int, list[int]]:
    children: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields:
                children[int(fields[1])].append(int(entry))
    return children


def _descendants(tree: dict[int, list[int]], root: int) -> list[int]:
    found, todo = [], [root]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _dir_bytes(path: Path) -> int:
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


@dataclass
class Window:
    """Peaks and counts since the last ``ProcSampler.mark``."""

    started: float = field(default_factory=time.monotonic)
    worker_rss_kib: dict[str, int] = field(default_factory=dict)
    tmp_bytes: int = 0
    lock_samples: dict[str, int] = field(default_factory=dict)
    lock_ticks: int = 0


class ProcSampler(threading.Thread):
    """Samples the stack's processes every ``tick`` seconds (lock waits), and
    the rest every ``every`` ticks."""

    def __init__(self, pids, nats_pid, blob_tmp: Path, tick: float = 0.1, every: int = 5):  # type: ignore[no-untyped-def]
        super().__init__(daemon=True, name="load-proc-sampler")
        self._pids = pids  # callable: service -> current pid
        self._nats_pid = nats_pid
        self.blob_tmp = blob_tmp
        self.tick = tick
        self.every = every
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._offsets: dict[str, float] = defaultdict(float)
        self._last: dict[str, tuple[int, float]] = {}
        self.window = Window()
        self.series: list[dict[str, float]] = []  # time series for plots
        self.peak_hwm_kib: dict[str, int] = {}

    # -- CPU ---------------------------------------------------------------
    def _kind_totals(self, tree: dict[int, list[int]]) -> dict[str, float]:
        totals: dict[str, float] = {}
        for service in SERVICES:
            pid = self._pids(service)
            fields = _stat(pid)
            if fields is None:
                continue
            totals[service] = _cpu(fields, children=False)
            workers = (int(fields[13]) + int(fields[14])) / CLOCK_TICKS
            for child in _descendants(tree, pid):
                child_fields = _stat(child)
                if child_fields:
                    workers += _cpu(child_fields, children=True)
            if service in WORKER_SERVICES:
                totals[f"{service} workers"] = workers
            else:  # no sandbox: whatever it runs is its own cost
                totals[service] += workers
        nats = self._nats_pid()
        if nats and (fields := _stat(nats)):
            totals["nats-server"] = _cpu(fields, children=True)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        totals["client"] = usage.ru_utime + usage.ru_stime
        return totals

    def cpu(self) -> dict[str, float]:
        """Cumulative CPU seconds per process kind, stable across restarts."""
        tree = _tree()
        totals = self._kind_totals(tree)
        out: dict[str, float] = {}
        with self._lock:
            for kind, value in totals.items():
                pid = self._pids(kind.split()[0]) if kind.split()[0] in SERVICES else 0
                last = self._last.get(kind)
                if last and last[0] != pid:  # restarted: keep what the old one used
                    self._offsets[kind] += last[1]
                self._last[kind] = (pid, value)
                out[kind] = self._offsets[kind] + value
        return out

    # -- windows -----------------------------------------------------------
    def mark(self) -> Window:
        """Start a new window; return the one that ended."""
        with self._lock:
            ended, self.window = self.window, Window()
        return ended

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def _lock_waits(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for service in LOCK_SERVICES:
            pid = self._pids(service)
            waiting = 0
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    raw = Path(f"/proc/{pid}/task/{tid}/syscall").read_text().split()
                except OSError:
                    continue
                if raw and raw[0].isdigit() and int(raw[0]) in LOCK_SYSCALLS:
                    waiting += 1
            counts[service] = waiting
        return counts

    def run(self) -> None:
        count = 0
        while not self._halt.wait(self.tick):
            waits = self._lock_waits()
            with self._lock:
                for service, waiting in waits.items():
                    self.window.lock_samples[service] = (
                        self.window.lock_samples.get(service, 0) + waiting
                    )
                self.window.lock_ticks += 1
            count += 1
            if count % self.every:
                continue
            tree = _tree()
            row: dict[str, float] = {"t": time.time()}
            for service in WORKER_SERVICES:
                rss = hwm = 0
                for child in _descendants(tree, self._pids(service)):
                    fields = _stat(child)
                    if fields is None or fields[0] == "Z":
                        continue
                    rss = max(rss, _status_kib(child, "VmRSS"))
                    hwm = max(hwm, _status_kib(child, "VmHWM"))
                row[f"{service} worker rss MiB"] = rss / 1024
                with self._lock:
                    self.window.worker_rss_kib[service] = max(
                        self.window.worker_rss_kib.get(service, 0), rss
                    )
                    self.peak_hwm_kib[service] = max(self.peak_hwm_kib.get(service, 0), hwm)
            tmp = _dir_bytes(self.blob_tmp)
            row["tmp MiB"] = tmp / 2**20
            for kind, seconds in self.cpu().items():
                row[f"cpu {kind}"] = seconds
            with self._lock:
                self.window.tmp_bytes = max(self.window.tmp_bytes, tmp)
            self.series.append(row)


class QueueSampler(threading.Thread):
    """Every ``interval`` s, per stage: pending, unacknowledged, oldest age."""

    def __init__(self, url: str, login: dict[str, str], interval: float = 0.5) -> None:
        super().__init__(daemon=True, name="load-queue-sampler")
        self.url, self.login, self.interval = url, login, interval
        self.samples: list[tuple[float, str, int, int, float]] = []
        self.errors = 0
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        from nats.js.errors import NotFoundError

        nc = await connect_nats(self.url, "quire-load-harness", **self.login)
        js = nc.jetstream(timeout=5)
        try:
            while not self._halt.is_set():
                started = time.monotonic()
                now = time.time()
                for stage in STAGE_NAMES:
                    pending = unacked = 0
                    age = 0.0
                    for priority in PRIORITIES:
                        try:
                            info = await js.consumer_info(
                                WORK_STREAM, consumer_name(stage, priority)
                            )
                        except Exception:  # noqa: BLE001 - NATS restarting; count it
                            self.errors += 1
                            continue
                        pending += info.num_pending or 0
                        unacked += info.num_ack_pending or 0
                        if not (info.num_pending or info.num_ack_pending):
                            continue
                        floor = info.ack_floor.stream_seq if info.ack_floor else 0
                        try:
                            msg = await js.get_msg(
                                WORK_STREAM,
                                seq=(floor or 0) + 1,
                                subject=work_subject(stage, priority),
                                next=True,
                            )
                        except NotFoundError:
                            continue
                        except Exception:  # noqa: BLE001
                            self.errors += 1
                            continue
                        if msg.time is not None:
                            stamp = msg.time
                            if stamp.tzinfo is None:
                                stamp = stamp.replace(tzinfo=UTC)
                            age = max(age, now - stamp.timestamp())
                    self.samples.append((now, stage, pending, unacked, age))
                spent = time.monotonic() - started
                await asyncio.sleep(max(0.05, self.interval - spent))
        finally:
            await nc.close()


@dataclass(frozen=True)
class Event:
    sequence: int
    job: str
    from_state: str
    to_state: str
    reason: str
    attempt: int
    occurred_at: float
    recorded_at: float


def _parse_recorded(value: object) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    moment = datetime.fromisoformat(str(value))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


class LedgerReader(threading.Thread):
    """Follows audit's ledger (SQLite, opened read-only) every ``interval`` s."""

    def __init__(self, db_path: Path, interval: float = 0.25) -> None:
        super().__init__(daemon=True, name="load-ledger-reader")
        self.db_path, self.interval = db_path, interval
        self.events: dict[str, list[Event]] = defaultdict(list)
        self.terminal: dict[str, Event] = {}
        self.last_sequence = 0
        self._halt = threading.Event()
        self.changed = threading.Condition()

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def poll(self) -> None:
        uri = f"file:{self.db_path}?mode=ro"
        try:
            with sqlite3.connect(uri, uri=True, timeout=5) as db:
                rows = db.execute(
                    "SELECT sequence, event, recorded_at FROM ledger WHERE sequence > ? "
                    "ORDER BY sequence",
                    (self.last_sequence,),
                ).fetchall()
        except sqlite3.Error:
            return
        for sequence, raw, recorded in rows:
            event = queue_pb2.TransitionEvent()
            event.ParseFromString(bytes(raw))
            self.last_sequence = max(self.last_sequence, sequence)
            if not event.job:
                continue
            entry = Event(
                sequence,
                event.job.removeprefix("jobs/"),
                state_name(event.from_state),
                state_name(event.to_state),
                event.reason_code,
                event.attempt,
                event.occur_time.seconds + event.occur_time.nanos / 1e9,
                _parse_recorded(recorded),
            )
            self.events[entry.job].append(entry)
            if entry.to_state in (
                State.COMPLETED,
                State.REJECTED,
                State.FAILED,
                State.CANCELLED,
                State.NEEDS_REVIEW,
            ):
                self.terminal[entry.job] = entry

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            self.poll()
