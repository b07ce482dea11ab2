"""Replay throughput on Spark: events per second on local[1] vs local[2], next to its floor.

Generates the seed scenario once (Parquet, in a temporary directory), then times
``aiowheel.spark.replay`` writing every expiry to Parquet, on a fresh ``local[1]`` and a fresh
``local[2]`` session (each in its own process, so the JVMs do not share warm-up). In the same
process and interleaved with it, the *floor*: a bare ``lead()`` window over the same log (one
shuffle, one sort, one window; no validation, de-duplication or horizon), written the same way,
as one would write it (``partitionBy("key")``) and with the hash prefix replay's sorts use. The
first round of each warms the JVM up and is not counted; the median of ``--rounds`` is reported
with the range, and the CPU seconds of the JVM and its Python workers next to it, which a
machine shared with other work inflates less than wall time (on a standalone cluster whose
workers run on this machine, the executors' CPU is counted too). Numbers only: this never fails on
speed.

    python benchmarks/bench_spark_replay.py            # 10M events
    python benchmarks/bench_spark_replay.py --quick    # 200k events
    python benchmarks/bench_spark_replay.py --events 1000000 --timeouts 15,30,60
    python benchmarks/bench_spark_replay.py --master spark://127.0.0.1:7077   # and a cluster
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

KEEPALIVE = 25.0
DURATION = 300.0
# What replay is timed against, in this order: replay itself, then its floors.
VARIANTS = ("replay", "lead", "lead+hash")


def connections_for(events: int) -> int:
    """Connections giving about ``events`` events over DURATION with one keepalive per KEEPALIVE."""
    return max(1, round(events / (DURATION / KEEPALIVE)))


def generate_log(path: str, events: int, *, seed: int = 0) -> int:
    """Write the seed scenario with about ``events`` events to ``path``; return its size."""
    from aiowheel.spark import generate, spark_session

    spark = spark_session("local[2]")
    log = generate(
        spark, connections=connections_for(events), duration=DURATION, seed=seed, path=path
    )
    count = log.count()
    spark.stop()
    return count


def process_tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and its descendants, including children
    they have reaped: the JVM of a session and the Python workers it forks."""
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        # After the command: state, ppid, ..., utime stime cutime cstime at 11..14.
        children.setdefault(int(fields[1]), []).append(int(entry))
        times[int(entry)] = sum(int(value) for value in fields[11:15]) / tick
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        total += times.get(current, 0.0)
        stack.extend(children.get(current, []))
    return total


def jvm_pid(spark: SparkSession) -> int:
    """The process id of the session's JVM (local mode: the driver is the executor)."""
    return int(spark.sparkContext._gateway.proc.pid)  # type: ignore[union-attr]


def session_cpu(spark: SparkSession) -> float:
    """CPU seconds so far of the session's processes on this machine: the driver's JVM and
    Python workers, and on a standalone cluster started here also its executors' (each a JVM
    that a worker forked, with its own Python workers)."""
    app = spark.sparkContext.applicationId
    executors = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                words = cmdline.read().split(b"\0")
        except OSError:
            continue
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in words and (
            app.encode() in words
        ):
            executors.append(int(entry))
    return sum(process_tree_cpu(pid) for pid in [jvm_pid(spark), *executors])


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """``--master URL`` (repeatable) and ``--cluster-cores``: the standalone clusters a Spark
    benchmark also runs on, after its local masters, and their cores."""
    parser.add_argument(
        "--master",
        action="append",
        default=[],
        metavar="URL",
        help="also run on this cluster (spark://host:port), after --masters",
    )
    parser.add_argument("--cluster-cores", type=int, default=2, help="cores of --master")


def cluster_partitions(master: str, partitions: int, cluster_cores: int) -> int:
    """Shuffle partitions for ``master``: ``partitions`` if given, else 0 (the session's
    default, 2 per core) on ``local[N]`` and 2 per core of the cluster on ``spark://``."""
    if partitions or not master.startswith("spark://"):
        return partitions
    return 2 * cluster_cores


def floor(events: DataFrame, timeout: float, *, hashed: bool) -> DataFrame:
    """The bare ``lead()`` window: one shuffle by key, one sort, one window, the same output
    columns as replay (deadline without the tick's rounding)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from aiowheel.spark.events import _kind_rank

    partition = [F.xxhash64("key"), "key"] if hashed else ["key"]
    order = Window.partitionBy(*partition).orderBy("ts", "rank")
    ranked = events.select("key", "ts", _kind_rank(F.col("kind")).alias("rank"))
    touches = ranked.withColumn("next_ts", F.lead("ts").over(order))
    expired_at = F.col("ts") + F.lit(timeout)
    return touches.filter(
        (F.col("rank") != F.lit(2)) & (F.col("next_ts").isNull() | (F.col("next_ts") >= expired_at))
    ).select(
        "key",
        F.lit(timeout).alias("timeout"),
        expired_at.alias("expired_at"),
        F.col("ts").alias("last_seen"),
    )


def measure_replay(
    spark: SparkSession,
    path: str,
    timeouts: Sequence[float],
    rounds: int,
    variants: Sequence[str] = VARIANTS,
) -> dict[str, dict[str, list[float]]]:
    """Per variant of ``variants`` (of VARIANTS): wall and CPU seconds of each of ``rounds``
    runs, interleaved, after one warm-up run of each."""
    from aiowheel.spark import read_events, replay

    builders: dict[str, Callable[[], DataFrame]] = {
        "replay": lambda: replay(spark, read_events(spark, path), timeouts=timeouts, tick=0.001),
        "lead": lambda: floor(spark.read.parquet(path), timeouts[0], hashed=False),
        "lead+hash": lambda: floor(spark.read.parquet(path), timeouts[0], hashed=True),
    }
    runs = {variant: builders[variant] for variant in variants}
    results: dict[str, dict[str, list[float]]] = {v: {"seconds": [], "cpu": []} for v in runs}
    with tempfile.TemporaryDirectory(prefix="aiowheel-bench-out-") as out:
        for round_ in range(rounds + 1):
            for variant, build in runs.items():
                cpu, start = session_cpu(spark), time.perf_counter()
                build().write.mode("overwrite").parquet(out)
                seconds, used = time.perf_counter() - start, session_cpu(spark) - cpu
                if round_ > 0:
                    results[variant]["seconds"].append(seconds)
                    results[variant]["cpu"].append(used)
    return results


def child(argv: Sequence[str]) -> dict[str, Any]:
    """Run in a fresh process: ``PATH MASTER ROUNDS TIMEOUTS PARTITIONS [VARIANTS]``
    (``PARTITIONS`` 0: the session's default; ``VARIANTS``: comma-separated, default all);
    returns the measurements."""
    from aiowheel.spark import spark_session

    path, master, rounds, timeouts, partitions, *chosen = argv
    variants = chosen[0].split(",") if chosen else VARIANTS
    spark = spark_session(master, shuffle_partitions=int(partitions) or None)
    try:
        seconds = [float(timeout) for timeout in timeouts.split(",")]
        return measure_replay(spark, path, seconds, int(rounds), variants)
    finally:
        spark.stop()


def run_child(script: str, args: Sequence[str]) -> Any:
    """Run ``script --child ARGS`` in a fresh process; return the JSON of its last line."""
    done = subprocess.run(
        [sys.executable, script, "--child", *args], check=False, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"{script} --child {' '.join(args)} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def median_range(values: Sequence[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def load() -> str:
    """The machine's load average, as uptime prints it."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


def replay_table(count: int, by_master: dict[str, dict[str, dict[str, list[float]]]]) -> str:
    """The replay figures as a Markdown table: events/s (median and range) per master and
    variant, CPU seconds, replay against its floors, and each master against the first."""
    first = next(iter(by_master))
    lines = [
        "| master | variant | seconds (median) | events/s (median, range) | CPU s | vs lead() "
        f"| vs {first} |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for master, variants in by_master.items():
        lead = statistics.median(variants["lead"]["seconds"])
        for variant in VARIANTS:
            seconds, fastest, slowest = median_range(variants[variant]["seconds"])
            # The same variant's speed over the first master's (a cluster next to local[2]).
            versus_first = statistics.median(by_master[first][variant]["seconds"]) / seconds
            lines.append(
                f"| {master} | {variant} | {seconds:.2f} | {count / seconds:,.0f} "
                f"({count / slowest:,.0f}-{count / fastest:,.0f}) | "
                f"{statistics.median(variants[variant]['cpu']):.1f} | {lead / seconds:.2f}x "
                f"| {versus_first:.2f}x |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--quick", action="store_true", help="200k events, one round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeouts", default="30", help="comma-separated, default 30")
    parser.add_argument("--masters", default="local[1],local[2]")
    add_cluster_arguments(parser)
    parser.add_argument("--partitions", type=int, default=0, help="default: 2 per core")
    parser.add_argument("--out", default=None, help="also write results.json here (a folder)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    if args.quick:
        args.events, args.rounds = 200_000, 1
    with tempfile.TemporaryDirectory(prefix="aiowheel-bench-") as tmp:
        path = os.path.join(tmp, "events.parquet")
        start = time.perf_counter()
        count = generate_log(path, args.events)
        print(f"generated {count:,} events in {time.perf_counter() - start:.1f} s", flush=True)
        by_master = {
            master: run_child(
                __file__,
                [
                    path,
                    master,
                    str(args.rounds),
                    args.timeouts,
                    str(cluster_partitions(master, args.partitions, args.cluster_cores)),
                ],
            )
            for master in [*args.masters.split(","), *args.master]
        }
    table = replay_table(count, by_master)
    print(f"\nreplay of {count:,} events, timeouts {args.timeouts}, median of {args.rounds}")
    print(f"({load()})\n")
    print(table)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "spark_replay.json"), "w", encoding="utf-8") as out:
            json.dump({"events": count, "load": load(), "replay": by_master}, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
