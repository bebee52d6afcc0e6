"""The suite's own rules (``quire.testing.tiers``, ``quire.testing.timings``),
run on small test files in a scratch directory: under CI a skip fails, a
unit-tier test that starts a stack fails, a test kept for its make target is
deselected elsewhere, and the run says where its time went."""

from __future__ import annotations

import pytest

PLUGINS = (
    *("-p", "quire.testing.tiers", "-p", "quire.testing.timings", "-p", "no:cacheprovider"),
    *("-p", "no:asyncio", "-p", "no:hypothesispytest", "-p", "no:schemathesis"),
)

SKIPPING = """
import pytest

def test_needs_a_tool():
    pytest.skip("the tool is not installed")
"""


def test_a_skip_is_a_skip_outside_ci(pytester: pytest.Pytester, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(SKIPPING)
    pytester.runpytest_inprocess(*PLUGINS).assert_outcomes(skipped=1)


@pytest.mark.parametrize("value", ["true", "1"])
def test_under_ci_a_skip_fails_and_says_why(pytester: pytest.Pytester, monkeypatch, value) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CI", value)
    pytester.makepyfile(SKIPPING)
    result = pytester.runpytest_inprocess(*PLUGINS)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*skipped under CI*the tool is not installed*"])


def test_under_ci_a_module_skipped_at_import_fails(pytester: pytest.Pytester, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(
        """
        import pytest
        pytest.importorskip("a_module_nobody_installed")

        def test_never_collected():
            pass
        """
    )
    result = pytester.runpytest_inprocess(*PLUGINS)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*skipped under CI*a_module_nobody_installed*"])


def test_a_unit_test_that_starts_a_stack_fails_before_starting_it(
    pytester: pytest.Pytester, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(
        """
        from quire.stack.supervisor import Stack

        def test_unmarked(tmp_path):
            Stack(tmp_path / "stack").start()
        """
    )
    result = pytester.runpytest_inprocess(*PLUGINS)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*starts a stack: mark it stack, fault or corpus*"])
    assert not list(pytester.path.rglob("stack.json")), "nothing was started"


def test_a_test_kept_for_its_target_is_deselected_elsewhere_and_runs_there(
    pytester: pytest.Pytester, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("TEST_TARGET", raising=False)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.only_in("soak")
        def test_long():
            pass

        def test_short():
            pass
        """
    )
    elsewhere = pytester.runpytest_inprocess(*PLUGINS)
    elsewhere.assert_outcomes(passed=1, deselected=1)
    monkeypatch.setenv("TEST_TARGET", "soak")
    pytester.runpytest_inprocess(*PLUGINS).assert_outcomes(passed=2)


def test_the_run_prints_time_per_tier_and_the_slowest_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import time
        import pytest

        @pytest.mark.stack
        def test_slow():
            time.sleep(0.3)

        @pytest.mark.corpus
        def test_corpus():
            pass

        def test_quick():
            pass
        """
    )
    result = pytester.runpytest_inprocess(*PLUGINS)
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*time per tier*",
            " corpus:     1 tests*",
            "  fault:     0 tests*",
            "  stack:     1 tests      0.3 s*",
            "   unit:     1 tests*",
            "stacks started: 0*",
            "*slowest tests*",
            "*0.3 s *s CPU   stack  test_the_run_prints_time_per_tier_and_the_slowest_tests.py::test_slow",
        ]
    )


GROUPED_CONFTEST = """
import pytest

from quire.testing.filegroups import FileGroupScheduling

GROUPS = {"shared": ("test_a.py", "test_b.py")}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return FileGroupScheduling(config, log, groups=GROUPS)
"""

RECORDING = """
import os
import pathlib


def test_{name}_{index}():
    pathlib.Path("ran-{name}-{index}").write_text(os.environ["PYTEST_XDIST_WORKER"])
"""


def test_the_files_of_a_group_run_on_one_worker_and_others_are_shared_out(
    pytester: pytest.Pytester, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """Two grouped files and four others on three workers: the group's files
    on one worker; each other file whole on one worker, and the work spread."""
    monkeypatch.delenv("CI", raising=False)
    pytester.makeconftest(GROUPED_CONFTEST)
    names = ("a", "b", "c", "d", "e", "f")
    for name in names:
        tests = "".join(RECORDING.format(name=name, index=index) for index in range(3))
        pytester.makepyfile(**{f"test_{name}": tests})
    result = pytester.runpytest_subprocess(
        "-n", "3", "--dist", "loadfile", "--no-loadscope-reorder", "-p", "no:cacheprovider",
        *("-p", "no:asyncio", "-p", "no:hypothesispytest", "-p", "no:schemathesis"),
    )  # fmt: skip
    result.assert_outcomes(passed=18)
    worker = {
        name: {(pytester.path / f"ran-{name}-{i}").read_text() for i in range(3)} for name in names
    }
    assert all(len(ran_on) == 1 for ran_on in worker.values()), worker
    assert worker["a"] == worker["b"], worker
    assert len(set().union(*worker.values())) > 1, "the work was shared out"
