"""Timer lifecycle benchmark: CPU time per timer, schedule -> fire, aiowheel vs the loop's own.

For N timers with random delays spread over ``--spread`` seconds, each variant schedules them all
and waits until every callback has run; the figure is process CPU time divided by N. Variants:

* ``asyncio loop.call_at`` and ``asyncio + aiowheel.Timer.call_at`` on the default loop;
* ``uvloop loop.call_at`` and ``uvloop + aiowheel.Timer.call_at`` on uvloop (if installed).

Each variant runs in a fresh subprocess, so one cannot warm or fragment the heap for another, and
the variants alternate over ``--rounds`` rounds; the table shows the median per variant and the
ratio to the loop's own ``call_at`` on the same loop. Machines here are shared and noisy: compare
ratios within one run, not absolute times across runs. Never used to fail a test on speed.

    python benchmarks/bench_timer.py            # N = 100k and 1M, 3 rounds
    python benchmarks/bench_timer.py --quick    # N = 10k, 1 round (a smoke run)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

VARIANTS = {
    "asyncio loop.call_at": ("asyncio", "loop"),
    "asyncio + Timer.call_at": ("asyncio", "timer"),
    "uvloop loop.call_at": ("uvloop", "loop"),
    "uvloop + Timer.call_at": ("uvloop", "timer"),
}


def lifecycle(n: int, spread: float, seed: int, scheduler: str) -> float:
    """CPU seconds per timer to schedule ``n`` timers and run them all (in this process)."""
    import aiowheel

    delays = [random.Random(seed).uniform(0, spread) for _ in range(n)]

    async def main() -> float:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        remaining = n

        def callback() -> None:
            nonlocal remaining
            remaining -= 1
            if remaining == 0:
                done.set_result(None)

        async with aiowheel.Timer() as timer:
            call_at: Callable[..., object] = loop.call_at if scheduler == "loop" else timer.call_at
            start = time.process_time()
            now = loop.time()
            for delay in delays:
                call_at(now + delay, callback)
            await done
            return (time.process_time() - start) / n

    return asyncio.run(main())


def _child(args: argparse.Namespace) -> None:
    loop_name, scheduler = VARIANTS[args.child]
    if loop_name == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    print(json.dumps(lifecycle(args.n, args.spread, args.seed, scheduler)))


def _run_variant(name: str, n: int, spread: float, seed: int) -> float:
    command = [sys.executable, __file__, "--child", name, "-n", str(n)]
    command += ["--spread", str(spread), "--seed", str(seed)]
    out = subprocess.run(
        command,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(json.loads(out))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, nargs="*", default=None, help="timer counts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--spread", type=float, default=2.0, help="delays in [0, spread) s")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a smoke run: N=10k, 1 round")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        args.n = args.n[0]
        _child(args)
        return
    sizes = args.n or ([10_000] if args.quick else [100_000, 1_000_000])
    rounds = 1 if args.quick else args.rounds
    try:
        import uvloop  # noqa: F401
    except ImportError:
        variants = [name for name in VARIANTS if not name.startswith("uvloop")]
    else:
        variants = list(VARIANTS)
    print(f"Timer lifecycle (schedule -> fire), delays uniform in [0, {args.spread}) s,")
    print(f"median of {rounds} round(s), each variant in its own process.\n")
    print(f"| {'N':>9} | {'variant':<24} | {'CPU us/timer':>12} | {'vs loop.call_at':>15} |")
    print(f"| {'-' * 9}:| {'-' * 24} | {'-' * 12}:| {'-' * 15}:|")
    for n in sizes:
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(rounds):
            for name in variants:
                samples[name].append(_run_variant(name, n, args.spread, args.seed))
        medians = {name: statistics.median(values) for name, values in samples.items()}
        for name in variants:
            loop_name = VARIANTS[name][0]
            base = medians[f"{loop_name} loop.call_at"]
            ratio = medians[name] / base
            print(f"| {n:>9,} | {name:<24} | {medians[name] * 1e6:>12.2f} | {ratio:>14.2f}x |")


if __name__ == "__main__":
    main()
