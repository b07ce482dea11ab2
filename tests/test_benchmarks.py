"""The benchmarks run: ``benchmarks/suite.py --quick``, ``benchmarks/bench_servers.py --quick``
and ``benchmarks/bench_loop.py --quick`` print their tables and write their files.

One smoke run of each in a subprocess, as a user would start it, writing to a temporary
directory. These tests check that every scenario ran and reported, never how fast anything was:
speed belongs in the benchmark's own output.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCENARIOS = ["lifecycle", "churn", "touch", "memory", "lateness", "wakeups", "floor", "keepalive"]
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
    assert titles[-2:] == ["## Headline", "## Targets (issues 5 and 30)"]
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
    assert "## Targets (issues 5 and 30)" in markdown
    pytest.importorskip("matplotlib")
    for plot in ("lifecycle.png", "churn.png", "memory.png", "lateness.png", "keepalive.png"):
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


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _expected_variants(names: list[str], compiled: bool) -> list[str]:
    """``names`` without the variants this machine cannot run (uvloop, the compiled core)."""
    return [
        name
        for name in names
        if (_installed("uvloop") or "uvloop" not in name)
        and (compiled or not name.endswith(", compiled"))
    ]


KEEPALIVE_VARIANTS = [
    "asyncio loop.call_later",
    "uvloop loop.call_later",
    "asyncio+wheel loop.call_later, pure",
    "asyncio+wheel loop.call_later, compiled",
    "uvloop+wheel loop.call_later, pure",
    "uvloop+wheel loop.call_later, compiled",
    "Timer.call_later + IdleTimeouts.touch, pure",
    "Timer.call_later + IdleTimeouts.touch, compiled",
]


def test_keepalive_every_variant_reports_memory_and_cpu_per_connection(
    quick_run: tuple[str, Path],
) -> None:
    """Idle connections at scale: every loop, the wheel loop on both bases and both cores, and
    the native API, each with a peak RSS, a heap and a CPU figure (their values are the
    benchmark's business; a connection's two timers take some heap on every variant)."""
    stdout, out = quick_run
    results = json.loads((out / "results.json").read_text())
    compiled = results["environment"]["compiled"] == "built"
    (case,) = results["scenarios"]["keepalive"]
    assert case["n"] == 2_000
    assert list(case["rows"]) == _expected_variants(KEEPALIVE_VARIANTS, compiled)
    for variant, row in case["rows"].items():
        assert sorted(row) == ["cpu", "heap", "rss_peak"], variant
        assert row["heap"] > 0, variant
        assert row["cpu"] > 0, variant
    table = stdout.split("## 8. Idle connections at scale")[1].split("\n## ")[0]
    header = next(line for line in table.splitlines() if line.startswith("| N "))
    for column in ("peak RSS B/conn", "heap B/conn", "CPU µs/cycle", "vs asyncio", "vs uvloop"):
        assert column in header


def test_memory_has_the_wheel_loop_on_both_bases(quick_run: tuple[str, Path]) -> None:
    stdout, out = quick_run
    results = json.loads((out / "results.json").read_text())
    compiled = results["environment"]["compiled"] == "built"
    (case,) = results["scenarios"]["memory"]
    loop_variants = [
        f"{base}+wheel LoopTimerHandle, {core}"
        for base in ("asyncio", "uvloop")
        for core in ("pure", "compiled")
    ]
    for variant in _expected_variants(loop_variants, compiled):
        assert case["rows"][variant]["heap_pending"] > 0, variant
    targets = stdout.split("## Targets (issues 5 and 30)")[1]
    assert "issue 30: memory per pending asyncio+wheel timer" in targets


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_callgrind_counts_instructions_per_keepalive_cycle(tmp_path: Path) -> None:
    """``--callgrind`` at the quick size, on one variant (two runs under callgrind take a
    minute): a table of instructions per cycle, and callgrind.json with the figure."""
    variant = "asyncio+wheel loop.call_later, pure"
    command = [sys.executable, str(BENCHMARKS / "suite.py"), "--callgrind", "--quick"]
    command += ["--scenarios", "keepalive", "--variants", variant, "--out", str(tmp_path)]
    # Under callgrind the interpreter's start-up alone takes tens of seconds on a loaded machine.
    timeout = 2 * RUN_TIMEOUT
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    header = next(line for line in done.stdout.splitlines() if line.startswith("| N "))
    assert "instructions/cycle" in header
    assert f"| {variant} " in done.stdout
    assert "callgrind runs of 500 and 1,000 operations" in done.stdout
    results = json.loads((tmp_path / "callgrind.json").read_text())
    (case,) = results["scenarios"]["keepalive"]
    assert list(case["rows"]) == [variant]
    assert case["rows"][variant]["instructions"] > 0


def test_rounds_show_the_lowest_and_highest_round(tmp_path: Path) -> None:
    """With ``--rounds 2`` each row shows its main figure's spread over the rounds, and
    results.json keeps it: a median alone hides how much the rounds moved."""
    command = [sys.executable, str(BENCHMARKS / "suite.py"), "--quick", "--rounds", "2"]
    command += ["--scenarios", "memory", "--variants", "IdleTimeouts", "--out", str(tmp_path)]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    header = next(line for line in done.stdout.splitlines() if line.startswith("| N "))
    assert header.rstrip(" |").endswith("heap B/timer: lowest-highest round")
    (case,) = json.loads((tmp_path / "results.json").read_text())["scenarios"]["memory"]
    assert sorted(case["spread"]) == sorted(case["rows"])
    for variant, figures in case["rows"].items():
        low, high = case["spread"][variant]["heap_pending"]
        assert low <= figures["heap_pending"] <= high
        row = next(line for line in done.stdout.splitlines() if f"| {variant} " in line)
        assert row.rstrip(" |").rsplit("|", 1)[1].strip().count("-") == 1


def test_callgrind_refuses_scenarios_it_cannot_count() -> None:
    command = [sys.executable, str(BENCHMARKS / "suite.py"), "--callgrind", "--scenarios", "memory"]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--callgrind counts the instructions of churn, touch, keepalive only" in done.stderr


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
