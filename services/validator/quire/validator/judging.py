"""The ruleset's judgement of a job's documents, as a sandbox worker runs it.

Kept apart from ``quire.validator.evaluation`` (the service side: blobs,
metrics, the job queue) so a worker imports only the extraction and the
rules, and its forkserver can load them once for every worker it forks.
"""

from __future__ import annotations

from quire.validator.facts import DocumentFacts, extract_facts
from quire.validator.rules import Decision, evaluate
from quire.validator.ruleset import Ruleset


def judge(sources: list[tuple[str, int, str]], ruleset: Ruleset) -> list[Decision]:
    """Extract the facts and apply the rules, inside a sandbox worker: only the
    decisions (no document text) come back to the service."""
    facts: list[DocumentFacts] = [extract_facts(*source) for source in sources]
    return evaluate(ruleset, facts)
