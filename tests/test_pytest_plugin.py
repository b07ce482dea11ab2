"""Tests for aiowheel's pytest plugin (:mod:`aiowheel.pytest_plugin`), run through ``pytester``.

Each test writes a small project and runs pytest on it in this process, with the plugin loaded
from its ``pytest11`` entry point as in any project that installs aiowheel. What must hold:

* ``@pytest.mark.asyncio(loop_factories=[...])`` runs a test on each loop named, and
  ``aiowheel_default_loop_factories`` makes them the default for unmarked tests;
* a test that asks for nothing is run exactly as without the plugin (``-p no:aiowheel``): the
  same ids, outcomes and loops, in strict and auto mode, with loop scopes, async fixtures and a
  custom event loop policy; our own suite collects the same tests either way;
* ``virtual_clock`` works on pytest-asyncio's virtual loop and on anyio's asyncio and trio
  backends, and says what to do everywhere else;
* loading the plugin imports no event loop, uvloop, trio or aiowheel.testing;
* the examples of docs/testing.md, as written there, pass.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent
TESTING_DOC = REPO / "docs" / "testing.md"

# Every project gets this: pytest-asyncio warns when the fixture loop scope is unset.
INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
{extra}
"""


def make_project(pytester: pytest.Pytester, ini_extra: str = "", **files: str) -> None:
    pytester.makeini(INI.format(extra=ini_extra))
    pytester.makepyfile(**files)


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """pytest in this process, without hypothesis' plugin (it would import and assert-rewrite all
    of hypothesis in every run: seconds each) and without the cache."""
    return pytester.runpytest("-p", "no:hypothesispytest", "-p", "no:cacheprovider", *args)


def outcomes(result: pytest.RunResult) -> list[tuple[str, str]]:
    """(nodeid, outcome) of every test, in run order, from an in-process run."""
    reports = result.reprec.getreports("pytest_runtest_logreport")  # type: ignore[attr-defined]
    seen: dict[str, str] = {}
    for report in reports:
        if report.when == "call" or report.outcome != "passed":
            seen.setdefault(report.nodeid, report.outcome)
        if report.when == "call" and hasattr(report, "wasxfail"):
            seen[report.nodeid] = "xfailed"
    return list(seen.items())


# -- pytest-asyncio's loop factories ------------------------------------------------------------

LOOP_TYPES = """
import asyncio

import pytest
import aiowheel.loop
from aiowheel.testing import VirtualTimeLoop


@pytest.mark.asyncio(loop_factories=["aiowheel-virtual"])
async def test_virtual():
    loop = asyncio.get_running_loop()
    assert type(loop) is VirtualTimeLoop
    await asyncio.sleep(3600)  # an hour, at once
    assert loop.time() == 3600.0


@pytest.mark.asyncio(loop_factories=["aiowheel"])
async def test_wheel():
    loop = asyncio.get_running_loop()
    assert isinstance(loop, aiowheel.loop.WheelLoop)
    assert isinstance(loop, asyncio.SelectorEventLoop)
    await asyncio.sleep(0.01)
    assert loop.wheel_stats().pending == 0


@pytest.mark.asyncio(loop_factories=["aiowheel-uvloop"])
async def test_wheel_uvloop():
    import uvloop

    loop = asyncio.get_running_loop()
    assert isinstance(loop, aiowheel.loop.WheelLoop)
    assert isinstance(loop, uvloop.Loop)


@pytest.mark.asyncio(loop_factories=["asyncio"])
async def test_asyncio():
    assert type(asyncio.get_running_loop()) is type(asyncio.new_event_loop())
"""


def test_the_marker_runs_each_test_on_the_loop_it_names(pytester: pytest.Pytester) -> None:
    pytest.importorskip("uvloop")
    make_project(pytester, test_loops=LOOP_TYPES)
    result = run(pytester, "-v")
    result.assert_outcomes(passed=4)
    # One factory per test: pytest-asyncio hides its id, so the names are the plain ones.
    result.stdout.fnmatch_lines(["*::test_virtual PASSED*", "*::test_asyncio PASSED*"])


def test_several_factories_run_the_test_once_on_each(pytester: pytest.Pytester) -> None:
    make_project(
        pytester,
        test_many="""
        import asyncio
        import pytest

        @pytest.mark.asyncio(loop_factories=["aiowheel-virtual", "aiowheel", "asyncio"])
        async def test_each(request):
            print(request.node.name, type(asyncio.get_running_loop()).__name__)
        """,
    )
    result = run(pytester, "-s")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*test_each[[]aiowheel-virtual[]] VirtualTimeLoop*",
            "*test_each[[]aiowheel[]] WheelEventLoop*",
            "*test_each[[]asyncio[]] _UnixSelectorEventLoop*",
        ]
    )


def test_an_unknown_factory_is_skipped_listing_the_available_ones(
    pytester: pytest.Pytester,
) -> None:
    make_project(
        pytester,
        test_unknown="""
        import pytest

        @pytest.mark.asyncio(loop_factories=["aiowheel-turbo"])
        async def test_nothing():
            pass
        """,
    )
    result = run(pytester, "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*'aiowheel-turbo' is not available. Available factories: "
            "aiowheel, aiowheel-uvloop, aiowheel-virtual, asyncio*"
        ]
    )


def test_aiowheel_uvloop_is_skipped_without_uvloop(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    make_project(
        pytester,
        test_uv="""
        import pytest

        @pytest.mark.asyncio(loop_factories=["aiowheel-uvloop"])
        async def test_needs_uvloop():
            pass
        """,
    )
    result = run(pytester, "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*aiowheel-uvloop needs uvloop, which is not installed*"])


def test_the_ini_option_makes_a_factory_the_default_for_unmarked_tests(
    pytester: pytest.Pytester,
) -> None:
    make_project(
        pytester,
        ini_extra="aiowheel_default_loop_factories = aiowheel-virtual",
        test_default="""
        import asyncio
        import pytest
        from aiowheel.testing import VirtualTimeLoop

        @pytest.mark.asyncio
        async def test_unmarked_is_virtual():
            await asyncio.sleep(86400)
            assert type(asyncio.get_running_loop()) is VirtualTimeLoop

        @pytest.mark.asyncio(loop_factories=["asyncio"])
        async def test_marked_keeps_its_own():
            assert type(asyncio.get_running_loop()) is not VirtualTimeLoop

        async def test_auto_mode_picks_it_up_too():
            assert type(asyncio.get_running_loop()) is VirtualTimeLoop
        """,
    )
    result = run(pytester, "-v", "-o", "asyncio_mode=auto")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*::test_unmarked_is_virtual PASSED*"])  # the name unchanged


def test_several_default_factories_parametrize_unmarked_tests(pytester: pytest.Pytester) -> None:
    make_project(
        pytester,
        ini_extra="aiowheel_default_loop_factories = aiowheel aiowheel-virtual",
        test_defaults="""
        import pytest

        @pytest.mark.asyncio
        async def test_twice():
            pass
        """,
    )
    result = run(pytester, "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*test_twice[[]aiowheel[]] PASSED*", "*test_twice[[]aiowheel-virtual[]] PASSED*"]
    )


def test_an_unknown_default_factory_is_a_usage_error(pytester: pytest.Pytester) -> None:
    make_project(
        pytester,
        ini_extra="aiowheel_default_loop_factories = aiowheel-virtual trio",
        test_any="def test_any(): pass",
    )
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*aiowheel_default_loop_factories: unknown loop factory 'trio'; expected names "
            "among: aiowheel, aiowheel-uvloop, aiowheel-virtual, asyncio*"
        ]
    )


def test_a_projects_own_hook_wins_and_can_merge_aiowheels_factories(
    pytester: pytest.Pytester,
) -> None:
    make_project(
        pytester,
        conftest="""
        import asyncio
        from aiowheel.pytest_plugin import loop_factories

        class MyLoop(asyncio.SelectorEventLoop):
            pass

        def pytest_asyncio_loop_factories(config, item):
            if item.name.startswith("test_defer"):
                return None  # aiowheel's hook answers
            return {"mine": MyLoop, **loop_factories()}
        """,
        test_own="""
        import asyncio
        import pytest
        from aiowheel.testing import VirtualTimeLoop

        @pytest.mark.asyncio
        async def test_unmarked_gets_the_projects_loops(request):
            assert request.node.callspec.id in {"mine", "aiowheel", "aiowheel-uvloop",
                                                "aiowheel-virtual", "asyncio"}

        @pytest.mark.asyncio(loop_factories=["mine", "aiowheel-virtual"])
        async def test_named(request):
            name = type(asyncio.get_running_loop()).__name__
            assert name == {"mine": "MyLoop", "aiowheel-virtual": "VirtualTimeLoop"}[
                request.node.callspec.id]

        @pytest.mark.asyncio
        async def test_defer():
            assert type(asyncio.get_running_loop()) is not VirtualTimeLoop
        """,
    )
    result = run(pytester, "-v")
    # The project's hook parametrizes its unmarked test with all five factories (pytest-asyncio's
    # rule for a hook's mapping); uvloop may be missing.
    parsed = result.parseoutcomes()
    assert parsed.get("failed", 0) == 0 and parsed.get("errors", 0) == 0
    result.stdout.fnmatch_lines(
        [
            "*test_named[[]mine[]] PASSED*",
            "*test_named[[]aiowheel-virtual[]] PASSED*",
            "*test_defer PASSED*",
        ]
    )


# -- tests that ask for nothing -----------------------------------------------------------------

# pytest-asyncio as projects use it, recording which loop each test ran on: loop scopes shared by
# several tests, async fixtures of two scopes, a sync fixture reading the current loop,
# parametrize, classes, failures, skips, xfails, and (in its own directory) a custom policy.
UNASKED = {
    "helpers.py": """
        import asyncio, json, os

        # Every loop recorded stays alive to the end of the run: a loop freed early could
        # leave its id() to the next one, which would then count as the same loop.
        SEEN = []

        def record(request):
            loop = asyncio.get_running_loop()
            SEEN.append(loop)
            with open(os.environ["LOOP_RECORD"], "a") as out:
                out.write(json.dumps([request.node.nodeid, type(loop).__qualname__, id(loop)]))
                out.write("\\n")
        """,
    "conftest.py": """
        import asyncio
        import pytest, pytest_asyncio

        @pytest_asyncio.fixture(loop_scope="module", scope="module")
        async def module_loop():
            yield asyncio.get_running_loop()

        @pytest_asyncio.fixture
        async def function_loop():
            yield asyncio.get_running_loop()

        @pytest_asyncio.fixture
        def current_loop():
            return asyncio.get_event_loop()
        """,
    "test_scopes.py": """
        import asyncio
        import pytest
        from helpers import record

        pytestmark = pytest.mark.asyncio(loop_scope="module")

        async def test_module_1(request, module_loop):
            record(request)
            assert asyncio.get_running_loop() is module_loop

        @pytest.mark.parametrize("n", [1, 2])
        async def test_module_2(request, n, module_loop):
            record(request)
            assert asyncio.get_running_loop() is module_loop

        class TestClassScope:
            @pytest.mark.asyncio(loop_scope="class")
            async def test_class_1(self, request):
                record(request)

            @pytest.mark.asyncio(loop_scope="class")
            async def test_class_2(self, request):
                record(request)
        """,
    "test_functions.py": """
        import asyncio
        import pytest
        from helpers import record

        @pytest.mark.asyncio
        async def test_fixtures(request, function_loop, current_loop):
            record(request)
            assert function_loop is asyncio.get_running_loop() is current_loop

        @pytest.mark.asyncio(loop_scope="session")
        async def test_session_1(request):
            record(request)

        @pytest.mark.asyncio(loop_scope="session")
        async def test_session_2(request):
            record(request)

        @pytest.mark.asyncio
        @pytest.mark.parametrize("n", range(3))
        async def test_parametrized(request, n):
            record(request)
            await asyncio.sleep(0.001)

        def test_sync():
            pass

        @pytest.mark.asyncio
        async def test_fails(request):
            record(request)
            assert False

        @pytest.mark.asyncio
        @pytest.mark.skip(reason="skipped")
        async def test_skipped():
            pass

        @pytest.mark.asyncio
        @pytest.mark.xfail(reason="expected")
        async def test_xfails():
            assert False

        @pytest.mark.anyio
        async def test_anyio(request):
            record(request)
        """,
    "policy/conftest.py": """
        import asyncio
        import pytest

        class PolicyLoop(asyncio.SelectorEventLoop):
            pass

        class Policy(asyncio.DefaultEventLoopPolicy):
            def new_event_loop(self):
                return PolicyLoop()

        @pytest.fixture(scope="session")
        def event_loop_policy():
            return Policy()
        """,
    "policy/test_policy.py": """
        import pytest
        from helpers import record

        @pytest.mark.asyncio
        async def test_policy_loop(request):
            record(request)
        """,
}


def _run_unasked(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[list[tuple[str, str]], list[tuple[str, str, int]], list[str]]:
    """Run UNASKED; return the outcomes, the loops (class, first-seen index) and collected ids."""
    record = pytester.path / f"loops-{len(list(pytester.path.glob('loops-*')))}.jsonl"
    monkeypatch.setenv("LOOP_RECORD", str(record))
    result = run(pytester, "-W", "ignore::DeprecationWarning", *args)
    collected = run(pytester, "--co", "-q", *args)
    ids = [line for line in collected.outlines if "::" in line]
    order: dict[int, int] = {}
    loops = []
    for line in record.read_text().splitlines():
        nodeid, kind, loop_id = json.loads(line)
        loops.append((nodeid, kind, order.setdefault(loop_id, len(order))))
    return outcomes(result), loops, ids


@pytest.mark.parametrize("mode", ["strict", "auto"])
def test_tests_that_ask_for_nothing_run_as_without_the_plugin(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    (pytester.path / "policy").mkdir()
    make_project(pytester, **{name.removesuffix(".py"): text for name, text in UNASKED.items()})
    with_plugin = _run_unasked(pytester, monkeypatch, "-o", f"asyncio_mode={mode}")
    without = _run_unasked(pytester, monkeypatch, "-o", f"asyncio_mode={mode}", "-p", "no:aiowheel")
    assert with_plugin == without
    results, loops, ids = with_plugin
    # The corpus itself ran as intended: shared loops shared, the policy's loop used.
    assert dict(results)["test_functions.py::test_fails"] == "failed"
    assert dict(results)["test_functions.py::test_xfails"] == "xfailed"
    assert ("policy/test_policy.py::test_policy_loop", "PolicyLoop") in {
        (nodeid, kind) for nodeid, kind, _ in loops
    }
    module_loops = {index for nodeid, _, index in loops if "test_module_" in nodeid}
    assert len(module_loops) == 1
    assert "test_functions.py::test_parametrized[0]" in ids


@pytest.mark.slow
@pytest.mark.once
def test_our_own_suite_collects_the_same_tests_with_and_without_the_plugin() -> None:
    def collect(*args: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        return [line for line in done.stdout.splitlines() if "::" in line]

    with_plugin = collect()
    assert len(with_plugin) > 500
    assert with_plugin == collect("-p", "no:aiowheel")


def test_loading_the_plugin_imports_no_loop_uvloop_trio_or_aiowheel_testing() -> None:
    # pytest imports the plugin at startup, before any test: only the plugin module itself may
    # be new beyond the aiowheel package it lives in.
    probe = """
import sys, pytest, aiowheel
before = set(sys.modules)
import aiowheel.pytest_plugin
print(sorted(set(sys.modules) - before))
print(sorted(name for name in ("uvloop", "trio", "aiowheel.testing") if name in sys.modules))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.splitlines() == ["['aiowheel.pytest_plugin']", "[]"]


def test_without_pytest_asyncio_the_plugin_still_loads(pytester: pytest.Pytester) -> None:
    make_project(
        pytester,
        test_anyio="""
        import asyncio
        import pytest
        from aiowheel.testing import VirtualTimeLoop

        @pytest.fixture
        def anyio_backend():
            return ("asyncio", {"loop_factory": VirtualTimeLoop})

        @pytest.mark.anyio
        async def test_sleep(virtual_clock):
            await asyncio.sleep(60)
            assert virtual_clock.time() == 60.0
        """,
    )
    result = run(pytester, "-p", "no:asyncio")
    result.assert_outcomes(passed=1)


# -- the virtual_clock fixture ------------------------------------------------------------------


def test_virtual_clock_on_pytest_asyncio_and_anyio_backends(pytester: pytest.Pytester) -> None:
    pytest.importorskip("trio")
    make_project(
        pytester,
        conftest="""
        import pytest
        from trio.testing import MockClock
        from aiowheel.testing import VirtualTimeLoop

        @pytest.fixture(params=["asyncio", "trio"])
        def anyio_backend(request):
            if request.param == "asyncio":
                return ("asyncio", {"loop_factory": VirtualTimeLoop})
            return ("trio", {"clock": MockClock(autojump_threshold=0)})
        """,
        test_clock="""
        import asyncio
        import anyio
        import pytest

        @pytest.mark.asyncio(loop_factories=["aiowheel-virtual"])
        async def test_pytest_asyncio(virtual_clock):
            assert virtual_clock.time() == 0.0
            virtual_clock.autojump = False
            fired = []
            asyncio.get_running_loop().call_later(5, fired.append, "timer")
            await virtual_clock.advance(4.5)
            assert fired == []
            await virtual_clock.advance(0.5)
            assert fired == ["timer"] and virtual_clock.time() == 5.0

        @pytest.mark.anyio
        async def test_anyio(virtual_clock):
            await anyio.sleep(7)
            assert virtual_clock.time() == 7.0
            virtual_clock.autojump = False
            woke = []

            async def sleeper():
                await anyio.sleep(2)
                woke.append(virtual_clock.time())

            async with anyio.create_task_group() as group:
                group.start_soon(sleeper)
                await virtual_clock.advance(3)
                assert woke == [9.0] and virtual_clock.time() == 10.0
        """,
    )
    result = run(pytester, "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        ["*test_anyio[[]asyncio[]] PASSED*", "*test_anyio[[]trio[]] PASSED*"]
    )


def test_virtual_clock_on_a_real_loop_fails_saying_how_to_fix_it(
    pytester: pytest.Pytester,
) -> None:
    make_project(
        pytester,
        test_real="""
        import pytest

        @pytest.mark.asyncio
        async def test_real_loop(virtual_clock):
            await virtual_clock.advance(1)
        """,
    )
    result = run(pytester)
    result.assert_outcomes(failed=1)
    assert "has a real clock: virtual time needs" in result.stdout.str()
    assert 'loop_factories=["aiowheel-virtual"]' in result.stdout.str()


def test_virtual_clock_puts_autojump_back_on_a_shared_loop(pytester: pytest.Pytester) -> None:
    make_project(
        pytester,
        test_shared="""
        import asyncio
        import pytest

        pytestmark = pytest.mark.asyncio(loop_scope="module", loop_factories=["aiowheel-virtual"])

        async def test_switches_it_off(virtual_clock):
            virtual_clock.autojump = False
            assert asyncio.get_running_loop().autojump is False

        async def test_finds_it_on_again():
            # Same loop: with autojump still off, this sleep would wait forever.
            assert asyncio.get_running_loop().autojump is True
            await asyncio.sleep(10)
        """,
    )
    result = run(pytester)
    result.assert_outcomes(passed=2)


# -- docs/testing.md -----------------------------------------------------------------------------

# A fenced block whose first line is a comment naming a file ("# test_timers.py") is that file of
# its section's example project; every ```python block in the page must be one.
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
FILE_COMMENT = re.compile(r"# ([\w/]+\.(?:py|toml|ini))\n")


def doc_projects() -> dict[str, dict[str, str]]:
    """docs/testing.md's example projects: section title -> {file name: content}."""
    projects: dict[str, dict[str, str]] = {}
    for section in re.split(r"^## ", TESTING_DOC.read_text(), flags=re.MULTILINE)[1:]:
        title = section.splitlines()[0]
        for language, body in FENCE.findall(section):
            named = FILE_COMMENT.match(body)
            if named is None:
                assert language != "python", f"a python block in '{title}' names no file"
                continue
            projects.setdefault(title, {})[named.group(1)] = body
    return projects


def test_every_docs_example_project_has_tests() -> None:
    projects = doc_projects()
    assert len(projects) >= 4
    for title, files in projects.items():
        assert any(name.startswith("test_") for name in files), title


@pytest.mark.parametrize("title", list(doc_projects()))
def test_the_docs_examples_pass_as_written(pytester: pytest.Pytester, title: str) -> None:
    files = doc_projects()[title]
    for name, content in files.items():
        path = pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    if "pyproject.toml" not in files:
        pytester.makeini(INI.format(extra=""))
    result = run(pytester, "-v")
    parsed = result.parseoutcomes()
    assert parsed.get("passed", 0) >= 1, result.stdout.str()
    assert set(parsed) <= {"passed", "warnings"}, result.stdout.str()
