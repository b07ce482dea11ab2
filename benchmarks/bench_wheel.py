"""Wheel benchmark: CPU time per entry to add N deadlines and drain them, pure vs compiled.

Both implementations of :class:`~aiowheel.HierarchicalWheel` (:mod:`aiowheel._wheel` and
:mod:`aiowheel._cwheel`) get the same N deadlines, uniform over ``--spread`` seconds with a 1 ms
tick, added with ``add`` (which also makes the Entry) and drained the way the Timer drives the
wheel (``advance_entries`` at each ``next_deadline``); then, on a fresh wheel, the same entries
made beforehand are filed with ``add_entry``, as the Timer files its handles. Next to them, the
floor: the cheapest Python-level call into C per timer, a dict store ``d[key] = value`` in the
same kind of loop, so a wheel operation can be read as a multiple of it.

Each variant runs in a fresh subprocess (no shared heap or warm caches), variants alternate over
``--rounds`` rounds and the table shows medians and ratios from the same run. Machines here are
shared and noisy: compare ratios within one run. Never used to fail a test on speed.

    python benchmarks/bench_wheel.py            # N = 100k and 1M, 3 rounds
    python benchmarks/bench_wheel.py --quick    # N = 10k, 1 round (a smoke run)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from typing import Any

VARIANTS = ["pure wheel", "compiled wheel", "floor: dict store"]


def measure(variant: str, n: int, spread: float, seed: int) -> dict[str, float]:
    """CPU seconds per entry for each phase of ``variant`` (in this process)."""
    rng = random.Random(seed)
    deadlines = [rng.uniform(0, spread) for _ in range(n)]
    if variant == "floor: dict store":
        store: dict[int, float] = {}
        start = time.process_time()
        for key, deadline in enumerate(deadlines):
            store[key] = deadline  # noqa: PERF403 -- one store per timer is the point
        return {"add": (time.process_time() - start) / n}
    module: Any
    if variant == "pure wheel":
        from aiowheel import _wheel as module
    else:
        from aiowheel import _cwheel as module
    wheel = module.HierarchicalWheel(tick=0.001, wheel_size=64, start=0.0)
    add = wheel.add
    start = time.process_time()
    for deadline in deadlines:
        add(deadline, None)
    added = time.process_time()
    advance_entries = wheel.advance_entries
    next_deadline = wheel.next_deadline
    out = 0
    while (now := next_deadline()) is not None:
        out += len(advance_entries(now))
    drained = time.process_time()
    assert out == n
    entries = [module.Entry(deadline, None) for deadline in deadlines]
    add_entry = module.HierarchicalWheel(tick=0.001, wheel_size=64, start=0.0).add_entry
    start_entries = time.process_time()
    for entry in entries:
        add_entry(entry)
    entries_added = time.process_time()
    return {
        "add": (added - start) / n,
        "drain": (drained - added) / n,
        "add_entry": (entries_added - start_entries) / n,
    }


def _run_variant(variant: str, n: int, spread: float, seed: int) -> dict[str, float]:
    command = [sys.executable, __file__, "--child", variant, "-n", str(n)]
    command += ["--spread", str(spread), "--seed", str(seed)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, nargs="*", default=None, help="entry counts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--spread", type=float, default=2.0, help="deadlines in [0, spread) s")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a smoke run: N=10k, 1 round")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.n[0], args.spread, args.seed)))
        return
    try:
        from aiowheel import _cwheel  # noqa: F401
    except ImportError:
        variants = [name for name in VARIANTS if name != "compiled wheel"]
        print("(the compiled wheel is not built: pure only)\n")
    else:
        variants = VARIANTS
    sizes = args.n or ([10_000] if args.quick else [100_000, 1_000_000])
    rounds = 1 if args.quick else args.rounds
    print(f"Wheel add + drain, deadlines uniform in [0, {args.spread}) s, tick 1 ms, 64 slots;")
    print(f"median of {rounds} round(s), each variant in its own process.\n")
    header = f"| {'N':>9} | {'variant':<18} | {'add':>5} | {'drain':>5} | {'add+drain':>9} |"
    print(header + f" {'vs pure':>7} | {'add_entry':>9} | {'add_entry vs floor':>18} |")
    print(f"| {'-' * 9}:| {'-' * 18} | {'-' * 5}:| {'-' * 5}:| {'-' * 9}:| {'-' * 7}:|", end="")
    print(f" {'-' * 9}:| {'-' * 18}:|")
    phases = ("add", "drain", "add_entry")
    for n in sizes:
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
        for _ in range(rounds):
            for name in variants:
                samples[name].append(_run_variant(name, n, args.spread, args.seed))
        medians = {
            name: {
                phase: statistics.median(sample.get(phase, 0.0) for sample in runs) * 1e9
                for phase in phases
            }
            for name, runs in samples.items()
        }
        floor = medians["floor: dict store"]["add"]
        pure_total = medians["pure wheel"]["add"] + medians["pure wheel"]["drain"]
        for name in variants:
            add, drain, add_entry = (medians[name][phase] for phase in phases)
            total = add + drain
            if name == "floor: dict store":
                print(f"| {n:>9,} | {name:<18} | {add:>5.0f} | {'-':>5} | {total:>9.0f} |", end="")
                print(f" {total / pure_total:>6.2f}x | {'-':>9} | {'1.00x':>18} |")
                continue
            print(
                f"| {n:>9,} | {name:<18} | {add:>5.0f} | {drain:>5.0f} | {total:>9.0f} |"
                f" {total / pure_total:>6.2f}x | {add_entry:>9.0f} | {add_entry / floor:>17.2f}x |"
            )
    print("\nTimes in ns per entry (CPU); the floor's add is one dict store.")


if __name__ == "__main__":
    main()
