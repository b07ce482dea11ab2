"""stream's arguments: a bad value is refused before any query starts, naming the value.

What the stream emits is tested in test_agreement.py (against replay and IdleTimeouts, across
restarts) and its per-key logic in test_keystate.py. The command line's stream options are
checked here too.
"""

from __future__ import annotations

import argparse
import io
import re
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from rich.console import Console

from aiowheel.spark import EVENT_SCHEMA, cli, expiry_stream, stream
from aiowheel.spark.stream import OPERATORS, Api, check_operator

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        ({"delay": -1.0}, ValueError, "delay must be finite and >= 0, got -1.0"),
        ({"delay": float("nan")}, ValueError, "delay must be finite and >= 0, got nan"),
        ({"delay": "10"}, TypeError, "delay must be a real number, got '10'"),
        ({"shards": 0}, ValueError, "shards must be >= 1, got 0"),
        ({"shards": 2.5}, TypeError, "shards must be an int or None, got 2.5"),
        ({"shards": True}, TypeError, "shards must be an int or None, got True"),
        ({"api": "arrow"}, ValueError, "api must be 'row' or 'pandas', got 'arrow'"),
        ({"tick": 0}, ValueError, "tick must be finite and > 0, got 0"),
        ({"timeouts": [30.0, -1]}, ValueError, "each timeout must be finite and > 0, got -1"),
    ],
)
def test_bad_arguments_are_refused_with_the_value_named(
    spark: SparkSession, given: dict[str, Any], error: type[Exception], message: str
) -> None:
    events = spark.createDataFrame([], EVENT_SCHEMA)
    arguments: dict[str, Any] = {"timeouts": [30.0], "tick": 0.001, **given}
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        expiry_stream(events, **arguments)


@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        (0, ValueError, "max_files_per_trigger must be >= 1, got 0"),
        (1.5, TypeError, "max_files_per_trigger must be an int or None, got 1.5"),
        (True, TypeError, "max_files_per_trigger must be an int or None, got True"),
    ],
)
def test_stream_refuses_a_bad_file_cap_before_it_starts(
    spark: SparkSession, tmp_path: Path, given: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        stream(
            spark,
            str(tmp_path / "source"),
            output=str(tmp_path / "out"),
            checkpoint=str(tmp_path / "checkpoint"),
            timeouts=[30.0],
            tick=0.001,
            max_files_per_trigger=given,  # type: ignore[arg-type]
        )
    assert not spark.streams.active


@pytest.mark.parametrize(("first", "then"), [("row", "pandas"), ("pandas", "row")])
def test_a_checkpoint_is_refused_with_the_other_operator(
    spark: SparkSession, tmp_path: Path, first: Api, then: Api
) -> None:
    """Both operators keep the same state, but Spark fails a restart with the other one in
    its first micro-batch, naming its physical operators: stream() refuses it before any
    query starts, naming both of ours."""
    source, checkpoint = tmp_path / "in", str(tmp_path / "ckpt")
    events = [("k", 1.0, "open", None), ("k", 100.0, "data", None)]
    spark.createDataFrame(events, EVENT_SCHEMA).write.parquet(str(source / "slice-0"))
    arguments: dict[str, Any] = {
        "output": str(tmp_path / "out"),
        "checkpoint": checkpoint,
        "timeouts": [30.0],
        "tick": 0.001,
    }
    stream(spark, str(source), api=first, **arguments).awaitTermination()
    message = (
        f"this checkpoint's state was written by api='{first}' ({OPERATORS[first][0]}), not "
        f"api='{then}' ({OPERATORS[then][0]}): restart with api='{first}', or start a new "
        "checkpoint"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        stream(spark, str(source), api=then, **arguments)
    check_operator(spark, checkpoint, first)


def test_a_restart_keeps_its_checkpoints_shards_when_the_partitions_change(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Spark keeps the shuffle partitions a checkpoint was started with; so do the default
    shards (8 per partition), whatever ``spark.sql.shuffle.partitions`` says at a restart."""
    source = tmp_path / "in"
    arguments: dict[str, Any] = {
        "output": str(tmp_path / "out"),
        "checkpoint": str(tmp_path / "ckpt"),
        "timeouts": [30.0],
        "tick": 0.001,
    }
    first = [("k", 1.0, "open", None), ("k", 100.0, "data", None)]
    spark.createDataFrame(first, EVENT_SCHEMA).write.parquet(str(source / "slice-0"))
    stream(spark, str(source), **arguments).awaitTermination()
    spark.createDataFrame([("k", 200.0, "data", None)], EVENT_SCHEMA).write.parquet(
        str(source / "slice-1")
    )
    partitions = spark.conf.get("spark.sql.shuffle.partitions") or "200"
    spark.conf.set("spark.sql.shuffle.partitions", str(int(partitions) + 1))
    try:
        stream(spark, str(source), **arguments).awaitTermination()
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
    emitted = spark.read.parquet(arguments["output"]).collect()
    assert sorted(tuple(row) for row in emitted) == [
        ("k", 30.0, 31.0, 1.0),
        ("k", 30.0, 130.0, 100.0),
    ]


def _stream_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aiowheel spark")
    cli.add_arguments(parser)
    return parser


def test_cli_stream_takes_shards_api_and_max_files() -> None:
    argv = ["stream", "--shards", "64", "--api", "row", "--max-files-per-trigger", "3"]
    args = _stream_parser().parse_args(argv)
    assert (args.shards, args.api, args.max_files_per_trigger) == (64, "row", 3)
    # Without them: the stream's own defaults (8 shards per partition, the pandas operator,
    # every file that has landed in the next micro-batch).
    args = _stream_parser().parse_args(["stream"])
    assert (args.shards, args.api, args.max_files_per_trigger) == (None, "pandas", None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shards", "0"], "shards must be >= 1, got 0"),
        (["--shards", "-3"], "shards must be >= 1, got -3"),
        (["--shards", "2.5"], "shards must be a whole number >= 1, got '2.5'"),
        (["--api", "arrow"], "invalid choice: 'arrow'"),
        (["--max-files-per-trigger", "0"], "max_files_per_trigger must be >= 1, got 0"),
        (
            ["--max-files-per-trigger", "x"],
            "max_files_per_trigger must be a whole number >= 1, got 'x'",
        ),
    ],
)
def test_cli_stream_refuses_bad_counts_and_api(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        _stream_parser().parse_args(["stream", *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_stream_hands_its_options_to_the_job(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: dict[str, Any] = {}

    class Stopped:
        """A query that has already ended cleanly."""

        isActive = False
        lastProgress = None

        def exception(self) -> None:
            return None

    def fake_stream(spark: SparkSession, source: str, **kwargs: Any) -> Stopped:
        started.update(kwargs, source=source)
        return Stopped()

    monkeypatch.setattr(cli, "stream", fake_stream)
    args = _stream_parser().parse_args(
        [
            "stream",
            "--source",
            str(tmp_path / "in"),
            "--out",
            str(tmp_path / "out"),
            "--shards",
            "12",
            "--api",
            "row",
            "--max-files-per-trigger",
            "2",
        ]
    )
    assert cli._stream(spark, args, Console(file=io.StringIO())) == 0
    assert (started["shards"], started["api"], started["max_files_per_trigger"]) == (12, "row", 2)
    assert started["source"] == str(tmp_path / "in")
