"""stream's arguments: a bad value is refused before any query starts, naming the value.

What the stream emits is tested in test_agreement.py (against replay and IdleTimeouts, across
restarts) and its per-key logic in test_shard.py and test_keystate.py. The command line's
stream options are checked here too.
"""

from __future__ import annotations

import argparse
import gc
import io
import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from rich.console import Console
from stream_runs import run_to_end

from aiowheel import _impl
from aiowheel.spark import (
    EVENT_SCHEMA,
    cli,
    collect_expiries,
    expiry_stream,
    read_events,
    replay,
    stream,
    watermark,
    write_events,
)
from aiowheel.spark.events import EventFormat
from aiowheel.spark.stream import _OPERATORS, EVENT_TIME_SHIFT, Api, check_checkpoint

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
    run_to_end(lambda: stream(spark, str(source), api=first, **arguments))
    message = (
        f"this checkpoint's state was written by api='{first}' ({_OPERATORS[first][0]}), not "
        f"api='{then}' ({_OPERATORS[then][0]}): restart with api='{first}', or start a new "
        "checkpoint"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        stream(spark, str(source), api=then, **arguments)
    check_checkpoint(spark, checkpoint, first)


@pytest.mark.parametrize(
    ("fixture", "layout"),
    [
        ("former-layout-checkpoint", "one pickled value per shard, state 'shard'"),
        (
            "unshifted-layout-checkpoint",
            "pages, with Spark's event time not shifted, state 'index'",
        ),
    ],
)
def test_a_checkpoint_of_a_former_layout_is_refused_saying_what_to_do(
    spark: SparkSession, tmp_path: Path, fixture: str, layout: str
) -> None:
    """Each data/*-layout-checkpoint is the metadata of a checkpoint the stream wrote in a
    former layout (paths made neutral): before its keys moved into pages (one pickled value per
    shard, state "shard"), and while Spark's event time was ts itself (state "index": its
    timers and watermark would read EVENT_TIME_SHIFT seconds early). Its state is neither read
    nor silently replaced: the stream refuses it before any query starts, saying what to do."""
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(Path(__file__).parent / "data" / fixture, checkpoint)
    message = (
        f"this checkpoint's state is in a former layout ({layout}), which this aiowheel does "
        "not read: finish it with the aiowheel that started it, or start a new checkpoint"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        stream(
            spark,
            str(tmp_path / "in"),
            output=str(tmp_path / "out"),
            checkpoint=str(checkpoint),
            timeouts=[30.0],
            tick=0.001,
        )
    assert not spark.streams.active
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_checkpoint(spark, str(checkpoint), "pandas")


@pytest.mark.parametrize(
    ("api", "pure"), [("pandas", False), ("row", False), ("pandas", True)], ids=str
)
def test_events_at_or_before_the_epoch_count_as_replay_counts_them(
    spark: SparkSession, tmp_path: Path, api: Api, pure: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark starts a query's watermark at the epoch and drops each event at or before it: a
    log that starts at ts 0 (generate's does) lost its first events in the first micro-batch.
    Spark's event time is ts moved EVENT_TIME_SHIFT later, so they count, and so does an
    event long before the epoch; the watermark reads in ts seconds. ``pure``: with the driver
    on pure Python, so that the workers run the pure rule (the others run the compiled one
    where it is built)."""
    if pure:
        monkeypatch.setattr(_impl, "SELECTED", _impl.PURE)
    events = spark.createDataFrame(
        [
            ("at-zero", 0.0, "open", "z:0"),
            ("just-after", 0.001, "open", None),
            ("before", -5.0, "open", None),
            ("long-before", -1.0e9, "open", None),
            ("marker", 100.0, "open", None),
        ],
        EVENT_SCHEMA,
    )
    write_events(events, str(tmp_path / "in" / "0"))
    query, _progress = run_to_end(
        lambda: stream(
            spark,
            str(tmp_path / "in"),
            output=str(tmp_path / "out"),
            checkpoint=str(tmp_path / "ckpt"),
            timeouts=[30.0],
            tick=0.001,
            api=api,
        )
    )
    reached = watermark(query)
    assert reached == 90.0
    got = collect_expiries(spark.read.parquet(str(tmp_path / "out")))
    assert got == collect_expiries(
        replay(spark, events, timeouts=[30.0], tick=0.001, horizon=reached)
    )
    assert {expiry.key for expiry in got} == {"at-zero", "just-after", "before", "long-before"}


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
    run_to_end(lambda: stream(spark, str(source), **arguments))
    spark.createDataFrame([("k", 200.0, "data", None)], EVENT_SCHEMA).write.parquet(
        str(source / "slice-1")
    )
    partitions = spark.conf.get("spark.sql.shuffle.partitions") or "200"
    spark.conf.set("spark.sql.shuffle.partitions", str(int(partitions) + 1))
    try:
        run_to_end(lambda: stream(spark, str(source), **arguments))
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
    emitted = spark.read.parquet(arguments["output"]).collect()
    assert sorted(tuple(row) for row in emitted) == [
        ("k", 30.0, 31.0, 1.0),
        ("k", 30.0, 130.0, 100.0),
    ]


# A log whose ts is written three ways: seconds, a TIMESTAMP, and (JSON, CSV) a date string.
_STAMPED = [
    ("a", datetime(2024, 1, 1, 0, 0, 0, tzinfo=UTC), "open", None),
    ("a", datetime(2024, 1, 1, 0, 0, 20, tzinfo=UTC), "data", "x"),
    ("b", datetime(2024, 1, 1, 0, 0, 5, tzinfo=UTC), "open", None),
    ("b", datetime(2024, 1, 1, 0, 0, 10, tzinfo=UTC), "close", None),
    ("c", datetime(2024, 1, 1, 0, 2, 0, tzinfo=UTC), "open", None),
]


@pytest.mark.parametrize(
    ("format", "ts"),
    [("parquet", "timestamp"), ("parquet", "double"), ("json", "string"), ("csv", "string")],
)
def test_the_stream_reads_every_format_replay_reads_alike(
    spark: SparkSession, tmp_path: Path, format: EventFormat, ts: str
) -> None:
    """A Parquet ts stored as a TIMESTAMP (and JSON or CSV dates) stream as replay and
    read_events read them: the same expiries."""
    schema = "key string, ts timestamp, kind string, event_id string"
    frame = spark.createDataFrame(_STAMPED, schema)
    if ts != "timestamp":
        frame = frame.withColumn("ts", F.col("ts").cast(ts))
    source = tmp_path / "in"
    write_events(frame.coalesce(1), str(source / "slice-0"), format=format)
    expected = collect_expiries(
        replay(
            spark,
            read_events(spark, str(source / "slice-0"), format=format),
            timeouts=[30.0],
            tick=1.0,
        )
    )
    assert len(expected) == 1  # a, 30 s after its data at 00:00:20 (c is still pending)
    query, _progress = run_to_end(
        lambda: stream(
            spark,
            str(source),
            output=str(tmp_path / "out"),
            checkpoint=str(tmp_path / "ckpt"),
            timeouts=[30.0],
            tick=1.0,
            delay=0.0,
            format=format,
        )
    )
    assert watermark(query) == datetime(2024, 1, 1, 0, 2, 0, tzinfo=UTC).timestamp()
    assert collect_expiries(spark.read.parquet(str(tmp_path / "out"))) == expected


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


class _Recorded:
    """A state variable or handle of a processor under test, outside Spark: it keeps what it
    is given in memory and notes, at every call, whether Python's cyclic collector was on."""

    def __init__(self, calls: list[tuple[str, bool]]) -> None:
        self.calls = calls
        self.value: Any = None
        self.entries: dict[tuple[int], tuple[bytes]] = {}
        self.timers: set[int] = set()

    def _note(self, name: str) -> None:
        self.calls.append((name, gc.isenabled()))

    # The handle.
    def getValueState(self, name: str, schema: object) -> _Recorded:
        return _Recorded(self.calls)

    def getMapState(self, name: str, key: object, value: object) -> _Recorded:
        return _Recorded(self.calls)

    def registerTimer(self, at: int) -> None:
        self._note("registerTimer")
        self.timers.add(at)

    def deleteTimer(self, at: int) -> None:
        self._note("deleteTimer")
        self.timers.discard(at)

    # A value state.
    def get(self) -> Any:
        self._note("get")
        return self.value

    def update(self, value: Any) -> None:
        self._note("update")
        self.value = value

    def clear(self) -> None:
        self._note("clear")
        self.value = None

    # A map state.
    def iterator(self) -> Iterator[tuple[tuple[int], tuple[bytes]]]:
        self._note("iterator")
        return iter(list(self.entries.items()))

    def getValue(self, key: tuple[int]) -> tuple[bytes] | None:
        self._note("getValue")
        return self.entries.get(key)

    def updateValue(self, key: tuple[int], value: tuple[bytes]) -> None:
        self._note("updateValue")
        self.entries[key] = value

    def removeKey(self, key: tuple[int]) -> None:
        self._note("removeKey")
        self.entries.pop(key, None)


class _At:
    """TimerValues and ExpiredTimerInfo at a watermark (ms)."""

    def __init__(self, watermark: int, firing: int | None = None) -> None:
        self.watermark = watermark
        self.firing = firing

    def getCurrentWatermarkInMs(self) -> int:
        return self.watermark

    def getExpiryTimeInMs(self) -> int:
        assert self.firing is not None
        return self.firing


@pytest.mark.parametrize("api", ["pandas", "row"])
@pytest.mark.parametrize("collector_on", [True, False])
def test_a_visit_runs_with_the_cyclic_collector_paused_and_leaves_it_as_it_was(
    api: Api, collector_on: bool
) -> None:
    """Every state call of a visit, with input or from a timer, is made with the collector off
    (the visit's allocations are acyclic, see stream._collector_paused); afterwards the
    collector is as it was before, on or off, and the expiries are the rule's."""
    from aiowheel.spark.stream import _IdleExpiryPandasProcessor, _IdleExpiryProcessor

    calls: list[tuple[str, bool]] = []
    handle = _Recorded(calls)
    kind = _IdleExpiryPandasProcessor if api == "pandas" else _IdleExpiryProcessor
    processor = kind([30.0], 0.001, 10.0, 1)
    processor.init(handle)  # type: ignore[arg-type]
    events = [("a", 1.0, 0, "a:1"), ("b", 2.0, 0, "b:1")]
    was = gc.isenabled()
    try:
        if not collector_on:
            gc.disable()
        if api == "pandas":
            rows: Any = [pd.DataFrame(events, columns=["key", "ts", "rank", "event_id"])]
        else:
            # The row operator's rows: key, ts, rank, event_id, event_time, shard.
            rows = [(*event, None, 0) for event in events]
        start = _At(EVENT_TIME_SHIFT * 1000)  # Spark's watermark at ts 0
        assert list(processor.handleInputRows(("0",), iter(rows), start)) == []  # type: ignore[arg-type]
        assert gc.isenabled() is collector_on
        (timer,) = handle.timers
        # Spark's watermark and timers are in its event time: ts moved EVENT_TIME_SHIFT later.
        at = EVENT_TIME_SHIFT * 1000 + 40_000
        out = list(processor.handleExpiredTimer(("0",), _At(at), _At(at, timer)))  # type: ignore[arg-type]
        assert gc.isenabled() is collector_on
    finally:
        if was:
            gc.enable()
    emitted = (
        [tuple(row) for frame in out for row in frame.itertuples(index=False)]
        if api == "pandas"
        else [tuple(row) for row in out]
    )
    assert sorted(emitted) == [("a", 30.0, 31.0, 1.0), ("b", 30.0, 32.0, 2.0)]
    assert calls and all(on is False for _, on in calls), calls


@pytest.mark.parametrize("api", ["pandas", "row"])
def test_a_visit_frees_its_events_before_the_collector_comes_back(api: Api) -> None:
    """The events a visit groups are freed inside the paused block. Alive when the collector
    comes back on, they would be the young objects its next pass walks (the first allocation
    after the block starts one: the block's allocations counted towards it), one by one, just
    before they go (see stream._collector_paused). A pass that starts during the handler finds
    few young objects, not the visit's thousands of events."""
    from aiowheel.spark.stream import _IdleExpiryPandasProcessor, _IdleExpiryProcessor

    kind = _IdleExpiryPandasProcessor if api == "pandas" else _IdleExpiryProcessor
    processor = kind([30.0], 0.001, 10.0, 1)
    processor.init(_Recorded([]))  # type: ignore[arg-type]
    events = [(f"k{i % 3000}", i / 1000, 1, f"e{i}") for i in range(6000)]
    if api == "pandas":
        rows: Any = [pd.DataFrame(events, columns=["key", "ts", "rank", "event_id"])]
    else:
        rows = [(*event, None, 0) for event in events]
    young: list[int] = []  # the objects of generation 0 at the start of each pass

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            young.append(len(gc.get_objects(0)))

    assert gc.isenabled()
    gc.collect()
    gc.callbacks.append(count)
    try:
        out = processor.handleInputRows(("0",), iter(rows), _At(EVENT_TIME_SHIFT * 1000))  # type: ignore[arg-type]
    finally:
        gc.callbacks.remove(count)
    assert list(out) == []
    assert all(found < 500 for found in young), young


def test_the_collector_comes_back_on_after_a_visit_that_raises() -> None:
    from aiowheel.spark.stream import _collector_paused

    assert gc.isenabled()
    with pytest.raises(RuntimeError), _collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("a visit that fails")
    assert gc.isenabled()
