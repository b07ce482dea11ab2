"""Timer benchmarks: the ``lifecycle`` scenario of the benchmark suite, or instruction counts.

Without ``--callgrind`` it runs ``benchmarks/suite.py --scenarios lifecycle`` -- N timers
scheduled with random delays and all fired, CPU per timer, on asyncio, uvloop and trio, with
aiowheel's pure and compiled wheel, each variant in its own process -- and prints its table. It
writes no files; ``python benchmarks/suite.py`` runs every scenario and writes
benchmarks/results/. See docs/benchmarks.md.

``--callgrind`` counts CPU instructions instead of timing, as ``bench_loop.py --callgrind``
does: each workload runs under valgrind's callgrind at ``n`` and ``2n`` operations, in a fresh
interpreter per run, and the difference of the two totals divided by the ``n`` extra operations
is the instructions per operation -- the same count on a busy machine as on an idle one, with
the interpreter's start-up and the Timer's set-up cancelled out. On both implementations (the
pure one with ``AIOWHEEL_NO_EXTENSIONS=1``), one operation each:

* *churn*: ``timer.call_later`` of 60-70 s and the ``cancel()`` of the one made 1000
  operations before (a steady 1000 pending);
* *fire*: ``timer.call_later`` of 1-20 ms, its dispatch and its no-op callback (in virtual time);
* *schedule*: ``timer.schedule`` of a plain function 1-20 ms away, and its run (a Job);
* *touch*: ``IdleTimeouts.touch`` of one of 1000 tracked keys (asyncio's own loop, whose clock
  is ``time.monotonic``).

    python benchmarks/bench_timer.py            # N = 10k, 100k and 1M
    python benchmarks/bench_timer.py --quick    # N = 2k (a smoke run)
    python benchmarks/bench_timer.py -n 50000 200000 --rounds 3
    python benchmarks/bench_timer.py --callgrind            # n = 20 000 and 40 000
    python benchmarks/bench_timer.py --callgrind -n 5000    # quicker
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections import deque
from collections.abc import Callable

import suite
from _callgrind import per_operation

from aiowheel._impl import IMPLEMENTATIONS

#: The callgrind workloads, each one operation per step (see the module docstring).
WORKLOADS = ("churn", "fire", "schedule", "touch")


def _noop() -> None:
    pass


def _delay(i: int, low: float, high: float) -> float:
    """A spread of delays from ``low`` to ``high``, the same in every run, without a random
    generator's cost."""
    return low + (high - low) * (i * 7919 % 10007) / 10007


def _countdown(count: int) -> tuple[asyncio.Future[None], Callable[[], None]]:
    """A future and a callback: the future is done once the callback has run ``count`` times."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    left = count

    def fire() -> None:
        nonlocal left
        left -= 1
        if not left and not done.done():
            done.set_result(None)

    if not count:
        done.set_result(None)
    return done, fire


async def _churn(n: int) -> None:
    from aiowheel import Timer

    async with Timer() as timer:
        call_later = timer.call_later
        pending: deque[object] = deque()
        for i in range(n):
            pending.append(call_later(_delay(i, 60, 70), _noop))
            if len(pending) > 1000:
                pending.popleft().cancel()  # type: ignore[attr-defined]
        for handle in pending:
            handle.cancel()  # type: ignore[attr-defined]


async def _fire(n: int) -> None:
    from aiowheel import Timer

    async with Timer() as timer:
        done, fire = _countdown(n)
        call_later = timer.call_later
        for i in range(n):
            call_later(_delay(i, 0.001, 0.02), fire)
        await done


async def _schedule(n: int) -> None:
    from aiowheel import Timer

    async with Timer() as timer:
        done, fire = _countdown(n)
        schedule = timer.schedule
        for i in range(n):
            schedule(_delay(i, 0.001, 0.02), fire)
        await done


async def _touch(n: int) -> None:
    from aiowheel import IdleTimeouts, Timer

    async with Timer() as timer:
        with IdleTimeouts(timer, 30, _noop) as idle:
            touch = idle.touch
            for key in range(1000):
                touch(key)
            for i in range(n):
                touch(i % 1000)


def run_child(workload: str, n: int) -> None:
    """Run ``workload`` with ``n`` operations, in this process."""
    from aiowheel.testing import VirtualTimeLoop

    if workload in ("fire", "schedule"):
        loop: asyncio.AbstractEventLoop = VirtualTimeLoop()
    else:
        loop = asyncio.new_event_loop()
    body = {"churn": _churn, "fire": _fire, "schedule": _schedule, "touch": _touch}[workload]
    try:
        loop.run_until_complete(body(n))
    finally:
        loop.close()


def _child_command(workload: str) -> Callable[[int], list[str]]:
    """The command that runs ``workload`` with ``n`` operations in a child."""
    return lambda n: [sys.executable, __file__, "--child", workload, "-n", str(n)]


def _environ(implementation: str) -> dict[str, str]:
    return os.environ | {"AIOWHEEL_NO_EXTENSIONS": "1" if implementation == "pure" else ""}


def callgrind_report(n: int, workloads: list[str], implementations: list[str]) -> None:
    """Instructions per operation, by the n / 2n difference, per workload and implementation."""
    print(f"instructions per operation (callgrind, n = {n:,} and {2 * n:,})")
    header = f"{'workload':<10}" + "".join(f"{name:>12}" for name in implementations)
    print(header)
    print("-" * len(header))
    for workload in workloads:
        cells = [
            per_operation(_child_command(workload), n, _environ(implementation))
            for implementation in implementations
        ]
        print(f"{workload:<10}" + "".join(f"{cell:>12,.0f}" for cell in cells))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, nargs="+", help="timer counts (default: the suite's)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per size (medians shown)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a smoke run: N = 2k")
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="count instructions per operation under callgrind (n and 2n) instead of timing",
    )
    parser.add_argument(
        "--workloads",
        nargs="+",
        choices=WORKLOADS,
        default=list(WORKLOADS),
        help="callgrind workloads (all)",
    )
    parser.add_argument(
        "--implementations",
        nargs="+",
        choices=IMPLEMENTATIONS,
        default=list(IMPLEMENTATIONS),
        help="callgrind implementations (both)",
    )
    parser.add_argument("--child", choices=WORKLOADS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        run_child(args.child, args.n[0])
        return 0
    if args.callgrind:
        callgrind_report(args.n[0] if args.n else 20_000, args.workloads, args.implementations)
        return 0
    forwarded = ["--scenarios", "lifecycle", "--rounds", str(args.rounds), "--seed", str(args.seed)]
    if args.quick:
        forwarded.append("--quick")
    if args.n:
        forwarded += ["--sizes", *map(str, args.n)]
    return suite.main(forwarded)


if __name__ == "__main__":
    sys.exit(main())
