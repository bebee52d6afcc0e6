"""One backoff formula for every retry loop (``quire.backoff``), and each loop
waits by it: the queues, the notifier, the validator's source fetches and
the embedded stack's nats-server restarts."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from quire.admission.settings import NotificationSettings
from quire.backoff import Backoff, Jitter
from quire.settings import QueueSettings
from quire.stack import supervisor
from quire.validator.sources.settings import SourceSettings

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("jitter", list(Jitter))
def test_the_wait_doubles_to_its_cap_within_the_jitter_band(jitter: Jitter) -> None:
    backoff = Backoff(0.5, 4.0, jitter)
    low = {Jitter.NONE: 1.0, Jitter.EQUAL: 0.5, Jitter.FULL: 0.0}[jitter]
    rng = random.Random(7)
    for attempt, ceiling in ((0, 0.5), (1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (10**6, 4.0)):
        assert backoff.ceiling(attempt) == ceiling
        waits = [backoff.delay(attempt, rng) for _ in range(200)]
        assert all(low * ceiling <= w <= ceiling for w in waits), (attempt, jitter)
        if jitter is Jitter.NONE:
            assert set(waits) == {ceiling}
        else:
            assert len(set(waits)) > 100, "jittered waits spread out"


def test_a_seeded_generator_gives_the_same_waits() -> None:
    backoff = Backoff(0.2, 2.0, Jitter.FULL)
    first = [backoff.delay(n, random.Random(3)) for n in range(1, 6)]
    again = [backoff.delay(n, random.Random(3)) for n in range(1, 6)]
    assert first == again


def test_every_retry_loop_waits_by_the_one_backoff() -> None:
    assert QueueSettings(backoff_base_seconds=1, backoff_cap_seconds=8).backoff == Backoff(
        1, 8, Jitter.EQUAL
    )
    assert NotificationSettings(backoff_base_seconds=2, backoff_cap_seconds=600).backoff == (
        Backoff(2, 600, Jitter.FULL)
    )
    assert SourceSettings(backoff_base_seconds=0.2, backoff_cap_seconds=2).backoff == (
        Backoff(0.2, 2, Jitter.FULL)
    )
    delays = [supervisor.nats_restart_delay(failures) for failures in range(1, 8)]
    assert delays == [0.0, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def _exponential_formulas(path: Path) -> list[int]:
    """Lines of ``path`` that raise 2 to a power that is not a literal."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Pow)
            and isinstance(node.left, ast.Constant)
            and node.left.value == 2
            and not isinstance(node.right, ast.Constant)
        ):
            lines.append(node.lineno)
    return lines


def test_no_retry_loop_writes_its_own_formula() -> None:
    own = ROOT / "libs" / "core" / "quire" / "backoff.py"
    sources = [
        path
        for top in ("libs", "services")
        for path in (ROOT / top).rglob("*.py")
        if path != own
        and "build" not in path.parts  # setuptools' copies, made by the distributions test
        and not path.name.endswith(("_pb2.py", "_pb2_grpc.py"))
    ]
    found = {
        str(p.relative_to(ROOT)): lines for p in sources if (lines := _exponential_formulas(p))
    }
    assert found == {}, "use quire.backoff.Backoff"
