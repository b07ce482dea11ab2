"""How the benchmark suite reports: markdown tables, the headline and targets tables, results.md,
results.json and the PNG plots.

This module owns presentation only: it takes what :mod:`suite` measured (a :class:`Results`)
and the scenario definitions of :mod:`_scenarios`, and never runs anything. Every ratio is a
quotient of two figures from the same run: aiowheel's figure over the alternative's, so below 1
means aiowheel is cheaper (faster, smaller, less late).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from _scenarios import SCENARIOS, TIMER_BUCKET, Metric, Scenario, scenario_named


@dataclass
class CaseResult:
    """The figures of one case of a scenario: median per metric, per variant."""

    label: str
    n: int
    # "size" (one of the run's sizes), "burst" (lateness) or "huge" (memory at 10M).
    kind: str
    rows: dict[str, dict[str, float | None]] = field(default_factory=dict)
    # Variants that were run but gave no figures, and why.
    errors: dict[str, str] = field(default_factory=dict)
    # With several rounds: per variant and metric, the lowest and highest of the rounds.
    spread: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)


@dataclass
class Results:
    """Everything one run of the suite measured, and how it was run."""

    command: str
    environment: dict[str, Any]
    settings: dict[str, Any]
    scenarios: dict[str, list[CaseResult]] = field(default_factory=dict)
    # Per scenario: what the reader should know (skipped variants, failures, caveats).
    notes: dict[str, list[str]] = field(default_factory=dict)
    runtime: float = 0.0

    def case(
        self, scenario: str, case_kind: str, variants: tuple[str, ...] = ()
    ) -> CaseResult | None:
        """The case of kind ``case_kind`` ("size", "burst", "huge"); "largest" ("smallest")
        picks the largest (smallest) of the run's sizes at which every one of ``variants`` has
        figures, "N=100000" that size (None if the run did not measure it)."""
        cases = self.scenarios.get(scenario, [])
        if case_kind.startswith("N="):
            n = int(case_kind.removeprefix("N="))
            return next((c for c in cases if c.kind == "size" and c.n == n), None)
        if case_kind in ("largest", "smallest"):
            sizes = [
                case
                for case in cases
                if case.kind == "size" and all(variant in case.rows for variant in variants)
            ]
            if not sizes:
                return None
            pick = max if case_kind == "largest" else min
            return pick(sizes, key=lambda case: case.n)
        return next((case for case in cases if case.kind == case_kind), None)


# -- formatting ------------------------------------------------------------------------------


def figure_text(value: float | None, metric: Metric) -> str:
    if value is None:
        return "—"
    shown = value * metric.scale
    if round(shown, metric.digits) == 0:
        shown = 0.0  # not "-0": a figure within rounding of zero (freed at once) is zero
    return f"{shown:,.{metric.digits}f}"


def spread_text(bounds: tuple[float, float] | None, metric: Metric) -> str:
    """The lowest and the highest round of a figure, as ``low-high``."""
    if bounds is None:
        return "—"
    return f"{figure_text(bounds[0], metric)}-{figure_text(bounds[1], metric)}"


def ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base <= 0:
        return None
    return value / base


def ratio_text(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.2f}x" if value >= 0.095 else f"{value:.3f}x"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    """A markdown table padded to line up in a terminal; the first ``left`` columns left-aligned,
    the rest right-aligned (figures)."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        padded = [
            cell.ljust(width) if index < left else cell.rjust(width)
            for index, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = [
        "-" * width if index < left else "-" * (width - 1) + ":"
        for index, width in enumerate(widths)
    ]
    return "\n".join([line(headers), line(rule), *(line(row) for row in rows)])


# -- the scenario tables ---------------------------------------------------------------------


def scenario_table(scenario: Scenario, cases: list[CaseResult]) -> str:
    """The scenario's figures and their ratios to each baseline, one row per case and variant."""
    headers = ["N", "variant", *(m.header for m in scenario.metrics)]
    headers += [f"vs {label}" for label, _ in scenario.baselines]
    ratio_metric = next(m for m in scenario.metrics if m.key == scenario.ratio_key)
    spread = any(case.spread for case in cases)
    if spread:
        headers.append(f"{ratio_metric.header}: lowest-highest round")
    rows: list[list[str]] = []
    for case in cases:
        for variant, figures in case.rows.items():
            row = [case.label, variant]
            row += [figure_text(figures.get(m.key), m) for m in scenario.metrics]
            for _, baseline in scenario.baselines:
                base = case.rows.get(baseline, {}).get(ratio_metric.key)
                row.append(ratio_text(ratio(figures.get(ratio_metric.key), base)))
            if spread:
                row.append(
                    spread_text(case.spread.get(variant, {}).get(ratio_metric.key), ratio_metric)
                )
            rows.append(row)
        for variant, error in case.errors.items():
            blanks = ["—"] * (len(headers) - 3)
            rows.append([case.label, variant, f"failed: {error}", *blanks])
    return markdown_table(headers, rows, left=2)


def timer_lateness_table(cases: list[CaseResult]) -> str:
    """The Timer's own lateness histograms (``stats().lateness``) in the lateness runs: one row
    per case and wheel variant, one column per bucket that counted anything."""
    rows = [
        (case.label, variant, _timer_buckets(figures))
        for case in cases
        for variant, figures in case.rows.items()
        if any(key.startswith(TIMER_BUCKET) for key in figures)
    ]
    bounds = sorted({bound for _, _, buckets in rows for bound, count in buckets if count})
    headers = ["N", "variant", *(_bound_header(bound) for bound in bounds)]
    cells = [
        [label, variant, *(f"{dict(buckets).get(bound, 0):,.0f}" for bound in bounds)]
        for label, variant, buckets in rows
    ]
    return markdown_table(headers, cells, left=2)


def _timer_buckets(figures: dict[str, float | None]) -> list[tuple[float, float]]:
    return [
        (float(key.removeprefix(TIMER_BUCKET)), value or 0.0)
        for key, value in figures.items()
        if key.startswith(TIMER_BUCKET)
    ]


def _bound_header(bound: float) -> str:
    if bound == math.inf:
        return "> 10 s"
    return f"<= {bound * 1e3:g} ms"


# -- headline and targets --------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """aiowheel (pure and compiled) against one alternative, on one figure of one case."""

    scenario: str
    what: str
    metric: str
    baseline: str
    pure: str
    compiled: str
    case: str = "largest"

    def at(self, results: Results) -> CaseResult | None:
        """The case compared: the largest size (or the burst) at which the baseline ran."""
        return results.case(self.scenario, self.case, (self.baseline,))

    def figures(self, results: Results) -> tuple[float | None, float | None, float | None]:
        case = self.at(results)
        if case is None:
            return None, None, None

        def get(variant: str) -> float | None:
            return case.rows.get(variant, {}).get(self.metric)

        return get(self.baseline), get(self.pure), get(self.compiled)

    def ratios(self, results: Results) -> tuple[float | None, float | None]:
        base, pure, compiled = self.figures(results)
        return ratio(pure, base), ratio(compiled, base)


def _cmp(
    scenario: str, what: str, metric: str, baseline: str, ours: str, *, case: str = "largest"
) -> Comparison:
    """aiowheel's ``ours`` (pure and compiled) against ``baseline``."""
    return Comparison(scenario, what, metric, baseline, f"{ours}, pure", f"{ours}, compiled", case)


LIFECYCLE_ASYNCIO = _cmp(
    "lifecycle", "CPU per timer", "cpu", "asyncio loop.call_at", "asyncio + Timer.call_at"
)
LIFECYCLE_UVLOOP = _cmp(
    "lifecycle", "CPU per timer", "cpu", "uvloop loop.call_at", "uvloop + Timer.call_at"
)
CHURN_ASYNCIO = _cmp(
    "churn",
    "CPU per reschedule",
    "cpu",
    "asyncio cancel + loop.call_later",
    "asyncio + Timer cancel + call_later",
)
TOUCH = _cmp(
    "touch", "CPU per touch", "cpu", "asyncio cancel + loop.call_later", "IdleTimeouts.touch"
)
TOUCH_100K = _cmp(
    "touch",
    "CPU per touch",
    "cpu",
    "asyncio cancel + loop.call_later",
    "IdleTimeouts.touch",
    case="N=100000",
)
TOUCH_1M = _cmp(
    "touch",
    "CPU per touch",
    "cpu",
    "asyncio cancel + loop.call_later",
    "IdleTimeouts.touch",
    case="N=1000000",
)
MEMORY_ASYNCIO = _cmp(
    "memory",
    "heap per pending timer",
    "heap_pending",
    "asyncio TimerHandle",
    "aiowheel TimerHandle",
)
MEMORY_LOOP_ASYNCIO = _cmp(
    "memory",
    "heap per pending loop timer",
    "heap_pending",
    "asyncio TimerHandle",
    "asyncio+wheel LoopTimerHandle",
)
MEMORY_LOOP_UVLOOP = _cmp(
    "memory",
    "heap per pending loop timer",
    "heap_pending",
    "asyncio TimerHandle",
    "uvloop+wheel LoopTimerHandle",
)
_KEEPALIVE_LOOPS = (
    ("asyncio loop.call_later", "asyncio+wheel loop.call_later"),
    ("uvloop loop.call_later", "uvloop+wheel loop.call_later"),
    ("asyncio loop.call_later", "Timer.call_later + IdleTimeouts.touch"),
)
KEEPALIVE: tuple[Comparison, ...] = tuple(
    _cmp("keepalive", what, metric, baseline, ours)
    for what, metric in (
        ("heap per connection", "heap"),
        ("peak RSS per connection", "rss_peak"),
        ("CPU per keepalive cycle", "cpu"),
    )
    for baseline, ours in _KEEPALIVE_LOOPS
)
# The fewest timers: a few per bucket, where each wake of the driver counts most.
FEW_ASYNCIO = _cmp(
    "lifecycle",
    "CPU per timer",
    "cpu",
    "asyncio loop.call_at",
    "asyncio + Timer.call_at",
    case="smallest",
)
FEW_UVLOOP = _cmp(
    "lifecycle",
    "CPU per timer",
    "cpu",
    "uvloop loop.call_at",
    "uvloop + Timer.call_at",
    case="smallest",
)
LATENESS_ASYNCIO = _cmp(
    "lateness",
    "p99 lateness, burst",
    "p99",
    "asyncio loop.call_at",
    "asyncio + Timer.call_at",
    case="burst",
)
FLOOR_WHEEL = _cmp("floor", "CPU per add", "cpu", "floor: d[key] = when", "wheel.add")
FLOOR_TIMER = _cmp(
    "floor", "CPU per call_at", "cpu", "floor: d[key] = when", "Timer.call_at (schedule only)"
)

HEADLINE: tuple[Comparison, ...] = (
    LIFECYCLE_ASYNCIO,
    LIFECYCLE_UVLOOP,
    _cmp("lifecycle", "CPU per timer", "cpu", "trio tasks: trio.sleep", "trio tasks: timer.sleep"),
    CHURN_ASYNCIO,
    _cmp(
        "churn",
        "CPU per reschedule",
        "cpu",
        "uvloop cancel + loop.call_later",
        "uvloop + Timer cancel + call_later",
    ),
    TOUCH,
    _cmp("touch", "CPU per touch", "cpu", "asyncio.Timeout.reschedule", "IdleTimeouts.touch"),
    MEMORY_ASYNCIO,
    _cmp(
        "memory",
        "heap per pending timer",
        "heap_pending",
        "uvloop TimerHandle",
        "aiowheel TimerHandle",
    ),
    _cmp(
        "memory",
        "heap per pending key",
        "heap_pending",
        "asyncio TimerHandle",
        "IdleTimeouts key",
    ),
    _cmp(
        "memory",
        "heap per timer after cancel",
        "heap_cancelled",
        "asyncio TimerHandle",
        "aiowheel TimerHandle",
    ),
    LATENESS_ASYNCIO,
    _cmp(
        "lateness",
        "p99 lateness, burst",
        "p99",
        "uvloop loop.call_at",
        "uvloop + Timer.call_at",
        case="burst",
    ),
    _cmp("lateness", "p99 lateness", "p99", "asyncio loop.call_at", "asyncio + Timer.call_at"),
    _cmp("wakeups", "idle wake-ups per s", "wakeups", "asyncio loop", "asyncio + Timer"),
    FLOOR_TIMER,
    FLOOR_WHEEL,
    MEMORY_LOOP_ASYNCIO,
    _cmp(
        "memory",
        "heap per pending loop timer",
        "heap_pending",
        "uvloop TimerHandle",
        "uvloop+wheel LoopTimerHandle",
    ),
    *KEEPALIVE,
)


def _case_label(results: Results, comparison: Comparison) -> str:
    case = comparison.at(results)
    return "—" if case is None else case.label


def headline_table(results: Results) -> str:
    """One row per comparison: the alternative's figure, then aiowheel's with its ratio."""
    headers = ["scenario", "N", "figure", "alternative", "its figure"]
    headers += ["aiowheel pure", "ratio", "aiowheel compiled", "ratio"]
    rows = []
    for comparison in HEADLINE:
        if comparison.scenario not in results.scenarios:
            continue
        metric = _metric(comparison.scenario, comparison.metric)
        base, pure, compiled = comparison.figures(results)
        unit = metric.header.split(" ", 1)[-1] if " " in metric.header else metric.header
        rows.append(
            [
                comparison.scenario,
                _case_label(results, comparison),
                f"{comparison.what} ({unit})",
                comparison.baseline,
                figure_text(base, metric),
                figure_text(pure, metric),
                ratio_text(ratio(pure, base)),
                figure_text(compiled, metric),
                ratio_text(ratio(compiled, base)),
            ]
        )
    return markdown_table(headers, rows, left=4)


def _metric(scenario: str, key: str) -> Metric:
    return next(m for m in scenario_named(scenario).metrics if m.key == key)


@dataclass(frozen=True)
class Target:
    """A target of issue 5 (or 30): a bound on aiowheel's ratio to an alternative for the pure
    and the compiled wheel -- "1/3" (at most a third), "3x" (at most three times), "1" (at most
    as much) or "—" (none)."""

    what: str
    pure: str
    compiled: str
    comparison: Comparison


TARGETS: tuple[Target, ...] = (
    Target("lifecycle CPU per timer, vs asyncio `call_at`", "1/3", "1/10", LIFECYCLE_ASYNCIO),
    Target("lifecycle CPU per timer, vs uvloop `call_at`", "1/2", "1/5", LIFECYCLE_UVLOOP),
    Target("churn per reschedule, vs asyncio cancel + call_later", "1/3", "1/10", CHURN_ASYNCIO),
    # The engine issue's touch targets: at 100k keys, and at 1M keys where cache misses
    # dominate both sides (a run of random touches).
    Target("IdleTimeouts.touch vs cancel + call_later", "1/20", "1/40", TOUCH_100K),
    Target("IdleTimeouts.touch vs cancel + call_later", "—", "1/10", TOUCH_1M),
    Target("memory per pending timer vs asyncio TimerHandle", "1/2", "1/4", MEMORY_ASYNCIO),
    Target("p99 lateness in the burst vs asyncio", "1/5", "1/20", LATENESS_ASYNCIO),
    Target("compiled `Timer.call_at` (schedule) vs the floor", "—", "3x", FLOOR_TIMER),
    Target("compiled `wheel.add` vs the floor", "—", "3x", FLOOR_WHEEL),
    # The engine issue's: bytes per pending handle, and the driver's wakes with few timers per
    # bucket (10k timers over two seconds in the default sizes).
    Target("engine: memory per pending handle vs asyncio TimerHandle", "—", "2/5", MEMORY_ASYNCIO),
    Target("engine: lifecycle CPU, fewest timers, vs asyncio `call_at`", "—", "3/5", FEW_ASYNCIO),
    Target("engine: lifecycle CPU, fewest timers, vs uvloop `call_at`", "—", "3/5", FEW_UVLOOP),
    # Issue 30's: a pending timer of the drop-in wheel loop, on either base, against asyncio's.
    Target(
        "issue 30: memory per pending asyncio+wheel timer vs asyncio TimerHandle",
        "1",
        "1/2",
        MEMORY_LOOP_ASYNCIO,
    ),
    Target(
        "issue 30: memory per pending uvloop+wheel timer vs asyncio TimerHandle",
        "1",
        "1/2",
        MEMORY_LOOP_UVLOOP,
    ),
)


TARGETS_TITLE = "Targets (issues 5 and 30)"


def _bound(text: str) -> float | None:
    return None if text == "—" else float(Fraction(text.removesuffix("x")))


def _verdict(value: float | None, bound: float | None) -> str:
    if bound is None:
        return ""
    if value is None:
        return "not measured"
    return "met" if value <= bound else "**not met**"


def _ratio_cells(value: float | None, target: str) -> list[str]:
    if target == "—":
        return [target, "", ""]
    shown = ratio_text(value)
    if value is not None and 0 < value < 1:
        shown += f" (1/{1 / value:.1f})"
    return [target, shown, _verdict(value, _bound(target))]


def early_fires(results: Results) -> tuple[int | None, int | None]:
    """Early fires of the Timer (pure, compiled), summed over every lateness case and loop."""
    totals: list[int | None] = []
    for wheel in ("pure", "compiled"):
        counts = [
            figures["early"] or 0.0
            for case in results.scenarios.get("lateness", [])
            for variant, figures in case.rows.items()
            if variant.endswith(f"Timer.call_at, {wheel}") and figures.get("early") is not None
        ]
        totals.append(round(sum(counts)) if counts else None)
    return totals[0], totals[1]


def targets_table(results: Results) -> str:
    """Issues 5's and 30's targets with the ratios measured in this run, met or not."""
    headers = ["target", "N", "pure", "measured", "met?", "compiled", "measured", "met?"]
    rows = []
    for target in TARGETS:
        if target.comparison.scenario not in results.scenarios:
            continue
        pure, compiled = target.comparison.ratios(results)
        rows.append(
            [
                target.what,
                _case_label(results, target.comparison),
                *_ratio_cells(pure, target.pure),
                *_ratio_cells(compiled, target.compiled),
            ]
        )
    if "lateness" in results.scenarios:
        cells = [
            ["0", "—" if count is None else str(count), _verdict(count, 0.0)]
            for count in early_fires(results)
        ]
        what = "early fires of the Timer (every lateness run)"
        rows.append([what, "all", *cells[0], *cells[1]])
    return markdown_table(headers, rows, left=2)


# -- results.md, results.json, plots ---------------------------------------------------------

PLOTS = {
    "lifecycle": "lifecycle.png",
    "churn": "churn.png",
    "memory": "memory.png",
    "lateness": "lateness.png",
    "keepalive": "keepalive.png",
}


def results_markdown(results: Results, plots: list[str]) -> str:
    env = results.environment
    minutes = results.runtime / 60
    parts = [
        "# aiowheel benchmark results",
        "",
        f"Generated by `{results.command}` on {env['date']} in {minutes:.1f} min "
        f"(rounds: {results.settings['rounds']}, medians shown"
        + (", with the lowest and highest round" if results.settings["rounds"] > 1 else "")
        + ").",
        f"Python {env['python']}, {env['platform']}, {env['cpus']} CPUs; "
        f"uvloop {env['uvloop']}, trio {env['trio']}; compiled wheel: {env['compiled']}.",
        f"Load average at start {env['load_start']}, at end {env['load_end']}: the machine is "
        "shared, so compare ratios within this run, not absolute figures across runs.",
        "Ratios are aiowheel's figure over the alternative's: below 1 means aiowheel is cheaper.",
        "",
        "## Headline",
        "",
        headline_table(results),
        "",
        f"## {TARGETS_TITLE}",
        "",
        targets_table(results),
        "",
    ]
    for scenario in SCENARIOS:
        cases = results.scenarios.get(scenario.name)
        if cases is None:
            continue
        parts += [f"## {scenario.title}", "", scenario.doc, "", scenario_table(scenario, cases)]
        if scenario.name == "lateness":
            parts += ["", "The Timer's own lateness histogram:", "", timer_lateness_table(cases)]
        parts += [f"\n- {note}" for note in results.notes.get(scenario.name, [])]
        plot = PLOTS.get(scenario.name)
        if plot in plots:
            parts += ["", f"![{scenario.name}]({plot})"]
        parts.append("")
    return "\n".join(parts)


def results_json(results: Results) -> str:
    return json.dumps(asdict(results), indent=1, ensure_ascii=False)


_COLORS = (
    ("IdleTimeouts", "tab:purple"),
    ("asyncio+wheel", "tab:brown"),
    ("uvloop+wheel", "tab:pink"),
    ("aiowheel", "tab:red"),
    ("uvloop", "tab:orange"),
    ("trio", "tab:green"),
    ("asyncio", "tab:blue"),
)


# Bars have no line style: the pure wheel's are hatched //, the compiled one's dotted.
_HATCHES = {"-": "", "--": "//", ":": ".."}


def _style(variant: str) -> dict[str, Any]:
    """Colour by event loop (or by what is stored), line style by implementation: the loop's
    own solid, the pure wheel dashed, the compiled one dotted."""
    color = next((color for word, color in _COLORS if word in variant), "tab:gray")
    style = "-"
    if variant.endswith(", pure"):
        style = "--"
    elif variant.endswith(", compiled"):
        style = ":"
    return {"color": color, "linestyle": style, "marker": "o", "label": variant}


def plot(results: Results, out: Path) -> list[str]:
    """Write the PNG plots of the scenarios that ran; return their file names. Needs
    matplotlib (the ``spark`` extra): without it, no plots."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    for name, title, key, ylabel, scale in (
        ("lifecycle", "Lifecycle: CPU per timer (schedule + fire)", "cpu", "µs per timer", 1e6),
        ("churn", "Churn: CPU per reschedule (cancel + call_later)", "cpu", "µs", 1e6),
    ):
        if name in results.scenarios:
            figure, axes = plt.subplots(figsize=(9, 5.5))
            _lines(axes, results.scenarios[name], key, scale)
            axes.set(title=title, xlabel="N timers", ylabel=ylabel, xscale="log", yscale="log")
            _save(figure, axes, out / PLOTS[name])
            written.append(PLOTS[name])
    if "memory" in results.scenarios:
        figure, (pending, cancelled) = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
        cases = results.scenarios["memory"]
        _lines(pending, cases, "heap_pending", 1.0)
        _lines(cancelled, cases, "heap_cancelled", 1.0)
        pending.set(title="Heap per pending timer", xlabel="N", ylabel="bytes per timer")
        cancelled.set(title="Heap per timer after cancelling all (no loop pass)", xlabel="N")
        for axes in (pending, cancelled):
            axes.set_xscale("log")
            axes.grid(True, which="both", alpha=0.3)
        cancelled.legend(fontsize=7, loc="center right")
        figure.tight_layout()
        figure.savefig(out / PLOTS["memory"], dpi=110)
        plt.close(figure)
        written.append(PLOTS["memory"])
    keepalive = results.case("keepalive", "largest")
    if keepalive is not None and keepalive.rows:
        # Bars at the largest N (the scale the scenario is about), one per variant.
        figure, panels = plt.subplots(1, 3, figsize=(16, 5.5), sharey=True)
        variants = list(keepalive.rows)
        for axes, key, scale, title in (
            (panels[0], "rss_peak", 1.0, "Peak RSS per connection (bytes)"),
            (panels[1], "heap", 1.0, "Heap per connection, tracemalloc (bytes)"),
            (panels[2], "cpu", 1e6, "CPU per keepalive cycle (µs)"),
        ):
            for index, variant in enumerate(variants):
                style = _style(variant)
                value = keepalive.rows[variant].get(key)
                axes.barh(
                    index,
                    0.0 if value is None else value * scale,
                    color=style["color"],
                    hatch=_HATCHES[style["linestyle"]],
                )
            axes.set_title(title, fontsize=10)
            axes.grid(True, axis="x", alpha=0.3)
        panels[0].set_yticks(range(len(variants)), variants, fontsize=8)
        panels[0].invert_yaxis()
        figure.suptitle(
            f"{keepalive.label} idle connections: a keepalive ping and an idle timeout each"
        )
        figure.tight_layout()
        figure.savefig(out / PLOTS["keepalive"], dpi=110)
        plt.close(figure)
        written.append(PLOTS["keepalive"])
    burst = results.case("lateness", "burst")
    if burst is not None and burst.rows:
        figure, axes = plt.subplots(figsize=(10, 5.5))
        variants = list(burst.rows)
        width = 0.8 / len(variants)
        for index, variant in enumerate(variants):
            values = [
                max(1e-3, (burst.rows[variant].get(k) or 0.0) * 1e3) for k in ("p50", "p99", "max")
            ]
            positions = [x + index * width for x in range(3)]
            style = _style(variant)
            axes.bar(
                positions,
                values,
                width,
                color=style["color"],
                label=variant,
                hatch=_HATCHES[style["linestyle"]],
            )
        axes.set_xticks([x + 0.4 - width / 2 for x in range(3)], ["p50", "p99", "max"])
        axes.set(title=f"Lateness in a burst of {burst.label.split()[0]} timers", ylabel="ms")
        axes.set_yscale("log")
        _save(figure, axes, out / PLOTS["lateness"])
        written.append(PLOTS["lateness"])
    return written


def _lines(axes: Any, cases: list[CaseResult], key: str, scale: float) -> None:
    sized = sorted((case for case in cases if case.kind != "burst"), key=lambda case: case.n)
    variants = list(dict.fromkeys(variant for case in sized for variant in case.rows))
    for variant in variants:
        points = [
            (case.n, value * scale)
            for case in sized
            if (value := case.rows.get(variant, {}).get(key)) is not None
        ]
        if points:
            xs, ys = zip(*points, strict=True)
            axes.plot(xs, ys, **_style(variant))


def _save(figure: Any, axes: Any, path: Path) -> None:
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(figure)
