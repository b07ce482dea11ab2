"""The benchmark suite: aiowheel against asyncio, uvloop and trio, side by side in one run.

    python benchmarks/suite.py              # all scenarios at N = 10k, 100k, 1M (about 10 min)
    python benchmarks/suite.py --quick      # a smoke run at N = 2k (about 30 s)
    python benchmarks/suite.py --scenarios churn touch --sizes 100000 --rounds 3
    python benchmarks/suite.py --huge       # memory also at 10M timers, for the wheel only
    python benchmarks/suite.py --callgrind --scenarios keepalive   # instructions per cycle
    python benchmarks/suite.py --scenarios keepalive --variants asyncio   # names containing it

Eight scenarios (benchmarks/_scenarios.py says exactly what each measures): lifecycle, churn,
idle touch, memory, lateness, idle wake-ups, the floor and keepalive (idle connections at
scale). Each variant runs at each size in a
fresh child process (this script with ``--child``), so none inherits another's heap; the pure
and compiled wheels are chosen per child with ``AIOWHEEL_NO_EXTENSIONS``. With ``--rounds R``
the variants alternate R times and the tables show medians, with the lowest and highest
round of each variant's main figure.

Prints one markdown table per scenario (figures and ratios side by side), then the headline and
the targets of issues 5 and 30, and writes ``results.md``, ``results.json`` and PNG plots
(matplotlib, the ``spark`` extra) to ``--out``: by default ``benchmarks/results`` for a full
run; a ``--quick`` run, or one narrowed with ``--scenarios``, ``--sizes`` or ``--variants``,
writes only where ``--out`` says, so it never replaces the full results. Progress goes to stderr.

The machine may be shared and noisy: compare ratios within one run, not absolute figures across
runs. Nothing here passes or fails on speed; the exit status is 1 only if a measurement failed.

``--callgrind`` counts CPU instructions instead, for the scenarios that time a count of
operations after an untimed set-up (churn, touch, keepalive): each variant's child runs under
valgrind's callgrind with ``ops`` and with ``2 ops`` operations (by default N = 20k and 5k
operations; with ``--quick`` N = 2k and 500), and the difference over ``ops`` is the
instructions per operation (benchmarks/_callgrind.py, as ``bench_loop.py --callgrind``) -- the
same count on a loaded machine as on an idle one. It prints the scenarios' tables only, and
writes ``callgrind.json`` where ``--out`` says.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from _callgrind import per_operation
from _report import (
    TARGETS_TITLE,
    CaseResult,
    Results,
    headline_table,
    plot,
    results_json,
    results_markdown,
    scenario_table,
    targets_table,
    timer_lateness_table,
)
from _scenarios import (
    CALLGRIND,
    DEFAULT,
    HUGE,
    QUICK,
    QUICK_CALLGRIND,
    SCENARIO_NAMES,
    SCENARIOS,
    Case,
    Scenario,
    Variant,
    child_env,
    child_spec,
    run_child,
)

RESULTS = Path(__file__).resolve().parent / "results"
# Memory a child needs per timer in the --huge memory case, tracemalloc's own bookkeeping
# included (measured: 1.1 kB at the peak, pure wheel), to skip the case rather than push a
# shared machine into swapping or the OOM killer.
HUGE_BYTES_PER_TIMER = 1_300


class ChildFailed(Exception):
    """A child process exited with an error; the message is the last line of its stderr."""


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.child is not None:
        print(run_child(args.child), flush=True)
        # Skip the interpreter's teardown: freeing millions of objects takes seconds and
        # measures nothing (the loops are left open for the same reason, see _scenarios._run).
        os._exit(0)
    if args.callgrind:
        settings = QUICK_CALLGRIND if args.quick else CALLGRIND
    else:
        settings = QUICK if args.quick else DEFAULT
    settings = replace(
        settings,
        sizes=tuple(args.sizes) if args.sizes else settings.sizes,
        rounds=args.rounds,
        seed=args.seed,
        huge=args.huge,
        capped=not args.sizes,
    )
    scenarios = [s for s in SCENARIOS if s.name in (args.scenarios or SCENARIO_NAMES)]
    if args.callgrind:
        scenarios = [s.counted() for s in scenarios if s.countable]
        if not scenarios:
            countable = ", ".join(s.name for s in SCENARIOS if s.countable)
            parser.error(f"--callgrind counts the instructions of {countable} only")
    narrowed = args.quick or args.scenarios or args.sizes or args.variants or args.callgrind
    out: Path | None = args.out if args.out is not None else None if narrowed else RESULTS
    given = sys.argv[1:] if argv is None else argv
    results = Results(" ".join(["python benchmarks/suite.py", *given]), _environment(), {})
    results.settings = asdict(settings)
    started = time.monotonic()
    for scenario in scenarios:
        notes = results.notes.setdefault(scenario.name, [])
        cases = []
        for case in scenario.cases(scenario, settings):
            variants = []
            for variant in case.variants:
                if args.variants and not any(part in variant.name for part in args.variants):
                    continue
                why = _why_missing(variant)
                if why is None:
                    variants.append(variant)
                elif f"{variant.name}: skipped, {why}" not in notes:
                    notes.append(f"{variant.name}: skipped, {why}")
            if case.n >= HUGE:
                if not _memory_allows(case.n):
                    notes.append(f"N = {case.label} skipped: not enough free memory")
                    continue
                notes.append(f"N = {case.label}: aiowheel's variants only, so no ratios")
            cases.append(_run_case(scenario, case, variants, started))
        if settings.counting:
            notes.append(
                f"instructions per operation: callgrind runs of {settings.ops:,} and "
                f"{2 * settings.ops:,} operations after the same set-up, their difference "
                f"over {settings.ops:,}"
            )
        results.scenarios[scenario.name] = cases
        if scenario.name == "lateness":
            notes += _slack_notes(cases)
        print(f"\n## {scenario.title}\n\n{scenario_table(scenario, cases)}", flush=True)
        if scenario.name == "lateness":
            print(f"\nThe Timer's own lateness histogram:\n\n{timer_lateness_table(cases)}")
        for note in notes:
            print(f"- {note}")
    results.runtime = time.monotonic() - started
    results.environment["load_end"] = _load()
    if settings.counting:
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / "callgrind.json").write_text(results_json(results))
            _progress(started, f"wrote callgrind.json to {out}")
        _progress(started, "done")
        return _exit_status(results)
    print(f"\n## Headline\n\n{headline_table(results)}")
    print(f"\n## {TARGETS_TITLE}\n\n{targets_table(results)}", flush=True)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        plots = plot(results, out)
        (out / "results.md").write_text(results_markdown(results, plots))
        (out / "results.json").write_text(results_json(results))
        written = ", ".join(["results.md", "results.json", *plots])
        _progress(started, f"wrote {written} to {out}")
    _progress(started, "done")
    return _exit_status(results)


def _exit_status(results: Results) -> int:
    failed = any(case.errors for cases in results.scenarios.values() for case in cases)
    return 1 if failed else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: N = 2k, short waits")
    parser.add_argument("--sizes", type=int, nargs="+", metavar="N", help="timer counts")
    parser.add_argument(
        "--scenarios",
        nargs="+",
        choices=SCENARIO_NAMES,
        metavar="NAME",
        help=f"run only these, of: {', '.join(SCENARIO_NAMES)}",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        metavar="TEXT",
        help="run only the variants whose name contains one of these (e.g. 'uvloop+wheel')",
    )
    parser.add_argument("--rounds", type=int, default=1, help="rounds per case (medians shown)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the random delays and keys")
    parser.add_argument(
        "--huge", action="store_true", help=f"memory also at N = {HUGE:,} (wheel variants only)"
    )
    parser.add_argument("--out", type=Path, help="directory for results.md, .json and plots")
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="count CPU instructions per operation under callgrind (churn, touch, keepalive)",
    )
    parser.add_argument("--child", metavar="SPEC", help=argparse.SUPPRESS)
    return parser


def _run_case(
    scenario: Scenario, case: Case, variants: list[Variant], started: float
) -> CaseResult:
    """Measure every variant of ``case``, each in its own child, ``rounds`` times in turn."""
    result = CaseResult(case.label, case.n, _kind(case))
    samples: dict[str, list[dict[str, float | None]]] = {v.name: [] for v in variants}
    rounds = case.settings.rounds
    for round_index in range(rounds):
        for variant in variants:
            if variant.name in result.errors:
                continue
            where = f"{scenario.name} N={case.label}"
            if rounds > 1:
                where += f" round {round_index + 1}/{rounds}"
            _progress(started, f"{where}: {variant.name} ...")
            measure = _count if case.settings.counting else _measure
            try:
                samples[variant.name].append(measure(scenario, variant, case))
            except ChildFailed as exc:
                result.errors[variant.name] = str(exc)
                _progress(started, f"  failed: {exc}")
    for variant in variants:
        runs = samples[variant.name]
        if runs and variant.name not in result.errors:
            keys = dict.fromkeys(key for run in runs for key in run)
            result.rows[variant.name] = {
                key: _median([run.get(key) for run in runs]) for key in keys
            }
            if len(runs) > 1:
                result.spread[variant.name] = {
                    key: (min(known), max(known))
                    for key in keys
                    if (known := [v for run in runs if (v := run.get(key)) is not None])
                }
    return result


def _measure(scenario: Scenario, variant: Variant, case: Case) -> dict[str, float | None]:
    command = [sys.executable, __file__, "--child", child_spec(scenario, variant, case)]
    env = child_env(variant)
    done = subprocess.run(command, check=False, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        raise ChildFailed(lines[-1])
    figures: dict[str, float | None] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def _count(scenario: Scenario, variant: Variant, case: Case) -> dict[str, float | None]:
    """Instructions per operation of ``variant`` in ``case``: callgrind runs of its child with
    ``ops`` and ``2 ops`` operations, both drawing ``2 ops`` random inputs (so that drawing them
    cancels out)."""
    ops = case.settings.ops

    def command(count: int) -> list[str]:
        settings = replace(case.settings, ops=count, drawn=2 * ops)
        spec = child_spec(scenario, variant, replace(case, settings=settings))
        return [sys.executable, __file__, "--child", spec]

    try:
        return {"instructions": per_operation(command, ops, child_env(variant))}
    except RuntimeError as exc:
        raise ChildFailed(str(exc)) from exc


def _median(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def _kind(case: Case) -> str:
    if case.label.endswith("burst"):
        return "burst"
    return "size" if case.n in case.settings.sizes else "huge"


def _slack_notes(cases: list[CaseResult]) -> list[str]:
    """Lateness is only fair if every timer was scheduled before the first came due."""
    return [
        f"N={case.label}, {variant}: scheduling overran the lead by {-figures['slack']:.2f} s, "
        "so the first timers were already late when the loop got to run them"
        for case in cases
        for variant, figures in case.rows.items()
        if (figures.get("slack") or 0.0) < 0
    ]


_MISSING: dict[str, str | None] = {}


def _why_missing(variant: Variant) -> str | None:
    """Why ``variant`` cannot run here (its loop is not installed, its wheel not built), or None."""
    base = variant.loop.removesuffix("+wheel")
    if base in ("uvloop", "trio") and importlib.util.find_spec(base) is None:
        return f"{base} is not installed"
    if variant.wheel == "compiled":
        if "compiled" not in _MISSING:
            try:
                import aiowheel._cwheel  # noqa: F401
            except ImportError:
                _MISSING["compiled"] = "the compiled wheel is not built"
            else:
                _MISSING["compiled"] = None
        return _MISSING["compiled"]
    return None


def _memory_allows(n: int) -> bool:
    with open("/proc/meminfo") as meminfo:
        fields = dict(line.split(":", 1) for line in meminfo)
    available = int(fields["MemAvailable"].split()[0]) * 1024
    return available > n * HUGE_BYTES_PER_TIMER


def _load() -> str:
    return " / ".join(f"{load:.1f}" for load in os.getloadavg())


def _version(module: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return "not installed"


def _environment() -> dict[str, str]:
    return {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpus": str(os.cpu_count()),
        "uvloop": _version("uvloop"),
        "trio": _version("trio"),
        "compiled": "built" if _why_missing(Variant("", "none", "compiled")) is None else "absent",
        "load_start": _load(),
    }


def _progress(started: float, message: str) -> None:
    print(f"[{time.monotonic() - started:6.0f} s] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
