"""Names in ``quire.jobs``: a job's resource name is ``jobs/<id>``, the id
lower-case hex digits, and any other name is NOT_FOUND, never a lookup; a
state's name is its enum name without ``JOB_STATE_``."""

from __future__ import annotations

import pytest

from quire.errors import NotFound
from quire.jobs import JobState, job_id, job_name, new_job_id, state_name, state_value


def test_a_new_jobs_name_gives_its_id_back() -> None:
    ident = new_job_id()
    assert job_id(job_name(ident)) == ident


@pytest.mark.parametrize(
    "name",
    [
        "jobs/",
        "jobs",
        "job/0a1f",
        "jobs/0A1F",
        "jobs/0a1g",
        "jobs/0a1f\n",
        "jobs/ 0a1f",
        "jobs/0a1f/events",
        "jobs/\u0663\u0664",  # digits, but not ASCII ones
        "tenants/t1/jobs/0a1f",
    ],
)
def test_any_other_name_is_not_found(name: str) -> None:
    with pytest.raises(NotFound):
        job_id(name)


def test_every_state_is_named_without_its_prefix_and_no_other_value_is() -> None:
    for state in JobState.DESCRIPTOR.values:
        assert state_name(state.number) == state.name.removeprefix("JOB_STATE_")
        assert state_value(state_name(state.number)) == state.number
    with pytest.raises(ValueError):
        state_name(max(s.number for s in JobState.DESCRIPTOR.values) + 1)
