"""Timer lifecycle benchmark: now the ``lifecycle`` scenario of the benchmark suite.

Kept so that this command line still works: it runs ``benchmarks/suite.py --scenarios
lifecycle`` -- N timers scheduled with random delays and all fired, CPU per timer, on asyncio,
uvloop and trio, with aiowheel's pure and compiled wheel, each variant in its own process -- and
prints its table. It writes no files; ``python benchmarks/suite.py`` runs every scenario and
writes benchmarks/results/. See docs/benchmarks.md.

    python benchmarks/bench_timer.py            # N = 10k, 100k and 1M
    python benchmarks/bench_timer.py --quick    # N = 2k (a smoke run)
    python benchmarks/bench_timer.py -n 50000 200000 --rounds 3
"""

from __future__ import annotations

import argparse
import sys

import suite


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, nargs="+", help="timer counts (default: the suite's)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per size (medians shown)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a smoke run: N = 2k")
    args = parser.parse_args(argv)
    forwarded = ["--scenarios", "lifecycle", "--rounds", str(args.rounds), "--seed", str(args.seed)]
    if args.quick:
        forwarded.append("--quick")
    if args.n:
        forwarded += ["--sizes", *map(str, args.n)]
    return suite.main(forwarded)


if __name__ == "__main__":
    sys.exit(main())
