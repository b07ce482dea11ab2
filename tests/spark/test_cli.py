"""``aiowheel spark``: bad values are usage errors before Spark starts, Spark's errors about the
input are one line, and a stream with nothing to read ends with a summary.

A value the parser can check is refused with exit 2 and the message the Python API gives for
it (the CLI runs the API's own check), without starting Spark. A path that is not there is
refused before Spark starts too (exit 2); an input Spark cannot read ends in one line naming
it and exit 1, with the stack trace only under ``--verbose``.
"""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession
from rich.console import Console
from stream_runs import WORKER_FAILED_TO_START, WORKER_START_RETRIES

from aiowheel._checks import check_count, check_length
from aiowheel.spark import EVENT_SCHEMA, cli
from aiowheel.spark.generate import _check_jitter, _check_positive, _check_share, _check_whole
from aiowheel.spark.metrics import _check_bucket
from aiowheel.spark.replay import _check_horizon, _check_tick, _check_timeouts

pytestmark = pytest.mark.spark


class SparkStarted(Exception):
    """Raised by the stand-in for spark_session: the command got as far as starting Spark."""


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    def start(*args: Any, **kwargs: Any) -> SparkSession:
        raise SparkStarted

    monkeypatch.setattr(cli, "spark_session", start)


def _api_message(check: Callable[[], object]) -> str:
    with pytest.raises((TypeError, ValueError)) as refused:
        check()
    return str(refused.value)


@pytest.mark.parametrize(
    ("argv", "check"),
    [
        (["replay", "--timeouts", "0"], lambda: _check_timeouts([0.0])),
        (["replay", "--timeouts", "nan"], lambda: _check_timeouts([math.nan])),
        (["replay", "--timeouts", "30,inf"], lambda: _check_timeouts([30.0, math.inf])),
        (["report", "--timeouts", "-5"], lambda: _check_timeouts([-5.0])),
        (["stream", "--timeouts", "0"], lambda: _check_timeouts([0.0])),
        (["replay", "--tick", "-1"], lambda: _check_tick(-1.0)),
        (["stream", "--tick", "0"], lambda: _check_tick(0.0)),
        (["generate", "--tick", "nan"], lambda: _check_tick(math.nan)),
        (["replay", "--horizon", "nan"], lambda: _check_horizon(math.nan)),
        (["report", "--horizon", "inf"], lambda: _check_horizon(math.inf)),
        (["report", "--bucket", "0"], lambda: _check_bucket(0.0)),
        (["stream", "--delay", "-1"], lambda: check_length(-1.0, "delay", zero_ok=True)),
        (["stream", "--files", "0"], lambda: check_count(0, "files", 1)),
        (["stream", "--shards", "0"], lambda: check_count(0, "shards", 1)),
        (["generate", "--connections", "0"], lambda: _check_whole(0, "connections")),
        (["generate", "--duration", "0"], lambda: _check_positive(0.0, "duration")),
        (["generate", "--keepalive", "inf"], lambda: _check_positive(math.inf, "keepalive")),
        (["generate", "--timeout", "-1"], lambda: _check_positive(-1.0, "timeout")),
        (["generate", "--jitter", "0.5"], lambda: _check_jitter(0.5)),
        (["generate", "--close-share", "2"], lambda: _check_share(2.0, "close_share")),
    ],
)
@pytest.mark.usefixtures("no_spark")
def test_impossible_values_are_usage_errors_with_the_api_message(
    argv: list[str], check: Callable[[], object], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert f"argument {argv[1]}: {_api_message(check)}" in error


@pytest.mark.usefixtures("no_spark")
def test_text_that_is_no_number_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["replay", "--tick", "fast"])
    assert exited.value.code == 2
    assert "argument --tick: tick must be a number, got 'fast'" in capsys.readouterr().err


@pytest.mark.usefixtures("no_spark")
def test_a_master_spark_cannot_take_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--master", "bogus://x", "generate"])
    assert exited.value.code == 2
    usage, error = capsys.readouterr().err.strip().splitlines()
    assert usage.startswith("usage: aiowheel spark")
    assert error == (
        "aiowheel spark: error: argument --master: master must be local, local[N], local[*], "
        "spark://HOST:PORT, yarn or k8s://URL, got 'bogus://x'"
    )


@pytest.mark.parametrize("verbose", [False, True])
def test_spark_failing_to_start_is_one_line(verbose: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A master of an accepted form that Spark still refuses (or any failure to start)."""

    def refuse(*args: Any, **kwargs: Any) -> SparkSession:
        raise PySparkRuntimeError("Could not parse Master URL: 'local[x]'\n\tat org.apache...")

    monkeypatch.setattr(cli, "spark_session", refuse)
    console, shown = _console()
    argv = [*(["--verbose"] if verbose else []), "--master", "local[x]", "generate"]
    assert cli.run(_parse(argv), console) == 1
    line = "error: Spark did not start on local[x]: Could not parse Master URL: 'local[x]'"
    if verbose:
        assert "Traceback" in shown() and line in shown().splitlines()
    else:
        assert shown().strip() == line


@pytest.mark.parametrize(
    ("argv", "partitions"),
    [
        (["--master", "local[3]", "stream"], 3),
        (["--master", "local[*]", "stream"], os.cpu_count() or 1),
        (["stream"], None),
        (["--master", "spark://127.0.0.1:7077", "stream"], None),
        (["--master", "local[3]", "generate"], None),
    ],
)
def test_the_stream_command_runs_a_shuffle_partition_per_local_core(
    argv: list[str], partitions: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``stream`` asks for one shuffle partition per core of a local master (the benchmark's
    figures, docs/spark.md); the other commands, and other masters, keep spark_session's own
    default (None here: two per local core)."""
    asked: dict[str, Any] = {}

    def record(master: str | None, **kwargs: Any) -> SparkSession:
        asked.update(kwargs)
        raise PySparkRuntimeError("not started: the test only looks at what was asked")

    monkeypatch.setattr(cli, "spark_session", record)
    console, _shown = _console()
    assert cli.run(_parse(argv), console) == 1
    assert asked["shuffle_partitions"] == partitions


@pytest.mark.slow
def test_spark_failing_to_start_prints_no_java_stack(tmp_path: Path) -> None:
    """The real thing, in a process of its own: no Java stack trace, no Python traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "aiowheel.spark", "--master", "local[x]", "generate"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(cli.__file__).parents[2])},
        timeout=600,
        check=False,
    )
    assert done.returncode == 1
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert lines[-1] == (
        "error: Spark did not start on local[x]: Could not parse Master URL: 'local[x]'"
    )
    assert not [line for line in lines if line.startswith(("\tat ", "Traceback"))]
    # What may come before: the JVM's own note on its incubator modules, nothing of Spark's.
    assert len(lines) <= 2


@pytest.mark.parametrize("command", ["generate", "replay", "report", "stream"])
def test_every_option_says_what_it_is_and_shows_its_default(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option: nothing wrapped
    parser = cli.argparse.ArgumentParser(prog="aiowheel spark")
    cli.add_arguments(parser)
    (commands,) = [a for a in parser._actions if isinstance(a, cli.argparse._SubParsersAction)]
    sub = commands.choices[command]
    with pytest.raises(SystemExit):
        sub.parse_args(["--help"])
    shown = capsys.readouterr().out
    for action in sub._actions:
        if action.dest == "help":
            continue
        assert action.help, f"{command} {action.option_strings[0]} has no help text"
        assert action.help in shown
        if action.default not in (None, False):
            default = f"(default: {action.default})"
            assert default in shown or "default" in action.help, (
                f"{command} {action.option_strings[0]} shows no default"
            )


@pytest.mark.parametrize("command", ["replay", "report"])
@pytest.mark.usefixtures("no_spark")
def test_a_missing_event_log_is_refused_before_spark_starts(command: str, tmp_path: Path) -> None:
    console, shown = _console()
    missing = tmp_path / "nothing.parquet"
    assert cli.run(_parse([command, "--events", str(missing)]), console) == 2
    assert shown().strip() == (
        f"no event log at {missing}: run aiowheel spark generate first, or pass --events PATH"
    )


@pytest.mark.usefixtures("no_spark")
def test_a_missing_feed_is_refused_before_spark_starts(tmp_path: Path) -> None:
    console, shown = _console()
    missing = tmp_path / "events.parquet"
    args = _parse(["stream", "--source", str(tmp_path / "in"), "--feed", str(missing)])
    assert cli.run(args, console) == 2
    assert shown().strip() == (
        f"no event log at {missing}: pass --feed an event log (e.g. the generated one)"
    )
    assert not (tmp_path / "in").exists()


def _parse(argv: list[str]) -> Any:
    parser = cli.argparse.ArgumentParser(prog="aiowheel spark")
    cli.add_arguments(parser)
    return parser.parse_args(argv)


def _console() -> tuple[Console, Callable[[], str]]:
    out = io.StringIO()
    return Console(file=out, width=400, color_system=None), out.getvalue


@pytest.fixture
def session(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> SparkSession:
    """The commands run on the tests' session (its settings untouched)."""
    monkeypatch.setattr(cli, "spark_session", lambda *args, **kwargs: spark)
    return spark


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["replay", "--events", "{empty}"], "{empty}"),
        (["report", "--events", "{empty}"], "{empty}"),
        (["stream", "--source", "{tmp}/in", "--feed", "{empty}"], "{empty}"),
    ],
)
@pytest.mark.parametrize("verbose", [False, True])
def test_input_spark_cannot_read_ends_in_one_line_naming_it(
    session: SparkSession, tmp_path: Path, argv: list[str], named: str, verbose: bool
) -> None:
    """An empty folder as the event log: Spark cannot infer its schema."""
    empty = tmp_path / "empty"
    empty.mkdir()
    values = {"empty": str(empty), "tmp": str(tmp_path)}
    argv = [part.format(**values) for part in argv]
    out = ["--out", str(tmp_path / "out")]
    console, shown = _console()
    assert cli.run(_parse([*(["--verbose"] if verbose else []), *argv, *out]), console) == 1
    lines = shown().strip().splitlines()
    error = next(line for line in lines if line.startswith("error: "))
    assert error.startswith(f"error: {named.format(**values)}: ")
    assert "UNABLE_TO_INFER_SCHEMA" in error
    if verbose:
        assert "Traceback" in shown()
    else:
        assert lines == [error, "(--verbose shows the stack traces)"]


def test_a_stream_with_no_event_ends_with_a_summary(session: SparkSession, tmp_path: Path) -> None:
    """The source folder the command creates has no file yet: no micro-batch runs."""
    source, out = tmp_path / "in", tmp_path / "out"
    args = _parse(
        [
            "stream",
            "--source",
            str(source),
            "--out",
            str(out),
            "--checkpoint",
            str(tmp_path / "checkpoint"),
        ]
    )
    console, shown = _console()
    assert cli.run(args, console) == 0
    assert shown().strip().splitlines()[-1] == (
        f"✓ stream stopped: no new events under {source}; no expiry in {out}"
    )


def test_a_stream_failing_on_its_input_ends_in_one_line_naming_the_source(
    session: SparkSession, tmp_path: Path
) -> None:
    """An event of an unknown kind fails the query in its micro-batch."""
    source, out = tmp_path / "in", tmp_path / "out"
    session.createDataFrame([("k", 1.0, "poke", None)], EVENT_SCHEMA).write.parquet(
        str(source / "slice-000000")
    )
    args = _parse(
        [
            "stream",
            "--source",
            str(source),
            "--out",
            str(out),
            "--checkpoint",
            str(tmp_path / "checkpoint"),
        ]
    )
    for _attempt in range(WORKER_START_RETRIES + 1):
        console, shown = _console()
        assert cli.run(args, console) == 1
        if WORKER_FAILED_TO_START not in shown():  # else: see stream_runs.run_to_end
            break
    error, hint = shown().strip().splitlines()
    assert error.startswith(f"error: {source}: ")
    assert "event log: kind must be one of open, data, close, got poke for key k" in error
    assert hint == "(--verbose shows the stack traces)"
