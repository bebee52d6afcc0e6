"""The validator's ruleset book finds a version another replica (a rollout's
candidate build) published after it started: several lookups at once wait
for one reading of the table, and none is refused while it runs. A ruleset
file that is no ruleset, or that changed a published version, refuses the
start with a message naming the file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from quire.database import Database
from quire.errors import InvalidSetting
from quire.validator import tables
from quire.validator.rulesets import Ruleset, RulesetBook, load_directory

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
    # Within the second, a miss waits for the next reading rather than
    # taking the last one's answer.
    assert await book.find("nobody@1") is None
    assert reads == 2
    ours.close()
    theirs.close()


async def test_a_version_published_just_after_a_reading_is_not_refused(tmp_path: Path) -> None:
    """The candidate build publishes its ruleset while the baseline's last
    reading is less than a second old: the list and a lookup asked after the
    publication both see it (they waited for the next reading; a rollout
    naming it was refused as unknown)."""
    url = f"sqlite:///{tmp_path / 'validator.db'}"
    ours = Database(url, tables.metadata)
    tables.metadata.create_all(ours.engine)
    book = RulesetBook(ours)
    assert await book.published() == []  # a reading, just now
    theirs = Database(url, tables.metadata)
    RulesetBook(theirs).install([Ruleset.from_body(DEFAULT_2)])
    assert [r.key for r in await book.published()] == ["default@2"]
    assert [r.key for r in await book.published(fresh=False)] == ["default@2"]
    RulesetBook(theirs).install([Ruleset.from_body({**DEFAULT_2, "version": "3"})])
    found = await book.find("default@3")
    assert found is not None and found.key == "default@3"
    ours.close()
    theirs.close()


async def test_the_list_reads_a_version_published_elsewhere(tmp_path: Path) -> None:
    """What ListRulesets serves (admission's catalog, which a rollout's
    candidate ruleset must be in) includes another build's publication."""
    url = f"sqlite:///{tmp_path / 'validator.db'}"
    ours = Database(url, tables.metadata)
    tables.metadata.create_all(ours.engine)
    book = RulesetBook(ours)
    book.reload()
    theirs = Database(url, tables.metadata)
    RulesetBook(theirs).install([Ruleset.from_body(DEFAULT_2)])
    assert [r.key for r in await book.published()] == ["default@2"]
    ours.close()
    theirs.close()


def test_a_published_version_changed_in_its_file_refuses_the_start_naming_the_file(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "rulesets"
    folder.mkdir()
    published = folder / "default-2.json"
    published.write_text(json.dumps(DEFAULT_2))
    database = Database(f"sqlite:///{tmp_path / 'validator.db'}", tables.metadata)
    tables.metadata.create_all(database.engine)
    RulesetBook(database).install(load_directory(folder))
    published.write_text(json.dumps({**DEFAULT_2, "active_content": "allow"}))
    with pytest.raises(InvalidSetting) as refused:
        RulesetBook(database).install(load_directory(folder))
    said = refused.value.message
    assert said.startswith("QUIRE_RULESETS_DIR: ") and str(published) in said, said
    assert "default@2" in said
    database.close()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "not JSON"),
        ("[]", "not a JSON object"),
        ('{"name": "x"}', "no 'version'"),
        ('{"name": "x", "version": "1", "rules": [{"kind": "nonsense", "id": "r"}]}', "unknown"),
    ],
)
def test_a_file_that_is_no_ruleset_refuses_the_start_naming_the_file(
    tmp_path: Path, text: str, why: str
) -> None:
    (tmp_path / "bad.json").write_text(text)
    with pytest.raises(InvalidSetting) as refused:
        load_directory(tmp_path)
    assert str(tmp_path / "bad.json") in refused.value.message
    assert why in refused.value.message, refused.value.message
