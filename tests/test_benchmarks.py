"""The benchmarks run: ``benchmarks/suite.py --quick``, ``benchmarks/bench_servers.py --quick``
and ``benchmarks/bench_loop.py --quick`` print their tables and write their files.

One smoke run of each in a subprocess, as a user would start it, writing to a temporary
directory. These tests check that every scenario ran and reported, never how fast anything was:
speed belongs in the benchmark's own output.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCENARIOS = ["lifecycle", "churn", "touch", "memory", "lateness", "wakeups", "floor"]
# Upper bound on the smoke run: it takes well under a minute on an idle machine, and this one
# may be shared; the bound only stops a hung run.
RUN_TIMEOUT = 300

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """stdout of ``suite.py --quick --out DIR``, and DIR."""
    out = tmp_path_factory.mktemp("results")
    command = [sys.executable, str(BENCHMARKS / "suite.py"), "--quick", "--out", str(out)]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, out


def test_prints_a_table_per_scenario_then_headline_and_targets(
    quick_run: tuple[str, Path],
) -> None:
    stdout, _ = quick_run
    titles = [line for line in stdout.splitlines() if line.startswith("## ")]
    assert len(titles) == len(SCENARIOS) + 2
    assert titles[-2:] == ["## Headline", "## Targets (issue 5)"]
    for section in stdout.split("\n## ")[1:]:
        table = [line for line in section.splitlines() if line.startswith("| ")]
        assert len(table) >= 3, section  # header, rule, at least one row
        assert "failed:" not in section


def test_tables_show_figures_and_ratios_side_by_side(quick_run: tuple[str, Path]) -> None:
    stdout, _ = quick_run
    lifecycle = stdout.split("## 1. Lifecycle")[1].split("\n## ")[0]
    header = next(line for line in lifecycle.splitlines() if line.startswith("| N "))
    assert "CPU µs/timer" in header
    assert "vs asyncio" in header
    row = next(line for line in lifecycle.splitlines() if "| asyncio loop.call_at " in line)
    assert "1.00x" in row  # asyncio against itself


def test_writes_results_json_markdown_and_plots(quick_run: tuple[str, Path]) -> None:
    _, out = quick_run
    results = json.loads((out / "results.json").read_text())
    assert sorted(results["scenarios"]) == sorted(SCENARIOS)
    for cases in results["scenarios"].values():
        assert cases
        assert all(case["rows"] and not case["errors"] for case in cases)
    markdown = (out / "results.md").read_text()
    assert "## Headline" in markdown
    assert "## Targets (issue 5)" in markdown
    pytest.importorskip("matplotlib")
    for plot in ("lifecycle.png", "churn.png", "memory.png", "lateness.png"):
        assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({plot})" in markdown


def test_pure_and_compiled_variants_ran_on_their_own_wheel(quick_run: tuple[str, Path]) -> None:
    # Each child checks aiowheel.IMPLEMENTATION against its variant and fails if they differ,
    # which would show as a failed row; here: both kinds of row are there.
    _, out = quick_run
    results = json.loads((out / "results.json").read_text())
    variants = {variant for case in results["scenarios"]["churn"] for variant in case["rows"]}
    assert any(variant.endswith(", pure") for variant in variants)
    if any("compiled wheel: built" in line for line in (out / "results.md").open()):
        assert any(variant.endswith(", compiled") for variant in variants)


def test_unknown_scenario_is_refused() -> None:
    command = [sys.executable, str(BENCHMARKS / "suite.py"), "--scenarios", "nonesuch"]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "invalid choice: 'nonesuch'" in done.stderr


# -- benchmarks/bench_servers.py: real servers on the four loops --------------------------------

SERVER_VARIANTS = ["asyncio", "asyncio+wheel", "uvloop", "uvloop+wheel"]
SERVER_SCENARIOS = ["uvicorn", "websockets"]


@pytest.fixture(scope="module")
def servers_quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """stdout of ``bench_servers.py --quick --out DIR``, and DIR."""
    out = tmp_path_factory.mktemp("servers")
    command = [sys.executable, str(BENCHMARKS / "bench_servers.py"), "--quick", "--out", str(out)]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, out


def test_servers_every_variant_served_every_connection(servers_quick_run: tuple[str, Path]) -> None:
    """Each scenario ran on every variant (uvloop's two when it is installed), every connection
    of the fleet was opened and served, and the wheel variants' servers ran on the wheel loop
    with their timers on the wheel; the plain ones did not."""
    _, out = servers_quick_run
    results = json.loads((out / "servers.json").read_text())
    try:
        import uvloop  # noqa: F401 - only whether it imports
    except ImportError:
        variants = SERVER_VARIANTS[:2]
    else:
        variants = SERVER_VARIANTS
    assert sorted(results["scenarios"]) == sorted(SERVER_SCENARIOS)
    for scenario, rows in results["scenarios"].items():
        assert list(rows) == variants
        for variant, row in rows.items():
            where = (scenario, variant)
            assert row["connections"] == results["connections"], where
            assert row["connect_errors"] == 0, where
            stats = row["stats"]
            if variant.endswith("+wheel"):
                assert stats["loop"] in {"WheelEventLoop", "WheelUVLoop"}, where
                assert stats["wheel_timers"] > 0, where
                assert stats["cancelled"] > 0, where  # keep-alive or pong timeouts
            else:
                assert stats["wheel_timers"] is None, where
        if scenario == "uvicorn":
            assert all(row["requests_per_s"] > 0 for row in rows.values())
            assert all(row["request_errors"] == 0 for row in rows.values())
        else:
            assert all(row["alive"] == row["connections"] for row in rows.values())
            assert all(row["pings_per_s"] > 0 for row in rows.values())


def test_servers_tables_side_by_side_and_files(servers_quick_run: tuple[str, Path]) -> None:
    stdout, out = servers_quick_run
    tables = [section for section in stdout.split("\n## ")[1:] if "| variant " in section]
    assert len(tables) == 2
    for table in tables:
        rows = [line for line in table.splitlines() if line.startswith("| ")]
        assert "vs no wheel" in rows[0]
        plain = [row for row in rows if row.startswith(("| asyncio ", "| uvloop "))]
        assert plain and all("1.00x" in row for row in plain)  # each against itself
    markdown = (out / "servers.md").read_text()
    assert markdown.count("| asyncio+wheel ") == 2
    pytest.importorskip("matplotlib")
    assert "](servers.png)" in markdown
    assert (out / "servers.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_servers_bad_arguments_are_refused() -> None:
    script = str(BENCHMARKS / "bench_servers.py")
    for arguments, message in (
        (["--scenarios", "nonesuch"], "invalid choice: 'nonesuch'"),
        (["--connections", "0"], "--connections, --rounds and --clients must be at least 1"),
    ):
        done = subprocess.run(
            [sys.executable, script, *arguments],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, arguments
        assert message in done.stderr, done.stderr


@pytest.mark.parametrize("workload", ["app", "timers", "split"])
def test_loop_benchmark_runs_every_variant(workload: str) -> None:
    command = [sys.executable, str(BENCHMARKS / "bench_loop.py"), "--quick"]
    command += ["--workload", workload]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    for variant in ("asyncio", "asyncio+wheel", "uvloop", "uvloop+wheel"):
        assert any(line.startswith(f"{variant} ") for line in lines), done.stdout
    assert "asyncio+wheel / asyncio: CPU " in done.stdout  # the ratios, side by side
    if workload == "split":
        assert "asyncio+wheel / asyncio: churn " in done.stdout
        assert "uvloop+wheel / uvloop: churn " in done.stdout
        assert "CPU per timer, µs" in done.stdout
