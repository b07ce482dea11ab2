"""Streaming throughput on Spark: events/s per micro-batch and end to end, next to replay.

Generates the seed scenario once, splits it by arrival into ``--files`` files (as a collector
would write it), then runs, each in a fresh process (its own JVM, no shared warm-up):

* ``aiowheel.spark.stream`` over the files, one file per micro-batch (``maxFilesPerTrigger=1``,
  trigger ``availableNow``), on ``local[1]`` and ``local[2]``, for each operator of ``--apis``
  (``row``: ``transformWithState``; ``pandas``: ``transformWithStateInPandas``);
* ``aiowheel.spark.replay`` of the same log on the same masters (see bench_spark_replay.py).

For every micro-batch it records the input rows, the time, the events/s and the state store
metrics that explain them (RocksDB gets and puts, timers registered and deleted, the state
operator's update and commit times); end to end, the events of the log over the wall time from
the query's start to its end (first-batch planning and the final no-data batch included), and
the CPU seconds of the JVM and its Python workers. Each stream's output is checked against
``replay`` up to the watermark it reached. It prints a side-by-side table and writes
``spark_stream.json``, ``spark_stream.md`` and ``spark_stream.png`` to ``--out``
(default: benchmarks/results). Numbers only: this never fails on speed.

    python benchmarks/bench_spark_stream.py             # 1.2M events in 10 files
    python benchmarks/bench_spark_stream.py --quick     # 100k events in 4 files, row only
    python benchmarks/bench_spark_stream.py --events 300000 --files 8 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The benchmarks folder is not a package: the replay benchmark is a sibling module.
from bench_spark_replay import (
    generate_log,
    jvm_pid,
    load,
    median_range,
    process_tree_cpu,
    run_child,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RESULTS = Path(__file__).resolve().parent / "results"
TIMEOUTS = [30.0]
TICK = 0.001
DELAY = 10.0
# State operator metrics kept per micro-batch (Spark's names).
STATE_METRICS = ("numRowsTotal", "numRowsUpdated", "allUpdatesTimeMs", "commitTimeMs")
CUSTOM_METRICS = (
    "rocksdbGetCount",
    "rocksdbPutCount",
    "numRegisteredTimers",
    "numDeletedTimers",
    "rocksdbCommitFlushLatency",
    "rocksdbCommitCheckpointLatency",
)


def split_log(log_path: str, directory: str, files: int) -> list[str]:
    """Split the log at ``log_path`` by arrival into ``files`` folders under ``directory``."""
    from aiowheel.spark import spark_session, write_stream_files

    spark = spark_session("local[2]")
    folders = write_stream_files(spark.read.parquet(log_path), directory, files=files)
    spark.stop()
    return folders


def batch_figures(progress: dict[str, Any]) -> dict[str, Any]:
    """What one micro-batch's progress report says about speed and state."""
    rows = int(progress["numInputRows"])
    millis = int(progress["durationMs"].get("triggerExecution", 0))
    state = progress["stateOperators"][0] if progress["stateOperators"] else {}
    custom = state.get("customMetrics", {})
    return {
        "batch": int(progress["batchId"]),
        "rows": rows,
        "ms": millis,
        "events_per_s": rows / millis * 1000 if millis else 0.0,
        **{name: state.get(name) for name in STATE_METRICS},
        **{name: custom.get(name) for name in CUSTOM_METRICS},
        "watermark": progress.get("eventTime", {}).get("watermark"),
    }


def measure_stream(
    spark: SparkSession,
    log_path: str,
    slices: Sequence[str],
    work: str,
    *,
    api: str,
    shards: int | None = None,
    check: bool = True,
) -> dict[str, Any]:
    """Stream ``slices`` (one per micro-batch) through a fresh query in ``work``; return the
    end-to-end and per-batch figures, and whether the output equals replay's."""
    from aiowheel.spark import collect_expiries, replay, stream, watermark
    from aiowheel.spark.stream import SHARDS_PER_PARTITION

    source, output, checkpoint = (os.path.join(work, name) for name in ("in", "out", "ckpt"))
    for folder in (source, output, checkpoint):
        shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(source)
    for folder in slices:
        shutil.copytree(folder, os.path.join(source, os.path.basename(folder)))
    pid = jvm_pid(spark)
    cpu, start = process_tree_cpu(pid), time.perf_counter()
    query = stream(
        spark,
        source,
        output=output,
        checkpoint=checkpoint,
        timeouts=TIMEOUTS,
        tick=TICK,
        delay=DELAY,
        max_files_per_trigger=1,
        shards=shards,
        api=api,  # type: ignore[arg-type]
    )
    query.awaitTermination()
    seconds, used = time.perf_counter() - start, process_tree_cpu(pid) - cpu
    if query.exception() is not None:
        raise RuntimeError(f"stream failed: {query.exception()}")
    batches = [batch_figures(progress) for progress in query.recentProgress]
    events = sum(batch["rows"] for batch in batches)
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions") or 0)
    result: dict[str, Any] = {
        "events": events,
        "seconds": seconds,
        "cpu": used,
        "events_per_s": events / seconds,
        "batches": batches,
        "partitions": partitions,
        "shards": shards or SHARDS_PER_PARTITION * partitions,
    }
    if check:
        horizon = watermark(query)
        emitted = spark.read.parquet(output)
        got = collect_expiries(emitted)
        events_df = spark.read.parquet(log_path)
        expected = collect_expiries(
            replay(spark, events_df, timeouts=TIMEOUTS, tick=TICK, horizon=horizon)
        )
        result["agrees_with_replay"] = got == expected and emitted.count() == len(got)
        result["expiries"] = len(got)
    return result


def child(argv: Sequence[str]) -> dict[str, Any]:
    """In a fresh process: ``LOG SLICES WORK MASTER API SHARDS PARTITIONS CHECK``."""
    from aiowheel.spark import spark_session

    log_path, slices, work, master, api, shards, partitions, check = argv
    spark = spark_session(master, shuffle_partitions=int(partitions) or None)
    try:
        folders = sorted(str(path) for path in Path(slices).iterdir() if path.is_dir())
        return measure_stream(
            spark,
            log_path,
            folders,
            work,
            api=api,
            shards=int(shards) or None,
            check=check == "1",
        )
    finally:
        spark.stop()


def summary_table(results: dict[str, Any]) -> str:
    """End to end, side by side: replay and each stream variant per master, with ratios."""
    count = results["events"]
    lines = [
        "| master | replay events/s | replay / lead() | stream | events/s end to end "
        "(median, range) | CPU s | per-batch events/s (median) | stream / replay "
        "| scaling vs local[1] | partitions / shards | agrees |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    first: dict[str, float] = {}
    for master, replayed in results["replay"].items():
        replay_seconds = statistics.median(replayed["replay"]["seconds"])
        replay_rate = count / replay_seconds
        # The replay benchmark's floor, timed in the same process: the target is >= 0.8x.
        versus_lead = statistics.median(replayed["lead"]["seconds"]) / replay_seconds
        for api, runs in results["stream"].get(master, {}).items():
            rates = [run["events_per_s"] for run in runs]
            rate, low, high = median_range(rates)
            first.setdefault(api, rate)
            per_batch = statistics.median(
                batch["events_per_s"] for run in runs for batch in run["batches"] if batch["rows"]
            )
            agrees = all(run.get("agrees_with_replay", True) for run in runs)
            lines.append(
                f"| {master} | {replay_rate:,.0f} | {versus_lead:.2f}x | {api} "
                f"| {rate:,.0f} ({low:,.0f}-{high:,.0f}) "
                f"| {statistics.median(run['cpu'] for run in runs):.1f} | {per_batch:,.0f} "
                f"| 1/{replay_rate / rate:.1f} | {rate / first[api]:.2f}x "
                f"| {runs[0]['partitions']} / {runs[0]['shards']} | {'yes' if agrees else 'NO'} |"
            )
    return "\n".join(lines)


def batch_table(runs: list[dict[str, Any]]) -> str:
    """Per micro-batch of the first run: rows, time, events/s and the state store metrics."""
    lines = [
        "| batch | rows | ms | events/s | state rows | RocksDB gets | puts | timers +/- "
        "| updates ms | commit ms |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines.extend(
        f"| {batch['batch']} | {batch['rows']:,} | {batch['ms']:,} "
        f"| {batch['events_per_s']:,.0f} | {batch['numRowsTotal']} "
        f"| {batch['rocksdbGetCount']} | {batch['rocksdbPutCount']} "
        f"| {batch['numRegisteredTimers']}/{batch['numDeletedTimers']} "
        f"| {batch['allUpdatesTimeMs']} | {batch['commitTimeMs']} |"
        for batch in runs[0]["batches"]
    )
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    """The whole report: what ran, on what load, the summary and each stream's batches."""
    parts = [
        f"# Streaming vs replay: {results['events']:,} events in {results['files']} files",
        "",
        f"One file per micro-batch; timeouts {results['timeouts']}, delay {DELAY} s; "
        f"{results['load_before']} before, {results['load_after']} after.",
        "",
        summary_table(results),
    ]
    for master, apis in results["stream"].items():
        for api, runs in apis.items():
            parts += ["", f"## {master}, {api}: per micro-batch (first run)", "", batch_table(runs)]
    return "\n".join(parts) + "\n"


def plot(results: dict[str, Any], path: str) -> None:
    """End-to-end events/s (replay and each stream, per master) and events/s per micro-batch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    count = results["events"]
    figure, (bars, lines) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels, values = [], []
    for master, replayed in results["replay"].items():
        labels.append(f"replay\n{master}")
        values.append(count / statistics.median(replayed["replay"]["seconds"]))
        for api, runs in results["stream"].get(master, {}).items():
            labels.append(f"stream {api}\n{master}")
            values.append(statistics.median(run["events_per_s"] for run in runs))
            lines.plot(
                [batch["batch"] for batch in runs[0]["batches"] if batch["rows"]],
                [batch["events_per_s"] for batch in runs[0]["batches"] if batch["rows"]],
                marker="o",
                label=f"{api} {master}",
            )
    bars.bar(range(len(values)), values, color="tab:blue")
    bars.set_xticks(range(len(values)), labels, fontsize=8)
    bars.set_yscale("log")
    bars.set_ylabel("events/s, end to end (log scale)")
    bars.set_title(f"{count:,} events in {results['files']} files")
    lines.set_xlabel("micro-batch")
    lines.set_ylabel("events/s in the micro-batch")
    lines.set_title("stream, per micro-batch")
    lines.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_results(results: dict[str, Any], out: str) -> list[str]:
    """Write spark_stream.json, .md and .png to ``out``; return their paths."""
    os.makedirs(out, exist_ok=True)
    files = [os.path.join(out, f"spark_stream.{suffix}") for suffix in ("json", "md", "png")]
    with open(files[0], "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=1)
    with open(files[1], "w", encoding="utf-8") as handle:
        handle.write(markdown(results))
    plot(results, files[2])
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_200_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="100k events, 4 files, row only")
    parser.add_argument("--masters", default="local[1],local[2]")
    parser.add_argument("--apis", default="row,pandas")
    parser.add_argument("--repeat", type=int, default=1, help="stream runs per variant")
    parser.add_argument("--rounds", type=int, default=3, help="replay rounds per master")
    parser.add_argument("--shards", type=int, default=0, help="default: the stream's")
    parser.add_argument("--partitions", type=int, default=0, help="default: spark_session's")
    parser.add_argument("--no-check", action="store_true", help="skip the replay comparison")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--child", nargs=8, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    if args.quick:
        args.events, args.files, args.apis, args.rounds = 100_000, 4, "row", 1
    replay_script = os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "bench_spark_replay.py"
    )
    results: dict[str, Any] = {
        "files": args.files,
        "timeouts": TIMEOUTS,
        "load_before": load(),
        "replay": {},
        "stream": {},
    }
    with tempfile.TemporaryDirectory(prefix="aiowheel-bench-stream-") as tmp:
        log_path = os.path.join(tmp, "events.parquet")
        start = time.perf_counter()
        results["events"] = generate_log(log_path, args.events)
        split_log(log_path, os.path.join(tmp, "slices"), args.files)
        print(
            f"generated {results['events']:,} events in {args.files} files in "
            f"{time.perf_counter() - start:.1f} s",
            flush=True,
        )
        for master in args.masters.split(","):
            results["replay"][master] = run_child(
                replay_script, [log_path, master, str(args.rounds), ",".join(map(str, TIMEOUTS))]
            )
            for api in args.apis.split(","):
                runs = results["stream"].setdefault(master, {}).setdefault(api, [])
                for _ in range(args.repeat):
                    child_args = [
                        log_path,
                        os.path.join(tmp, "slices"),
                        os.path.join(tmp, "work"),
                        master,
                        api,
                        str(args.shards),
                        str(args.partitions),
                        "0" if args.no_check else "1",
                    ]
                    runs.append(run_child(__file__, child_args))
                    print(
                        f"{master} {api}: {runs[-1]['events_per_s']:,.0f} events/s end to end",
                        flush=True,
                    )
    results["load_after"] = load()
    print()
    print(markdown(results))
    for path in write_results(results, args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
