"""Plain event loop vs wheel-backed loop on an application-shaped workload, side by side.

The workload runs once per variant and round, each time in a fresh subprocess so that no
variant inherits another's heap. ``--workload app`` (the default):

* ``n`` request tasks, each making ``requests`` requests: a short await (a few loop passes, as
  an I/O round trip would be) under ``asyncio.timeout``, then another under
  ``asyncio.wait_for``, with timeouts of 30-120 s that are never reached -- each timer is made
  and cancelled;
* ``n`` sleeping tasks, each in ``asyncio.sleep`` for ``longest_sleep / 10`` to
  ``longest_sleep`` -- each timer fires.

``--workload timers`` isolates the timers: ``n`` plain ``loop.call_later`` calls, 1000 per loop
pass; four in five are timeouts (30-120 s) cancelled 50 passes later, so some 40 000 wait at
any time, and one in five fire (``longest_sleep / 10`` to ``longest_sleep``).

``--workload split`` times the two halves of a timer's life apart, per timer: *churn* -- ``3n``
``loop.call_later`` of 30-120 s, 1000 per loop pass, each cancelled 50 passes later (schedule +
cancel, the timeouts that never fire) -- then *fire* -- ``3n / 5`` timers of ``longest_sleep /
10`` to ``longest_sleep`` that all fire (schedule + dispatch + run a no-op callback). CPU per
timer of each phase, in µs.

``--callgrind`` counts CPU instructions instead of timing: each variant runs under valgrind's
callgrind at ``n`` and ``2n`` operations, and the difference of the two totals divided by the
``n`` extra operations is the instructions per operation -- the same count on a busy machine as
on an idle one, with the interpreter's start-up and the loop's set-up cancelled out. Two
workloads, one operation each:

* *churn*: a ``loop.call_later`` of 60-70 s, cancelled 50 loop passes later (100 timers per
  pass), and for one operation in five also a short timer (1-20 ms, both sides of
  ``min_delay``) that fires;
* *app*: a request task making one request under ``asyncio.timeout`` and one under
  ``asyncio.wait_for`` (3,000-12,000 s, never reached: a hundred times the timed workload's,
  since under valgrind minutes of real time pass while tens of thousands of tasks are set up),
  plus half a sleeping task (0.1-1 s).

Variants: asyncio's default loop, the same with the wheel (``aiowheel.loop``), uvloop, and
uvloop with the wheel. For each: CPU time of the workload (``time.process_time``), peak RSS
growth (``ru_maxrss`` at the end minus RSS at the start, in its own process) and, with
``--trace``, the Python heap's peak (``tracemalloc``, in one more process in the first round:
tracing slows everything down several times). The variants alternate over ``--rounds`` rounds
and the table shows medians; ratios are wheel / plain. Machines here are shared and noisy:
compare ratios within one run, not absolute figures across runs. Nothing here asserts speed.

    python benchmarks/bench_loop.py            # n = 100 000, 3 rounds
    python benchmarks/bench_loop.py -n 20000 --rounds 5 --trace
    python benchmarks/bench_loop.py --quick    # a smoke run
    python benchmarks/bench_loop.py --workload timers --rounds 5
    python benchmarks/bench_loop.py --workload split --rounds 5   # churn and fire per timer
    python benchmarks/bench_loop.py --callgrind -n 2000   # instructions per operation
    AIOWHEEL_NO_EXTENSIONS=1 python benchmarks/bench_loop.py   # on the pure-Python wheel
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import random
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

# The benchmarks' own helper modules sit beside this script: found also where Python leaves the
# script's directory off sys.path (PYTHONSAFEPATH=1, as in the test command's fallback-build run).
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _callgrind import per_operation

import aiowheel
from aiowheel.loop import WheelLoop, new_event_loop, new_uvloop_event_loop

VARIANTS = ["asyncio", "asyncio+wheel", "uvloop", "uvloop+wheel"]
PAIRS = [("asyncio", "asyncio+wheel"), ("uvloop", "uvloop+wheel")]


def make_loop(variant: str) -> asyncio.AbstractEventLoop:
    """A new loop of ``variant``: one of :data:`VARIANTS`."""
    if variant == "asyncio":
        return asyncio.new_event_loop()
    if variant == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    if variant == "uvloop+wheel":
        return new_uvloop_event_loop()
    if variant == "asyncio+wheel":
        return new_event_loop()
    raise ValueError(f"unknown loop variant {variant!r}; expected one of {', '.join(VARIANTS)}")


async def short_await() -> None:
    """A stand-in for an I/O round trip: a few passes of the loop."""
    for _ in range(3):
        await asyncio.sleep(0)


async def request_task(requests: int, rng: random.Random, far: float = 1.0) -> None:
    for _ in range(requests):
        async with asyncio.timeout(far * rng.uniform(30, 120)):
            await short_await()
        await asyncio.wait_for(short_await(), timeout=far * rng.uniform(30, 120))


#: How much further the callgrind app's timeouts are: under valgrind, setting up tens of
#: thousands of tasks takes minutes of real time on a loaded machine, and a 30 s timeout,
#: which must never be reached, would fire (each is still made and cancelled the same way).
CALLGRIND_FAR = 100.0


async def workload(
    n: int, requests: int, longest_sleep: float, sleepers: int | None = None, far: float = 1.0
) -> None:
    """``n`` request tasks and ``sleepers`` (default ``n``) sleeping tasks; timeouts ``far`` x."""
    rng = random.Random(1)
    sleepers = n if sleepers is None else sleepers
    async with asyncio.TaskGroup() as group:
        for i in range(n):
            group.create_task(request_task(requests, rng, far))
            if i < sleepers:
                group.create_task(asyncio.sleep(rng.uniform(longest_sleep / 10, longest_sleep)))


#: A timeout of the timers workloads is cancelled this many loop passes after it was made.
CANCEL_AFTER_PASSES = 50


def countdown(count: int) -> tuple[asyncio.Future[None], Callable[[], None]]:
    """A future and a callback: the future is done once the callback has run ``count`` times."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    left = count

    def fire() -> None:
        nonlocal left
        left -= 1
        if not left:
            done.set_result(None)

    return done, fire


async def cancel_later(batches: Iterable[list[asyncio.TimerHandle]]) -> None:
    """One loop pass per batch of timeouts; each batch is cancelled ``CANCEL_AFTER_PASSES``
    passes after it was made, the last ones at the end."""
    pending: deque[list[asyncio.TimerHandle]] = deque()
    for batch in batches:
        pending.append(batch)
        if len(pending) > CANCEL_AFTER_PASSES:
            for handle in pending.popleft():
                handle.cancel()
        await asyncio.sleep(0)
    for batch in pending:
        for handle in batch:
            handle.cancel()


async def timer_workload(n: int, longest_sleep: float) -> None:
    loop = asyncio.get_running_loop()
    rng = random.Random(1)
    to_fire = len(range(0, n, 5))
    all_fired, fire = countdown(to_fire)

    def batch_at(start: int) -> list[asyncio.TimerHandle]:
        batch = []
        for i in range(start, min(start + 1000, n)):
            if i % 5:
                batch.append(loop.call_later(rng.uniform(30, 120), fire))
            else:
                loop.call_later(rng.uniform(longest_sleep / 10, longest_sleep), fire)
        return batch

    await cancel_later(batch_at(start) for start in range(0, n, 1000))
    if to_fire:
        await all_fired


async def churn_workload(n: int) -> None:
    """The callgrind churn: ``n`` timeouts of 60-70 s, 100 per loop pass, each cancelled 50
    passes later; every fifth operation also a short timer (1-20 ms) that fires."""
    loop = asyncio.get_running_loop()
    rng = random.Random(1)
    all_fired, fire = countdown(len(range(0, n, 5)))

    def noop() -> None:
        pass

    def batch_at(start: int) -> list[asyncio.TimerHandle]:
        batch = []
        for i in range(start, min(start + 100, n)):
            batch.append(loop.call_later(rng.uniform(60, 70), noop))
            if i % 5 == 0:
                loop.call_later(rng.uniform(0.001, 0.02), fire)
        return batch

    await cancel_later(batch_at(start) for start in range(0, n, 100))
    if n:
        await all_fired


async def split_workload(n: int, longest_sleep: float) -> dict[str, float]:
    """CPU µs per timer of the churn phase (``3n`` schedule + cancel) and of the fire phase
    (``3n / 5`` schedule + fire)."""
    loop = asyncio.get_running_loop()
    rng = random.Random(1)
    churn, fired = 3 * n, 3 * n // 5

    def noop() -> None:
        pass

    cpu = time.process_time()
    await cancel_later(
        [loop.call_later(rng.uniform(30, 120), noop) for _ in range(min(1000, churn - start))]
        for start in range(0, churn, 1000)
    )
    churn_cpu = time.process_time() - cpu

    done, fire = countdown(fired)
    cpu = time.process_time()
    for _ in range(fired):
        loop.call_later(rng.uniform(longest_sleep / 10, longest_sleep), fire)
    await done
    fire_cpu = time.process_time() - cpu
    return {"churn_us": churn_cpu / churn * 1e6, "fire_us": fire_cpu / fired * 1e6}


def current_rss_kib() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() // 1024


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run the workload once on a fresh loop of ``args.child``; return what was measured."""
    loop = make_loop(args.child)
    try:
        rss_before = current_rss_kib()
        if args.trace:
            tracemalloc.start()
        cpu = time.process_time()
        phases: dict[str, float] = {}
        if args.workload == "timers":
            loop.run_until_complete(timer_workload(args.n, args.longest_sleep))
        elif args.workload == "churn":
            loop.run_until_complete(churn_workload(args.n))
        elif args.workload == "app1":  # the callgrind app: one request each, half a sleeper
            loop.run_until_complete(
                workload(args.n, 1, args.longest_sleep, args.n // 2, CALLGRIND_FAR)
            )
        elif args.workload == "split":
            phases = loop.run_until_complete(split_workload(args.n, args.longest_sleep))
        else:
            loop.run_until_complete(workload(args.n, args.requests, args.longest_sleep))
        result: dict[str, Any] = {"cpu": time.process_time() - cpu, **phases}
        if args.trace:
            result["traced_peak_kib"] = tracemalloc.get_traced_memory()[1] // 1024
            tracemalloc.stop()
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
            result["rss_growth_kib"] = peak - rss_before
        if isinstance(loop, WheelLoop):
            result["stats"] = dataclasses.asdict(loop.wheel_stats())
        return result
    finally:
        loop.close()


def in_subprocess(args: argparse.Namespace, variant: str, *, trace: bool) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", variant, "-n", str(args.n)]
    command += ["--requests", str(args.requests), "--longest-sleep", str(args.longest_sleep)]
    command += ["--workload", args.workload]
    if trace:
        command.append("--trace")
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median CPU time and RSS over ``runs``, the CPU times' range; the traced peak and
    the wheel stats as measured (once)."""
    result: dict[str, Any] = {
        figure: statistics.median(run[figure] for run in runs)
        for figure in ("cpu", "rss_growth_kib", "churn_us", "fire_us")
        if figure in runs[0]
    }
    for figure in ("churn_us", "fire_us"):
        if figure in runs[0]:
            result[f"{figure}_range"] = (min(r[figure] for r in runs), max(r[figure] for r in runs))
    result["cpu_range"] = (min(run["cpu"] for run in runs), max(run["cpu"] for run in runs))
    if "traced_peak_kib" in runs[0]:
        result["traced_peak_kib"] = runs[0]["traced_peak_kib"]
    if "stats" in runs[-1]:
        result["stats"] = runs[-1]["stats"]
    return result


def have_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401 - only whether it imports
    except ImportError:
        return False
    return True


def ratio(wheel: float, plain: float) -> str:
    return f"{wheel / plain:.2f}" if plain else "-"


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    if args.workload == "timers":
        shape = f"{args.n:,} loop.call_later, 4 in 5 cancelled, 1 in 5 fired"
    elif args.workload == "split":
        shape = (
            f"churn: {3 * args.n:,} loop.call_later of 30-120 s, each cancelled 50 passes later; "
            f"fire: {3 * args.n // 5:,} that fire"
        )
    else:
        shape = (
            f"{args.n:,} request tasks x {args.requests} requests (asyncio.timeout + "
            f"asyncio.wait_for each) + {args.n:,} sleeping tasks"
        )
    wheel = (
        "compiled"
        if aiowheel.IMPLEMENTATION == "compiled"
        else "pure Python (AIOWHEEL_NO_EXTENSIONS)"
    )
    print(f"n = {args.n:,}: {shape}; medians of {args.rounds} round(s); the wheel: {wheel}")
    header = (
        f"{'variant':<15}{'CPU s':>9}{'(min-max)':>15}{'peak RSS MiB':>14}{'tracemalloc MiB':>17}"
    )
    print(header)
    print("-" * len(header))
    for variant, result in results.items():
        traced = result.get("traced_peak_kib")
        traced_text = f"{traced / 1024:>17.1f}" if traced is not None else f"{'-':>17}"
        rss = result["rss_growth_kib"] / 1024
        low, high = result["cpu_range"]
        spread = f"({low:.2f}-{high:.2f})"
        print(f"{variant:<15}{result['cpu']:>9.2f}{spread:>15}{rss:>14.1f}{traced_text}")
    print()
    for plain, wheel in PAIRS:
        if plain not in results or wheel not in results:
            continue
        a, b = results[plain], results[wheel]
        parts = [
            f"CPU {ratio(b['cpu'], a['cpu'])}",
            f"peak RSS {ratio(b['rss_growth_kib'], a['rss_growth_kib'])}",
        ]
        if "traced_peak_kib" in a:
            parts.append(f"tracemalloc {ratio(b['traced_peak_kib'], a['traced_peak_kib'])}")
        print(f"{wheel} / {plain}: " + ", ".join(parts))
    if args.workload == "split":
        print()
        print(f"{'CPU per timer, µs':<18}{'churn':>8}{'(min-max)':>16}{'fire':>8}{'(min-max)':>16}")
        for variant, result in results.items():
            churn_low, churn_high = result["churn_us_range"]
            fire_low, fire_high = result["fire_us_range"]
            print(
                f"{variant:<18}{result['churn_us']:>8.3f}"
                f"{f' ({churn_low:.3f}-{churn_high:.3f})':>16}{result['fire_us']:>8.3f}"
                f"{f' ({fire_low:.3f}-{fire_high:.3f})':>16}"
            )
        for plain, wheel in PAIRS:
            if plain in results and wheel in results:
                a, b = results[plain], results[wheel]
                print(
                    f"{wheel} / {plain}: churn {ratio(b['churn_us'], a['churn_us'])}, "
                    f"fire {ratio(b['fire_us'], a['fire_us'])}"
                )
    for variant, result in results.items():
        if "stats" in result:
            stats = result["stats"]
            print(
                f"{variant}: {stats['wheel_timers']:,} timers on the wheel, "
                f"{stats['base_timers']:,} on the base loop, "
                f"{stats['cancelled']:,} cancelled, {stats['driver_wakeups']:,} driver passes"
            )


#: The callgrind workloads: name in the report, the child's --workload.
CALLGRIND_WORKLOADS = {"churn": "churn", "app": "app1"}


def _child_command(
    args: argparse.Namespace, variant: str, workload: str
) -> Callable[[int], list[str]]:
    """The command that runs ``workload`` with ``n`` operations on ``variant`` in a child."""
    return lambda n: [
        *(sys.executable, __file__, "--child", variant, "-n", str(n)),
        *("--workload", workload, "--longest-sleep", str(args.longest_sleep)),
    ]


def callgrind_report(args: argparse.Namespace, variants: list[str]) -> None:
    """Instructions per operation, by the n / 2n difference, for each workload and variant."""
    wheel = (
        "compiled"
        if aiowheel.IMPLEMENTATION == "compiled"
        else "pure Python (AIOWHEEL_NO_EXTENSIONS)"
    )
    print(f"instructions per operation (callgrind, n = {args.n:,} and {2 * args.n:,}); {wheel}")
    header = f"{'workload':<10}" + "".join(f"{variant:>16}" for variant in variants)
    print(header)
    print("-" * len(header))
    for name, workload in CALLGRIND_WORKLOADS.items():
        per_op = {
            variant: per_operation(_child_command(args, variant, workload), args.n)
            for variant in variants
        }
        cells = []
        for variant in variants:
            plain = variant.removesuffix("+wheel")
            share = f" ({ratio(per_op[variant], per_op[plain])}x)" if plain != variant else ""
            cells.append(f"{per_op[variant]:,.0f}{share}")
        print(f"{name:<10}" + "".join(f"{cell:>16}" for cell in cells))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workload", choices=["app", "timers", "split", "churn", "app1"], default="app"
    )
    parser.add_argument("-n", type=int, default=100_000, help="tasks of each kind (100 000)")
    parser.add_argument("--requests", type=int, default=2, help="requests per request task (2)")
    parser.add_argument(
        "--longest-sleep", type=float, default=1.0, help="longest sleep, seconds (1.0)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="runs of every variant (3)")
    parser.add_argument("--trace", action="store_true", help="measure tracemalloc's peak too")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: small n, short sleeps, one round"
    )
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="count instructions per operation under callgrind (n and 2n) instead of timing",
    )
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        print(json.dumps(measure(args)))
        return
    if args.quick:
        args.n, args.requests, args.longest_sleep, args.rounds = 500, 2, 0.05, 1
    variants = VARIANTS if have_uvloop() else VARIANTS[:2]
    if args.callgrind:
        callgrind_report(args, variants)
        return
    runs: dict[str, list[dict[str, Any]]] = {variant: [] for variant in variants}
    for round_ in range(args.rounds):
        for variant in variants:
            run = in_subprocess(args, variant, trace=False)
            # Traced once: memory barely varies between runs, and tracing is slow (its CPU time
            # is the tracer's as much as the loop's, so it is not reported).
            if round_ == 0 and args.trace:
                run["traced_peak_kib"] = in_subprocess(args, variant, trace=True)["traced_peak_kib"]
            runs[variant].append(run)
    report({variant: median_of(runs[variant]) for variant in variants}, args)


if __name__ == "__main__":
    main()
