"""The benchmark suite runs: ``benchmarks/suite.py --quick`` prints its tables and writes its files.

One smoke run in a subprocess, as a user would start it, writing to a temporary directory. These
tests check that every scenario ran and reported, never how fast anything was: speed belongs in
the benchmark's own output.
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
    # Each child checks aiowheel._impl.COMPILED against its variant and fails if they differ,
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
