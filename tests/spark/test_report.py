"""report and the command line: the files a person opens, and the commands that make them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from aiowheel.spark import EVENT_SCHEMA, report
from aiowheel.spark.cli import main

pytestmark = pytest.mark.spark


def test_report_writes_tables_plots_and_page(spark: SparkSession, tmp_path: Path) -> None:
    rows = [
        ("a", 0.0, "open", None),
        ("b", 1.0, "open", None),
        ("a", 12.0, "data", None),
        ("c", 20.0, "data", None),
    ]
    events = spark.createDataFrame(rows, EVENT_SCHEMA)
    files = report(spark, events, str(tmp_path / "r"), timeouts=[5.0, 10.0], tick=1.0)
    for name in ("series.parquet", "series.csv", "summary.parquet", "summary.csv"):
        assert (tmp_path / "r" / name).stat().st_size > 0
    for plot in (files.pending_plot, files.expirations_plot):
        assert Path(plot).read_bytes().startswith(b"\x89PNG")
    page = Path(files.index).read_text()
    assert "What if" in page
    assert 'src="pending.png"' in page
    assert list(files.summary["timeout"]) == [5.0, 10.0]
    assert list(files.summary["expirations"]) == [3, 2]


def test_cli_generate_then_replay_then_report_with_defaults(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["generate", "--connections", "300", "--duration", "120"]) == 0
    assert (tmp_path / "aiowheel-data" / "events.parquet").is_dir()
    assert main(["replay"]) == 0
    expiries = spark.read.parquet(str(tmp_path / "aiowheel-data" / "expiries.parquet"))
    assert expiries.count() > 0
    assert main(["report", "--timeouts", "20,30", "--bucket", "5"]) == 0
    assert (tmp_path / "aiowheel-data" / "report" / "index.html").is_file()


def test_cli_replay_without_a_log_says_what_to_run(
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["replay"]) == 2
    assert "aiowheel spark generate" in capsys.readouterr().err
