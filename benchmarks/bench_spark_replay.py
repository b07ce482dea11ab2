"""Replay throughput on Spark: events per second on local[1] vs local[2].

Generates the seed scenario once (Parquet, in a temporary directory), then times
``aiowheel.spark.replay`` writing every expiry to Parquet, on a fresh ``local[1]`` and a fresh
``local[2]`` session (each in its own process, so the JVMs do not share warm-up). The first
replay of each session warms the JVM up and is not counted; the best of ``--rounds`` is
reported. Numbers only: this never fails on speed.

    python benchmarks/bench_spark_replay.py            # 10M events
    python benchmarks/bench_spark_replay.py --quick    # 200k events
    python benchmarks/bench_spark_replay.py --events 1000000 --timeouts 15,30,60
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

KEEPALIVE = 25.0
DURATION = 300.0


def _connections(events: int) -> int:
    """Connections giving about ``events`` events over DURATION with one keepalive per KEEPALIVE."""
    return max(1, round(events / (DURATION / KEEPALIVE)))


def _generate(path: str, events: int) -> int:
    from aiowheel.spark import generate, spark_session

    spark = spark_session("local[2]")
    log = generate(spark, connections=_connections(events), duration=DURATION, path=path)
    count = log.count()
    spark.stop()
    return count


def _measure(path: str, master: str, timeouts: list[float], rounds: int) -> float:
    """Best wall time of ``rounds`` replays on ``master``, after one warm-up replay."""
    from aiowheel.spark import read_events, replay, spark_session

    spark = spark_session(master)
    out = tempfile.mkdtemp(prefix="aiowheel-bench-out-")
    best = float("inf")
    for round_ in range(rounds + 1):
        start = time.perf_counter()
        events = read_events(spark, path)
        replay(spark, events, timeouts=timeouts, tick=0.001).write.mode("overwrite").parquet(out)
        elapsed = time.perf_counter() - start
        if round_ > 0:
            best = min(best, elapsed)
    spark.stop()
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--quick", action="store_true", help="200k events, one round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeouts", default="30", help="comma-separated, default 30")
    parser.add_argument("--masters", default="local[1],local[2]")
    parser.add_argument("--child", nargs=2, metavar=("PATH", "MASTER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    timeouts = [float(t) for t in args.timeouts.split(",")]
    if args.quick:
        args.events, args.rounds = 200_000, 1
    if args.child:
        path, master = args.child
        print(json.dumps({"seconds": _measure(path, master, timeouts, args.rounds)}))
        return 0
    with tempfile.TemporaryDirectory(prefix="aiowheel-bench-") as tmp:
        path = os.path.join(tmp, "events.parquet")
        start = time.perf_counter()
        count = _generate(path, args.events)
        print(f"generated {count:,} events in {time.perf_counter() - start:.1f} s", flush=True)
        rows = []
        for master in args.masters.split(","):
            result = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    path,
                    master,
                    "--rounds",
                    str(args.rounds),
                    "--timeouts",
                    args.timeouts,
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            seconds = json.loads(result.stdout.strip().splitlines()[-1])["seconds"]
            rows.append((master, seconds, count / seconds))
    print(f"\nreplay of {count:,} events, timeouts {args.timeouts}, best of {args.rounds}")
    print(f"{'master':<10} {'seconds':>9} {'events/s':>14} {'speed-up':>9}")
    for master, seconds, rate in rows:
        print(f"{master:<10} {seconds:>9.2f} {rate:>14,.0f} {rows[0][1] / seconds:>8.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
