"""``make bench``'s skeleton (``bench/skeleton.py``): the design's five
processes doing only the parts the design requires, on a real nats-server
and SQLite, and the arithmetic that sets it against issue 37's aims."""

from __future__ import annotations

import hashlib
import importlib
import sqlite3
import sys
from pathlib import Path
from types import ModuleType

import pytest

from quire.testing.pdfs import write_text_pdf

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _bench_module(name: str) -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


def _packets(folder: Path, count: int) -> list[list[Path]]:
    folder.mkdir()
    return [
        [
            write_text_pdf(folder / f"p{index}-d{doc}.pdf", [f"packet {index} doc {doc}"])
            for doc in range(3)
        ]
        for index in range(count)
    ]


def test_the_skeleton_completes_every_job_with_its_whole_history_and_leaves_no_message(
    tmp_path: Path,
) -> None:
    skeleton = _bench_module("skeleton")
    packets = _packets(tmp_path / "inputs", 12)
    measured = skeleton.skeleton_floor(tmp_path / "skeleton", packets, 4, 4, idle=3, passes=2)
    assert measured.jobs == 12
    assert len(measured.pass_ms) == 2
    assert measured.total_ms == pytest.approx(min(measured.pass_ms))
    # ACCEPTED, VALIDATED, ASSEMBLED, SIGNED, COMPLETED for each job of both passes.
    assert measured.ledger_entries == 5 * 12 * 2
    assert measured.left_in_streams == 0
    assert len(measured.idle_seconds) == 3
    for kind in (*skeleton.ROLES, "nats-server", "client"):
        assert measured.cpu_seconds[kind] > 0, kind
    # Each stage's sandbox worker is a process of its own, measured on its own.
    for stage in ("validator", "assembler", "signer"):
        assert measured.cpu_seconds[f"workers:{stage}"] >= 0
    # The ledger is a hash chain: each entry's hash covers the one before it.
    with sqlite3.connect(tmp_path / "skeleton" / "audit.db") as connection:
        rows = connection.execute("SELECT job, entry, hash FROM ledger ORDER BY seq").fetchall()
    link = b""
    for job, entry, kept in rows:
        link = hashlib.sha256(link + f"{job}|{entry}".encode()).digest()
        assert kept == link
    completed = [job for job, entry, _ in rows if entry == "COMPLETED"]
    # The signer claimed each job once, in the gate, before signing it
    # (the warm-up's, both passes', not yet the idle jobs').
    assert measured.claims == 4 + 2 * 12
    assert len(completed) == len(set(completed)) == 4 + 2 * 12 + 3
    # Each stage kept its outputs as sealed blobs: the sources, the merge, the signed copy.
    blobs = tmp_path / "skeleton" / "blobs"
    assert len(list((blobs / "admission").glob("job*"))) == 3 * 12 * 2
    assert len(list((blobs / "assembler").glob("job*"))) == 12 * 2
    assert len(list((blobs / "signer").glob("job*"))) == 12 * 2
    source = packets[0][0].read_bytes()
    assert source[:64] not in (blobs / "admission" / "job0-0-0").read_bytes()


def test_a_message_is_believed_only_from_its_producer_and_on_its_subject() -> None:
    skeleton = _bench_module("skeleton")
    import base64

    from nacl.signing import SigningKey

    seeds = {
        role: base64.b64encode(bytes(SigningKey.generate())).decode() for role in skeleton.ROLES
    }
    admission = skeleton.Wire("admission", seeds)
    validator = skeleton.Wire("validator", seeds)
    headers = admission.headers("skel.work.validate", b"job|k|d", "job.validate")
    assert validator.check("skel.work.validate", b"job|k|d", headers, "admission")
    assert not validator.check("skel.work.assemble", b"job|k|d", headers, "admission")
    assert not validator.check("skel.work.validate", b"job|k|e", headers, "admission")
    assert not validator.check("skel.work.validate", b"job|k|d", headers, "assembler")
    assert not validator.check("skel.work.validate", b"job|k|d", None, "admission")
    forged = validator.headers("skel.work.validate", b"job|k|d", "job.validate")
    forged[skeleton.SIGNATURE] = "admission." + forged[skeleton.SIGNATURE].split(".", 1)[1]
    assert not validator.check("skel.work.validate", b"job|k|d", forged, "admission")


def test_the_skeleton_is_set_against_the_room_each_aim_leaves(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = _bench_module("pipeline_bench")
    skeleton = _bench_module("skeleton")
    # (22.7 + 7.9) / 7.9, and 2 cores / 30.6 ms against 249.2 packets/s
    ratio, share = bench.skeleton_bounds(22.7, 7.9, 249.2, 2)
    assert ratio == pytest.approx(3.873, abs=1e-3)
    assert share == pytest.approx(0.2623, abs=1e-4)
    measured = skeleton.Skeleton(
        jobs=100,
        seconds=2.0,
        cpu_seconds={"admission": 0.5, "audit": 0.6, "nats-server": 0.5, "client": 0.2},
        ledger_entries=500,
        left_in_streams=0,
        idle_seconds=(0.020, 0.030, 0.040),
    )
    rows = bench.print_skeleton(measured, 7.9, 50.0, 249.2, 2, 0.012)
    out = capsys.readouterr().out
    # 18 ms per job beside 7.9 ms of bare work: 3.28x against 3x; the room is 2 x 7.9.
    assert "3.28x the bare libraries' CPU at the least" in out
    assert "room 15.80 ms, the skeleton 1.14x it: CANNOT be met in this design" in out
    assert "Quire spends 24.1 ms per job more than the skeleton" in out
    # p50 30 ms + 12 ms of bare work is under 60 ms.
    assert "with one packet's bare work (12.0 ms) 42.0 ms (aim p50 <= 60 ms: leaves room)" in out
    assert rows["cpu"][0].startswith("| the design's skeleton")
    assert "30.0 + 12.0 ms" in rows["idle"][0]
    cheap = skeleton.Skeleton(100, 2.0, {"admission": 0.5}, 500, 0)
    bench.print_skeleton(cheap, 7.9, 50.0, 249.2, 2, 0.012)
    out = capsys.readouterr().out
    assert "room 15.80 ms, the skeleton 0.32x it: leaves room" in out
    assert "idle skeleton" not in out


def test_a_budget_below_what_the_skeleton_spends_is_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = _bench_module("pipeline_bench")
    skeleton = _bench_module("skeleton")
    measured = skeleton.Skeleton(
        jobs=10,
        seconds=1.0,
        cpu_seconds={"audit": 0.05, "admission": 0.02},
        ledger_entries=50,
        left_in_streams=0,
    )
    rows = bench.print_budgets({"audit": 0.045, "admission": 0.1}, {}, 10, measured)
    out = capsys.readouterr().out
    # audit: 4.5 ms measured, 5.0 the skeleton's, budget 4; admission: 10 over 6, skeleton 2.
    assert "| audit | 4.5 | 5.0 | 4.0 | over; budget below the skeleton |" in rows
    assert "| admission | 10.0 | 2.0 | 6.0 | over |" in rows
    assert "the skeleton alone spends more than the budget of audit" in out
    assert "| validator | 0.0 | — | 3.0 |  |" in rows
