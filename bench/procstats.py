"""CPU time and resident memory of a process tree, read from ``/proc`` (Linux).

``TreeSampler`` is given root processes, each with a kind (``admission``,
``nats-server``, ...). It samples every process under them every ``interval``
seconds on a background thread: ``utime + stime`` (the process itself, all of
its threads), ``cutime + cstime`` (children it has waited for) and ``VmRSS``.
A descendant of a root counts under ``workers:<root kind>``; the root itself
counts under its kind. Processes are known by (pid, start time), so a reused
pid is a new process, and a descendant stays in its kind if its parent dies.

How CPU during the phase (``start()`` to ``stop()``) is counted, per process:

- alive at the end: its own ticks at the end minus at the start (zero if it
  was born after the start);
- died in between: through its parent (below) when the parent is alive,
  else its own ticks at its last sample minus at the start;
- the children a process waited for: the growth of its ``cutime + cstime``
  (less what those children had at the start, when they were sampled then),
  or, if larger, what sampling saw of its dead children. The larger of two
  lower bounds is taken, never their sum, so a dead child is not counted
  twice; the children term is charged to the parent's workers kind.

Limits: a child that dies between two samples and is not waited for by a
process in the tree (reparented to init, or reaped with ``SIGCHLD`` ignored)
is lost; a sampled child that dies is counted only up to its last sample
unless its parent waits for it; a dead process's own children term is
counted through its parent, not directly. Ticks are ``SC_CLK_TCK`` (usually
10 ms), so a process is rounded to that. The sampler's own cost falls on the
calling process (the bench client). ``/proc/stat`` (``machine_ticks``) counts
every process on the machine, other users' included.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from dataclasses import dataclass, field

__all__ = [
    "LOOP",
    "TICK_SECONDS",
    "TreeSampler",
    "thread_role_ticks",
    "machine_busy_ticks",
    "own_cpu_seconds",
    "process_cpu_seconds",
    "rss_bytes",
]

TICK_SECONDS = 1.0 / os.sysconf("SC_CLK_TCK")


@dataclass
class _Proc:
    pid: int
    ppid: int
    kind: str
    own_start: int  # own ticks at the phase start (0 when born later)
    children_start: int
    own: int = 0
    children: int = 0
    rss: int = 0
    peak_rss: int = 0
    alive: bool = True
    counted_by_parent: bool = False
    dead_children: list[tuple[int, int]] = field(default_factory=list)  # (ticks, ticks at start)


def _stat(pid: int) -> tuple[int, int, int, int] | None:
    """(ppid, own ticks, waited-for children's ticks, start time) or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read()
    except OSError:
        return None
    fields = text[text.rindex(b")") + 2 :].split()
    # fields[0] is field 3 (state): ppid 4, utime 14, stime 15, cutime 16, cstime 17, start 22.
    return (
        int(fields[1]),
        int(fields[11]) + int(fields[12]),
        int(fields[13]) + int(fields[14]),
        int(fields[19]),
    )


LOOP = "event loop"
"""A service's main thread: its event loop, and the process's own name."""
OTHER = "other"
"""gRPC's core threads, the metrics and tracing threads and any other."""


def thread_role_ticks(pid: int, roles: tuple[str, ...]) -> dict[str, int]:
    """Ticks process ``pid``'s live threads have used, by role: the main
    thread is ``LOOP``; a thread the OS knows as ``<role>_<n>`` (one of
    ``roles``, ``quire.threadnames``) is that role; the rest are ``OTHER``."""
    ticks: dict[str, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return ticks
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm", encoding="utf-8") as handle:
                name = handle.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as handle:
                text = handle.read()
        except OSError:
            continue  # ended since the listing
        fields = text[text.rindex(b")") + 2 :].split()
        role = LOOP if tid == str(pid) else name.rpartition("_")[0] or name
        role = role if role == LOOP or role in roles else OTHER
        ticks[role] = ticks.get(role, 0) + int(fields[11]) + int(fields[12])
    return ticks


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds process ``pid`` has used itself (all its threads)."""
    stat = _stat(pid)
    if stat is None:
        raise ProcessLookupError(pid)
    return stat[1] * TICK_SECONDS


def own_cpu_seconds() -> float:
    """CPU seconds this process has used (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss_bytes(pid: int) -> int:
    """VmRSS of a process, 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def machine_busy_ticks() -> int:
    """Ticks all CPUs spent not idle (user, nice, system, irq, softirq, steal)."""
    with open("/proc/stat") as handle:
        values = [int(value) for value in handle.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
    return user + nice + system + irq + softirq + steal


class TreeSampler:
    def __init__(self, roots: dict[int, str], interval: float = 0.2) -> None:
        self._roots = roots
        self._interval = interval
        self._procs: dict[tuple[int, int], _Proc] = {}
        self._started = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.own_cpu_seconds = 0.0
        """CPU the sampling itself cost the calling process (thread time)."""

    def _scan(self) -> None:
        started = time.thread_time()
        try:
            self._scan_once()
        finally:
            self.own_cpu_seconds += time.thread_time() - started

    def _scan_once(self) -> None:
        """One sample of every process; new descendants of known ones join."""
        table: dict[int, tuple[int, int, int, int]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                stat = _stat(int(name))
                if stat is not None:
                    table[int(name)] = stat
        live = {(pid, stat[3]): pid for pid, stat in table.items()}
        known_pids = {proc.pid: proc for key, proc in self._procs.items() if key in live}
        # Adopt descendants, parents first: repeat until nothing new joins.
        added = True
        while added:
            added = False
            for pid, (ppid, own, children, start) in table.items():
                if (pid, start) in self._procs:
                    continue
                kind = self._roots.get(pid)
                if kind is None and ppid in known_pids:
                    parent_kind = known_pids[ppid].kind
                    kind = (
                        parent_kind
                        if parent_kind.startswith("workers:")
                        else (f"workers:{parent_kind}")
                    )
                if kind is None:
                    continue
                born_later = self._started
                proc = _Proc(
                    pid, ppid, kind, 0 if born_later else own, 0 if born_later else children
                )
                self._procs[(pid, start)] = proc
                known_pids[pid] = proc
                added = True
        for key, proc in self._procs.items():
            if not proc.alive:
                continue
            stat = table.get(proc.pid)
            if stat is None or stat[3] != key[1]:
                proc.alive = False
                parent = known_pids.get(proc.ppid)
                if parent is not None:
                    proc.counted_by_parent = True
                    parent.dead_children.append(
                        (proc.own + proc.children, proc.own_start + proc.children_start)
                    )
                continue
            proc.ppid, proc.own, proc.children = stat[0], stat[1], stat[2]
            proc.rss = rss_bytes(proc.pid)
            proc.peak_rss = max(proc.peak_rss, proc.rss)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                self._scan()

    def start(self) -> None:
        with self._lock:
            self._scan()
            self._started = True
        self._thread = threading.Thread(target=self._run, name="procstats", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._scan()

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds per kind during the phase (see the module docstring)."""
        ticks: dict[str, int] = {}
        for proc in self._procs.values():
            if not proc.counted_by_parent:
                ticks[proc.kind] = ticks.get(proc.kind, 0) + proc.own - proc.own_start
            if not proc.alive:
                continue
            reaped = proc.children - proc.children_start
            reaped -= sum(at_start for _, at_start in proc.dead_children)
            sampled = sum(last - at_start for last, at_start in proc.dead_children)
            kind = proc.kind if proc.kind.startswith("workers:") else f"workers:{proc.kind}"
            ticks[kind] = ticks.get(kind, 0) + max(reaped, sampled)
        return {kind: value * TICK_SECONDS for kind, value in ticks.items()}

    def kinds(self) -> dict[int, str]:
        """The kind of every process seen during the phase, by pid (for
        charging another tool's samples, ``cpusplit``)."""
        with self._lock:
            return {proc.pid: proc.kind for proc in self._procs.values()}

    def memory(self) -> dict[str, tuple[int, int, int]]:
        """Per kind: (current RSS summed over live processes, peak single-process
        RSS seen while sampling, live process count)."""
        result: dict[str, tuple[int, int, int]] = {}
        for proc in self._procs.values():
            now, peak, count = result.get(proc.kind, (0, 0, 0))
            rss = rss_bytes(proc.pid) if proc.alive else 0
            result[proc.kind] = (
                now + rss,
                max(peak, proc.peak_rss),
                count + (1 if proc.alive and rss else 0),
            )
        return result
