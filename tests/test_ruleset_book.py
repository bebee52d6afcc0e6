"""The validator's ruleset book finds a version another replica (a rollout's
candidate build) published after it started: several lookups at once wait
for one reading of the table, and none is refused while it runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

from quire.database import Database
from quire.validator import tables
from quire.validator.rulesets import Ruleset, RulesetBook

DEFAULT_2 = {"name": "default", "version": "2", "active_content": "refuse", "rules": []}


async def test_concurrent_lookups_of_a_version_published_elsewhere_all_find_it(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'validator.db'}"
    ours = Database(url, tables.metadata)
    tables.metadata.create_all(ours.engine)
    book = RulesetBook(ours)
    book.reload()
    assert book.get("default@2") is None

    theirs = Database(url, tables.metadata)
    RulesetBook(theirs).install([Ruleset.from_body(DEFAULT_2)])  # the candidate's build
    reads = 0
    real_reload = book.reload

    def counted() -> None:
        nonlocal reads
        reads += 1
        real_reload()

    book.reload = counted  # type: ignore[method-assign]
    found = await asyncio.gather(*(book.find("default@2") for _ in range(8)))
    assert [r.key if r else None for r in found] == ["default@2"] * 8
    assert reads == 1, "one reading for every lookup waiting at once"
    assert await book.find("nobody@1") is None  # within a second: no second reading
    assert reads == 1
    ours.close()
    theirs.close()
