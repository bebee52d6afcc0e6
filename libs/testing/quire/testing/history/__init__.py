"""A workload's history and its checker (issue 42).

Clients record every call and answer as they go (``RecordingClient`` writing
a ``HistoryLog`` per process); after the run ``gather_facts`` asks the
system, as an operator, what it holds, and ``check`` proves each property
over the two, naming the jobs that break one; ``verdicts_markdown`` writes
the verdicts for a report.

    with HistoryLog(folder / "client-0.jsonl", "client-0") as log:
        async with RecordingClient(address, token, history=log) as client:
            ...  # the workload
    history = History.read(folder.glob("*.jsonl"))
    facts = await gather_facts(SystemAccess.of_stack(info, tokens), history, workdir)
    verdicts = check(history, facts)
    assert verdicts.ok, verdicts.summary()
"""

from quire.testing.history.checker import check
from quire.testing.history.facts import SystemFacts
from quire.testing.history.gather import gather_facts, settle
from quire.testing.history.operator import SystemAccess
from quire.testing.history.ops import History, Kind, Op, Rpc
from quire.testing.history.recorder import HistoryLog, RecordingClient
from quire.testing.history.report import verdicts_markdown
from quire.testing.history.verdicts import PROPERTIES, Property, Verdict, Verdicts, Violation

__all__ = [
    "History",
    "HistoryLog",
    "Kind",
    "Op",
    "PROPERTIES",
    "Property",
    "RecordingClient",
    "Rpc",
    "SystemAccess",
    "SystemFacts",
    "Verdict",
    "Verdicts",
    "Violation",
    "check",
    "gather_facts",
    "settle",
    "verdicts_markdown",
]
