"""Streaming throughput on Spark, sized at realistic micro-batches, next to replay.

Generates the seed scenario once (3M events by default), splits it by arrival into ``--files``
files (as a collector would write it: 10 files, about 300k rows each), then runs, each in a
fresh process (its own JVM, no shared warm-up):

* ``aiowheel.spark.stream`` over the files, one file per micro-batch (``maxFilesPerTrigger=1``,
  trigger ``availableNow``), on each master of ``--masters`` (default ``local[2]``) and of
  ``--master`` (a standalone cluster, ``spark://host:port``), for each operator of ``--apis``
  (``pandas``: ``transformWithStateInPandas``, the default; ``row``: ``transformWithState``);
* ``aiowheel.spark.replay`` of the same log on the same masters (see bench_spark_replay.py).

What it reports, per master and operator (the median of ``--repeat`` runs):

* **sustained events/s**: the rows of the data micro-batches after the first over their time
  (the first pays for planning, starting the Python workers and a cold JVM), and that per core;
* **stream / replay**: the sustained rate over replay's events/s on the same log, same master;
* **latency**: from a file's arrival (the start of the micro-batch that reads it) to the
  commit of the expiries its events make due. Spark raises the watermark from a micro-batch's
  largest event time for the *next* micro-batch, so those expiries are committed at the end
  of the next one: the latency is the two micro-batches' time (median and worst), on top of
  the watermark delay in event time that the rule waits by design;
* **no-data micro-batch**: the time of a micro-batch without input that only fires the timers
  the last watermark made due (``availableNow`` runs one at the end);
* end to end (wall time from the query's start to its end), CPU seconds of the session's
  processes (driver, and the executors of a cluster whose workers run on this machine), and
  per micro-batch the state store metrics (RocksDB gets and puts, timers registered and
  deleted, the state operator's update and commit times).

``--sweep 50000,100000,300000`` adds, per master, one stream per micro-batch size on the same
log (``--sweep-batches`` data micro-batches after the first, so every size costs about the
same), with its sustained events/s and no-data micro-batch. Each stream's output is checked
against ``replay`` up to the watermark it reached (not in the sweep). It prints the tables and
writes ``spark_stream.json``, ``spark_stream.md`` and ``spark_stream.png`` to ``--out``
(default: benchmarks/results). Numbers only: this never fails on speed.

    python benchmarks/bench_spark_stream.py             # 3M events in 10 files, local[2]
    python benchmarks/bench_spark_stream.py --quick     # 200k events in 4 files
    python benchmarks/bench_spark_stream.py --apis pandas,row --repeat 3
    python benchmarks/bench_spark_stream.py --master spark://127.0.0.1:7077
    python benchmarks/bench_spark_stream.py --events 1500000 --sweep 35000,100000,300000
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
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The benchmarks folder is not a package: the replay benchmark is a sibling module.
from bench_spark_replay import (
    add_cluster_arguments,
    cluster_partitions,
    generate_log,
    load,
    run_child,
    session_cpu,
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
    started = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00"))
    return {
        "batch": int(progress["batchId"]),
        "rows": rows,
        "ms": millis,
        "started": started.timestamp(),
        "phases": progress["durationMs"],
        "events_per_s": rows / millis * 1000 if millis else 0.0,
        **{name: state.get(name) for name in STATE_METRICS},
        **{name: custom.get(name) for name in CUSTOM_METRICS},
        "watermark": progress.get("eventTime", {}).get("watermark"),
    }


def sustained(batches: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """The steady-state figures of one stream from its micro-batches (see the module docs):
    events/s over the data micro-batches after the first, the latency from a file's arrival
    to the commit of the expiries it makes due, and the no-data micro-batch's time."""
    data = [batch for batch in batches if batch["rows"]]
    steady = data[1:]
    millis = sum(batch["ms"] for batch in steady)
    # A micro-batch's expiries are made due by the previous one's input: from the start of
    # that one to the end of this one. Pairs that involve the first micro-batch are left out.
    latencies = [
        (later["started"] - earlier["started"]) * 1000 + later["ms"]
        for earlier, later in pairwise(batches[1:])
        if earlier["rows"]
    ]
    empty = [batch["ms"] for batch in batches if not batch["rows"]]
    return {
        "events_per_s": sum(batch["rows"] for batch in steady) / millis * 1000 if millis else None,
        "rows_per_batch": statistics.median(batch["rows"] for batch in data) if data else None,
        "first_ms": data[0]["ms"] if data else None,
        "latency_ms": statistics.median(latencies) if latencies else None,
        "latency_max_ms": max(latencies) if latencies else None,
        "no_data_ms": statistics.median(empty) if empty else None,
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
    cpu, start = session_cpu(spark), time.perf_counter()
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
    seconds, used = time.perf_counter() - start, session_cpu(spark) - cpu
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
        "load": load(),
        "batches": batches,
        "partitions": partitions,
        "shards": shards or SHARDS_PER_PARTITION * partitions,
        **sustained(batches),
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
    """In a fresh process: ``LOG SLICES WORK MASTER API SHARDS PARTITIONS CHECK FILES``
    (``FILES``: stream only the first so many slices; 0 for all)."""
    from aiowheel.spark import spark_session

    log_path, slices, work, master, api, shards, partitions, check, files = argv
    spark = spark_session(master, shuffle_partitions=int(partitions) or None)
    try:
        folders = sorted(str(path) for path in Path(slices).iterdir() if path.is_dir())
        return measure_stream(
            spark,
            log_path,
            folders[: int(files) or None],
            work,
            api=api,
            shards=int(shards) or None,
            check=check == "1",
        )
    finally:
        spark.stop()


def cores_of(master: str, cluster_cores: int) -> int:
    """The cores a master runs tasks on: N for ``local[N]``, ``cluster_cores`` otherwise."""
    from aiowheel.spark.session import _local_cores

    return _local_cores(master) or cluster_cores


def _median(runs: Sequence[dict[str, Any]], name: str) -> float | None:
    values = [run[name] for run in runs if run.get(name) is not None]
    return statistics.median(values) if values else None


def _figure(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def summary_table(results: dict[str, Any]) -> str:
    """Per master and operator: the sustained figures next to replay's, and the targets'."""
    count = results["events"]
    first_master = next(iter(results["replay"]))
    lines = [
        "| master | operator | rows per batch | sustained events/s (range) | per core "
        "| replay events/s | stream / replay | latency ms (median, max) | no-data batch ms "
        "| first batch ms | end to end events/s | CPU s | vs " + first_master + " | agrees |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| --- |",
    ]
    for master, replayed in results["replay"].items():
        replay_rate = count / statistics.median(replayed["replay"]["seconds"])
        cores = results["cores"][master]
        for api, runs in results["stream"].get(master, {}).items():
            rates = [run["events_per_s"] for run in runs if run["events_per_s"]]
            rate = statistics.median(rates) if rates else None
            spread = f" ({min(rates):,.0f}-{max(rates):,.0f})" if len(rates) > 1 else ""
            base = _median(results["stream"][first_master].get(api, []), "events_per_s")
            agrees = all(run.get("agrees_with_replay", True) for run in runs)
            lines.append(
                f"| {master} | {api} | {_figure(_median(runs, 'rows_per_batch'))} "
                f"| {_figure(rate)}{spread} | {_figure(rate and rate / cores)} "
                f"| {replay_rate:,.0f} | {'-' if not rate else f'1/{replay_rate / rate:.1f}'} "
                f"| {_figure(_median(runs, 'latency_ms'))}, "
                f"{_figure(_median(runs, 'latency_max_ms'))} "
                f"| {_figure(_median(runs, 'no_data_ms'))} | {_figure(_median(runs, 'first_ms'))} "
                f"| {statistics.median(run['events'] / run['seconds'] for run in runs):,.0f} "
                f"| {_median(runs, 'cpu'):.1f} "
                f"| {'-' if not (rate and base) else f'{rate / base:.2f}x'} "
                f"| {'yes' if agrees else 'NO'} |"
            )
    return "\n".join(lines)


def sweep_table(results: dict[str, Any]) -> str:
    """Per master and micro-batch size: sustained events/s and the no-data micro-batch."""
    lines = [
        "| master | rows per batch | sustained events/s | per core | latency ms (median) "
        "| no-data batch ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for master, sizes in results["sweep"].items():
        cores = results["cores"][master]
        for run in sizes.values():
            rate = run["events_per_s"]
            lines.append(
                f"| {master} | {_figure(run['rows_per_batch'])} | {_figure(rate)} "
                f"| {_figure(rate and rate / cores)} | {_figure(run['latency_ms'])} "
                f"| {_figure(run['no_data_ms'])} |"
            )
    return "\n".join(lines)


def batch_table(runs: list[dict[str, Any]]) -> str:
    """Per micro-batch of the first run: rows, time, events/s and the state store metrics."""
    lines = [
        "| batch | rows | ms | events/s | planning ms | state rows | RocksDB gets | puts "
        "| timers +/- | updates ms | commit ms |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines.extend(
        f"| {batch['batch']} | {batch['rows']:,} | {batch['ms']:,} "
        f"| {batch['events_per_s']:,.0f} | {batch['phases'].get('queryPlanning', '-')} "
        f"| {batch['numRowsTotal']} "
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
        f"median of {results['repeat']} run(s) per variant; "
        f"{results['load_before']} before, {results['load_after']} after.",
        "",
        summary_table(results),
    ]
    if results["sweep"]:
        parts += [
            "",
            f"## Micro-batch sizes ({results['sweep_batches']} data batches after the first, "
            f"{results['sweep_api']})",
            "",
            sweep_table(results),
        ]
    for master, apis in results["stream"].items():
        for api, runs in apis.items():
            parts += ["", f"## {master}, {api}: per micro-batch (first run)", "", batch_table(runs)]
    return "\n".join(parts) + "\n"


def plot(results: dict[str, Any], path: str) -> None:
    """Sustained events/s (replay and each stream, per master) and events/s per micro-batch."""
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
            values.append(_median(runs, "events_per_s") or 0.0)
            data = [batch for batch in runs[0]["batches"] if batch["rows"]]
            lines.plot(
                [batch["batch"] for batch in data],
                [batch["events_per_s"] for batch in data],
                marker="o",
                label=f"{api} {master}",
            )
    bars.bar(range(len(values)), values, color="tab:blue")
    bars.set_xticks(range(len(values)), labels, fontsize=8)
    bars.set_yscale("log")
    bars.set_ylabel("events/s (replay: whole log; stream: sustained)")
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


def _sizes(text: str) -> list[int]:
    return [int(size) for size in text.split(",") if size]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=3_000_000)
    parser.add_argument("--files", type=int, default=10, help="micro-batches (default: 10)")
    parser.add_argument("--quick", action="store_true", help="200k events, 4 files, 1 round")
    parser.add_argument("--masters", default="local[2]")
    add_cluster_arguments(parser)
    parser.add_argument("--apis", default="pandas")
    parser.add_argument("--repeat", type=int, default=1, help="stream runs per variant")
    parser.add_argument("--rounds", type=int, default=2, help="replay rounds per master")
    parser.add_argument("--shards", type=int, default=0, help="default: the stream's")
    parser.add_argument("--partitions", type=int, default=0, help="default: 2 per core")
    parser.add_argument(
        "--sweep", type=_sizes, default=[], metavar="ROWS,...", help="micro-batch sizes to sweep"
    )
    parser.add_argument("--sweep-batches", type=int, default=3)
    parser.add_argument("--no-check", action="store_true", help="skip the replay comparison")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--child", nargs=9, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    if args.quick:
        args.events, args.files, args.rounds = 200_000, 4, 1
    masters = [*args.masters.split(","), *args.master]
    apis = args.apis.split(",")
    replay_script = os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "bench_spark_replay.py"
    )
    results: dict[str, Any] = {
        "files": args.files,
        "timeouts": TIMEOUTS,
        "repeat": args.repeat,
        "load_before": load(),
        "cores": {master: cores_of(master, args.cluster_cores) for master in masters},
        "replay": {},
        "stream": {},
        "sweep": {},
        "sweep_batches": args.sweep_batches,
        "sweep_api": apis[0],
    }
    with tempfile.TemporaryDirectory(prefix="aiowheel-bench-stream-") as tmp:
        log_path = os.path.join(tmp, "events.parquet")
        start = time.perf_counter()
        results["events"] = generate_log(log_path, args.events)
        split_log(log_path, os.path.join(tmp, "slices"), args.files)
        sweeps = {
            size: split_log(
                log_path,
                os.path.join(tmp, f"sweep-{size}"),
                max(2, round(results["events"] / size)),
            )
            for size in args.sweep
        }
        print(
            f"generated {results['events']:,} events in {args.files} files in "
            f"{time.perf_counter() - start:.1f} s",
            flush=True,
        )

        def run_stream(master: str, api: str, slices: str, check: bool, files: int) -> Any:
            partitions = cluster_partitions(master, args.partitions, args.cluster_cores)
            child_args = [log_path, slices, os.path.join(tmp, "work"), master, api]
            child_args += [str(args.shards), str(partitions), "1" if check else "0", str(files)]
            return run_child(__file__, child_args)

        for master in masters:
            partitions = cluster_partitions(master, args.partitions, args.cluster_cores)
            results["replay"][master] = run_child(
                replay_script,
                [
                    log_path,
                    master,
                    str(args.rounds),
                    ",".join(map(str, TIMEOUTS)),
                    str(partitions),
                    "replay",
                ],
            )
            for api in apis:
                runs = results["stream"].setdefault(master, {}).setdefault(api, [])
                for _ in range(args.repeat):
                    runs.append(
                        run_stream(master, api, os.path.join(tmp, "slices"), not args.no_check, 0)
                    )
                    print(
                        f"{master} {api}: {_figure(runs[-1]['events_per_s'])} events/s "
                        f"sustained, no-data batch {_figure(runs[-1]['no_data_ms'])} ms "
                        f"({load()})\n{batch_table(runs[-1:])}",
                        flush=True,
                    )
            for size in sweeps:
                run = run_stream(
                    master,
                    apis[0],
                    os.path.join(tmp, f"sweep-{size}"),
                    False,
                    args.sweep_batches + 1,
                )
                results["sweep"].setdefault(master, {})[str(size)] = run
                print(
                    f"{master} sweep {size:,}: {_figure(run['events_per_s'])} events/s",
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
