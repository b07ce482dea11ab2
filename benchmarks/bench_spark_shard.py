"""One shard of the stream, replayed outside Spark: where the processor's Python time goes.

``bench_spark_stream.py`` measures whole micro-batches against Spark's floor; this measures
the part of them that is aiowheel's own, the stream's processor in its Python worker, with
nothing of Spark around it: no state server (the state lives in a dict), no JVM. It makes the
stream benchmark's micro-batches from the same log (``--events``, the seed scenario, split by
arrival: the large stream's warm-up and three micro-batches of ``--large`` rows, then the
micro-batch without input; the small stream's warm-up and three of ``--small`` rows), keeps the
rows of one shard (``--shard`` of ``8 x --partitions``, hashed as the stream hashes them), and
hands them to ``transformWithStateInPandas``'s processor as Spark would: one pandas frame per
visit, at the watermark Spark would have (the largest event time of the micro-batches before,
less the delay; later rows dropped as late), then its timers that the watermark reached.

Per kind of micro-batch (the median over the three of each), the time of the processor's
visit in all (``handleInputRows``, or ``handleExpiredTimer`` without input) and of its parts:

* **visit** -- the shard's visit (the ``visit`` twin, :func:`aiowheel.spark._visit.visit`):
  finding the keys in the pages, decoding their states, the rule, placing them in pages, and,
  in the compiled twin, encoding the pages it writes (it copies the stored bytes of the states
  it did not change, which cannot be timed apart);
* **rule** -- of which the rule's own visits of the keys, in the pure twin
  (``IdleRule.visit_stored``). The compiled visit has the compiled rule visit keys as C records
  (``IdleRule.visit_record``), inside it: that cannot be timed apart (a clock around the rule
  would send the keys through ``visit_stored`` instead), so the compiled row shows "in visit";
* **encode** -- encoding (and compressing) the index, and, in the pure twin, the pages the
  visit writes (which it encodes through :func:`aiowheel.spark._shard.dump_page`: not
  counted in **visit**);
* **rest** -- the remainder: grouping the frame's rows by key, reading the index, the
  expiries' frame.

The compiled and the pure implementation (the ``rule`` and ``visit`` twins) each run in a
process of their own, alternating, ``--repeat`` times; the table shows the medians with their
range, and the compiled one's share of the pure one's. Both must emit the same expiries: the
run stops if they do not. Numbers only: this never fails on speed.

    python benchmarks/bench_spark_shard.py                   # 3M events, shard 0 of 16
    python benchmarks/bench_spark_shard.py --events 300000 --small 1000 --large 30000
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The benchmarks folder is not a package: the other benchmarks are sibling modules.
from bench_spark_replay import connections_for, load
from bench_spark_stream import DELAY, DURATION, TICK, TIMEOUTS, sources

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

IMPLEMENTATIONS = ("compiled", "pure")
KINDS = ("large", "small", "no-data")
PARTS = ("total", "visit", "rule", "encode", "rest")
# A micro-batch of one shard: its rows (the processor's columns, and Spark's event time in
# microseconds) and Spark's watermark (ms) after it: the largest event time of the whole
# micro-batch, all shards, less the delay.
Batch = tuple["pd.DataFrame", int]


def make_batches(
    spark: SparkSession,
    log: DataFrame,
    tmp: str,
    *,
    small: int,
    large: int,
    partitions: int,
    shard: int,
) -> dict[str, Any]:
    """The large and the small stream's micro-batches of one shard of ``log`` (see the module
    documentation; their slices are written under ``tmp``), with the number of shards and the
    large stream's source folder."""
    from pyspark.sql import functions as F

    from aiowheel.spark.stream import SHARDS_PER_PARTITION, _keyed

    shards = SHARDS_PER_PARTITION * partitions
    if not 0 <= shard < shards:
        raise SystemExit(f"--shard must be in 0..{shards - 1}, got {shard}")
    folders = sources(spark, log, tmp, small, large)
    streams: dict[str, list[Batch]] = {}
    for name, folder in folders.items():
        batches = []
        for part in sorted(os.listdir(folder)):
            keyed = _keyed(spark.read.parquet(os.path.join(folder, part)), DELAY, shards)
            keyed = keyed.withColumn("event_us", F.unix_micros("event_time"))
            (latest,) = keyed.agg(F.max("event_us")).first()  # type: ignore[misc]
            frame = (
                keyed.filter(F.col("shard") == shard)
                .select("key", "ts", "rank", "event_id", "event_us")
                .toPandas()
            )
            batches.append((frame, latest // 1000 - round(DELAY * 1000)))
        streams[name] = batches
    return {"streams": streams, "shards": shards, "large": folders["large"]}


class _State:
    """A processor's state variables and timers, in memory: Spark's state server without the
    server (what the processor calls, nothing more)."""

    def __init__(self) -> None:
        self.value: Any = None
        self.entries: dict[Any, Any] = {}
        self.timers: set[int] = set()

    # The handle.
    def getValueState(self, name: str, schema: object) -> _State:
        return self

    def getMapState(self, name: str, key: object, value: object) -> _State:
        return self

    def registerTimer(self, at: int) -> None:
        self.timers.add(at)

    def deleteTimer(self, at: int) -> None:
        self.timers.discard(at)

    # The index (a value state); the pages (a map state) use `entries`.
    def get(self) -> Any:
        return self.value

    def update(self, value: Any) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None

    def iterator(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self.entries.items()))

    def getValue(self, key: Any) -> Any:
        return self.entries.get(key)

    def updateValue(self, key: Any, value: Any) -> None:
        self.entries[key] = value

    def removeKey(self, key: Any) -> None:
        self.entries.pop(key, None)


class _At:
    """TimerValues and ExpiredTimerInfo at Spark's watermark (ms)."""

    def __init__(self, watermark: int, firing: int = 0) -> None:
        self.watermark = watermark
        self.firing = firing

    def getCurrentWatermarkInMs(self) -> int:
        return self.watermark

    def getExpiryTimeInMs(self) -> int:
        return self.firing


class _Clock:
    """Seconds spent inside the functions it wraps, per part, less what the clock itself adds
    to each call (measured once, on a function that does nothing). A wrapped call made inside
    another counts for its own part only: the outer part's time excludes it (the pure visit
    encodes the pages it writes through _shard.dump_page: that is encoding, not visit)."""

    def __init__(self) -> None:
        self.spent = dict.fromkeys(PARTS, 0.0)
        self.calls = dict.fromkeys(PARTS, 0)
        # The time of the wrapped calls made inside each wrapped call running, innermost last.
        self.inner: list[float] = []
        idle = self.wrap("total", lambda *args: None)
        began = time.perf_counter()
        for _ in range(100_000):
            idle(None, None, None)
        self.own = (time.perf_counter() - began) / 100_000
        self.reset()

    def reset(self) -> None:
        self.spent = dict.fromkeys(PARTS, 0.0)
        self.calls = dict.fromkeys(PARTS, 0)

    def seconds(self, part: str) -> float:
        """The time spent in ``part`` since the last reset, the clock's own cost taken off."""
        return max(0.0, self.spent[part] - self.calls[part] * self.own)

    def wrap(self, part: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.inner.append(0.0)
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                took = time.perf_counter() - began
                self.spent[part] += took - self.inner.pop()
                self.calls[part] += 1
                if self.inner:
                    self.inner[-1] += took

        return timed


def replay_stream(
    batches: Sequence[Batch],
    shards: int,
    implementation: str,
    *,
    no_data: bool,
    time_rule: bool = False,
) -> tuple[list[dict[str, float]], list[tuple[Any, ...]]]:
    """Run one shard's micro-batches through the pandas processor with the given twins; return
    each visit's parts (ms, see the module documentation) and every expiry emitted.

    The rule's visits are timed only with ``time_rule`` (a clock around each one costs more
    than some of them): the other parts are from a run without it."""
    from aiowheel.spark import _shard
    from aiowheel.spark.stream import _IdleExpiryPandasProcessor

    clock = _Clock()
    processor = _IdleExpiryPandasProcessor(TIMEOUTS, TICK, DELAY, shards)
    processor.implementation = "pure" if implementation == "pure" else None
    state = _State()
    processor.init(state)  # type: ignore[arg-type]
    rule = processor.rule
    # The parts, timed where the processor and the visit call them (they look them up at each
    # call; the pure visit encodes the pages it writes through _shard.write_back, the compiled
    # one its own way, inside its visit).
    patched = {
        (processor.shard_visit, "visit"): "visit",
        (_shard, "dump_page"): "encode",
        (_shard, "dump"): "encode",
    }
    saved = {target: getattr(*target) for target in patched}
    for (module, name), part in patched.items():
        setattr(module, name, clock.wrap(part, saved[(module, name)]))
    if time_rule:
        processor.rule = _RuleClock(rule, clock)  # type: ignore[assignment]
    visits: list[dict[str, float]] = []
    expiries: list[tuple[Any, ...]] = []
    watermark = 0  # Spark's, before any event
    try:
        steps: list[tuple[pd.DataFrame | None, int]] = list(batches)
        if no_data:
            steps.append((None, steps[-1][1]))
        for frame, after in steps:
            rows = None
            if frame is not None:
                # Spark drops the rows at or before the watermark as late.
                late = frame["event_us"] <= watermark * 1000
                rows = frame[~late][["key", "ts", "rank", "event_id"]]
            produced = []
            clock.reset()
            gc.collect()
            began = time.perf_counter()
            if rows is not None:
                produced.append(
                    list(processor.handleInputRows(("0",), iter([rows]), _At(watermark)))  # type: ignore[arg-type]
                )
            for timer in sorted(at for at in state.timers if at <= watermark):
                state.timers.discard(timer)  # Spark deletes it once the handler returns
                produced.append(
                    list(
                        processor.handleExpiredTimer(
                            ("0",),
                            _At(watermark),
                            _At(watermark, timer),  # type: ignore[arg-type]
                        )
                    )
                )
            spent = {part: clock.seconds(part) for part in PARTS}
            spent["total"] = time.perf_counter() - began
            spent["rest"] = spent["total"] - spent["visit"] - spent["encode"]
            visits.append({part: seconds * 1000.0 for part, seconds in spent.items()})
            expiries += [row for out in produced for row in _rows_of(out)]
            watermark = max(watermark, after)
    finally:
        for (module, name), function in saved.items():
            setattr(module, name, function)
    return visits, expiries


class _RuleClock:
    """A rule whose visits are timed as the part ``rule``."""

    def __init__(self, rule: Any, clock: _Clock) -> None:
        self.visit_stored = clock.wrap("rule", rule.visit_stored)


def _rows_of(frames: list[pd.DataFrame]) -> list[tuple[Any, ...]]:
    return [tuple(row) for frame in frames for row in frame.itertuples(index=False)]


def child(path: str, implementation: str) -> dict[str, Any]:
    """Run in a fresh process: both streams of the batches pickled at ``path``, with the given
    twins; the parts per kind of micro-batch (medians) and a digest of the expiries."""
    with open(path, "rb") as handle:
        made = pickle.load(handle)
    parts: dict[str, dict[str, float]] = {}
    emitted = []
    for name in ("large", "small"):
        batches, no_data = made["streams"][name], name == "large"
        visits, expiries = replay_stream(batches, made["shards"], implementation, no_data=no_data)
        if implementation == "pure":
            timed, _ = replay_stream(
                batches, made["shards"], implementation, no_data=no_data, time_rule=True
            )
            for visit, rule in zip(visits, timed, strict=True):
                visit["rule"] = rule["rule"]
        else:  # the rule runs on records inside the visit: see the module documentation
            for visit in visits:
                visit["rule"] = math.nan
        emitted.append(sorted(expiries))
        with_input = visits[1 : len(batches)]  # after the warm-up
        parts[name] = {part: statistics.median(v[part] for v in with_input) for part in PARTS}
        if no_data:
            parts["no-data"] = visits[-1]
    return {"parts": parts, "expiries": repr(emitted), "count": sum(map(len, emitted))}


def run_child(path: str, implementation: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", path, implementation],
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"the {implementation} replay failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def table(results: dict[str, Any]) -> str:
    """Per kind of micro-batch and part: each implementation's median (range), and compiled /
    pure."""
    lines = [
        "| micro-batch | part | compiled ms | pure ms | compiled / pure |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    runs = results["runs"]
    for kind in KINDS:
        for part in PARTS:
            medians = {}
            cells = []
            for implementation in IMPLEMENTATIONS:
                values = [run["parts"][kind][part] for run in runs[implementation]]
                medians[implementation] = statistics.median(values)
                cells.append(
                    "in visit"
                    if math.isnan(medians[implementation])
                    else f"{medians[implementation]:,.1f} ({min(values):,.1f}-{max(values):,.1f})"
                )
            share = medians["compiled"] / medians["pure"] if medians["pure"] else math.nan
            shown = "-" if math.isnan(share) else f"{share:.2f}"
            lines.append(f"| {kind} | {part} | {cells[0]} | {cells[1]} | {shown} |")
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    rows = results["rows"]
    return (
        f"# One shard of the stream outside Spark: shard {results['shard']} of "
        f"{results['shards']}, {results['events']:,} events\n\n"
        f"Rows of the shard per micro-batch (median): large {rows['large']:,}, small "
        f"{rows['small']:,}; {results['repeat']} process(es) per implementation, "
        f"alternating; {results['load_before']} before, {results['load_after']} after; both "
        f"implementations emitted the same {results['expiries']:,} expiries.\n\n"
        + table(results)
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        print(json.dumps(child(argv[1], argv[2])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=3_000_000, help="log size (3M)")
    parser.add_argument("--small", type=int, default=10_000, help="rows per small batch")
    parser.add_argument("--large", type=int, default=300_000, help="rows per large batch")
    parser.add_argument("--partitions", type=int, default=2, help="shards: 8 per partition")
    parser.add_argument("--shard", type=int, default=0, help="the shard replayed (0)")
    parser.add_argument("--repeat", type=int, default=5, help="processes per implementation (5)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = parser.parse_args(argv)
    from aiowheel.spark import generate, spark_session

    spark = spark_session("local[2]", shuffle_partitions=args.partitions)
    try:
        with tempfile.TemporaryDirectory(prefix="aiowheel-bench-shard-") as tmp:
            path = os.path.join(tmp, "events.parquet")
            connections = connections_for(args.events)
            log = generate(spark, connections=connections, duration=DURATION, seed=0, path=path)
            events = log.count()
            made = make_batches(
                spark,
                log,
                tmp,
                small=args.small,
                large=args.large,
                partitions=args.partitions,
                shard=args.shard,
            )
    finally:
        spark.stop()
    results: dict[str, Any] = {
        "events": events,
        "shard": args.shard,
        "shards": made["shards"],
        "repeat": args.repeat,
        "rows": {
            name: int(statistics.median(len(frame) for frame, _ in made["streams"][name][1:]))
            for name in ("large", "small")
        },
        "load_before": load(),
        "runs": {implementation: [] for implementation in IMPLEMENTATIONS},
    }
    with tempfile.TemporaryDirectory(prefix="aiowheel-bench-shard-") as tmp:
        path = os.path.join(tmp, "batches.pickle")
        with open(path, "wb") as handle:
            pickle.dump(made, handle)
        digests = set()
        for index in range(args.repeat):
            order = IMPLEMENTATIONS if index % 2 == 0 else IMPLEMENTATIONS[::-1]
            for implementation in order:
                run = run_child(path, implementation)
                digests.add(run.pop("expiries"))
                results["expiries"] = run.pop("count")
                results["runs"][implementation].append(run)
                print(
                    f"{implementation} {index + 1}: "
                    + ", ".join(f"{kind} {run['parts'][kind]['total']:,.1f} ms" for kind in KINDS),
                    flush=True,
                )
        if len(digests) != 1:
            raise SystemExit("the compiled and the pure twins emitted different expiries")
    results["load_after"] = load()
    text = markdown(results)
    print()
    print(text)
    os.makedirs(args.out, exist_ok=True)
    for suffix, content in (("json", json.dumps(results, indent=1)), ("md", text)):
        written = os.path.join(args.out, f"spark_shard.{suffix}")
        with open(written, "w", encoding="utf-8") as handle:
            handle.write(content)
        print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
