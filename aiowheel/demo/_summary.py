"""The summary table and the verdict, printed with rich."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiowheel.demo._config import FAILURES_SHOWN
from aiowheel.demo._run import DemoReport

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def summary_table(report: DemoReport) -> Table:
    """The end-of-run table: what ran, what was checked, and whether each check passed."""
    from rich.table import Table

    config = report.config
    verdict = report.verdict
    ok, bad = "[green]ok[/]", "[bold red]FAIL[/]"

    def check(passed: bool) -> str:
        return ok if passed else bad

    due_after = config.timeout + config.tolerance
    table = Table(
        title="aiowheel demo",
        title_justify="left",
        caption=(
            f"* due: went silent at least timeout + tolerance ({due_after:g} s) before the "
            f"end, so it must have been expired within that time"
        ),
        caption_justify="left",
    )
    table.add_column("")
    table.add_column("")
    table.add_column("check")
    table.add_row("event loop", report.loop_name, "")
    table.add_row(
        "clients", f"{config.clients:,}: {verdict.talking:,} talking, {verdict.silent:,} silent", ""
    )
    table.add_row("connected", f"{verdict.connected:,}", check(verdict.connected == config.clients))
    table.add_row("most open at once", f"{report.max_connections:,}", "")
    rate = report.touches / config.duration
    table.add_row("touches", f"{report.touches:,} ({rate:,.0f}/s)", "")
    table.add_row("expiries", f"{verdict.expiries:,}", "")
    table.add_row(
        "talking clients expired",
        f"{verdict.talking_expired:,}",
        check(not verdict.talking_expired),
    )
    table.add_row(
        "silent clients due*",
        f"{verdict.silent_due:,}, {verdict.silent_due_expired:,} expired in time",
        check(verdict.silent_due_expired == verdict.silent_due),
    )
    table.add_row(
        "silent, not yet due*",
        f"{verdict.silent_not_due:,}, {verdict.silent_not_due_expired:,} expired",
        "not judged",
    )
    table.add_row("early expiries", f"{verdict.early:,}", check(not verdict.early))
    if verdict.idle_at_expiry is not None:
        shortest, longest = verdict.idle_at_expiry
        table.add_row(
            "idle time at expiry",
            f"{shortest:.3f} s to {longest:.3f} s",
            f"timeout {config.timeout:g} s",
        )
    table.add_row(
        "closes seen by clients", f"{verdict.closes_seen:,} of {verdict.expiries:,} expired", ""
    )
    stats = report.timer
    table.add_row(
        "timer",
        f"{stats.fired:,} fired, {stats.driver_wakeups:,} wake-ups",
        f"tick {config.tick * 1000:g} ms",
    )
    lateness = stats.lateness
    table.add_row(
        "timer lateness",
        f"p50 <= {_ms(lateness.quantile(0.5))}, p99 <= {_ms(lateness.quantile(0.99))}, "
        f"max {stats.max_lateness * 1000:.1f} ms",
        "",
    )
    table.add_row("lateness histogram", str(lateness), "")
    table.add_row(
        "pending per level",
        ", ".join(f"L{level}: {count:,}" for level, count in enumerate(stats.pending_per_level)),
        "",
    )
    table.add_row("event loop lag max", f"{report.max_loop_lag * 1000:.0f} ms", "")
    table.add_row("seed", str(report.seed), "")
    table.add_row("run time", f"{report.elapsed:.1f} s", "")
    return table


def _ms(seconds: float) -> str:
    """A quantile's bucket bound in ms (inf beyond the last bound, nan with nothing counted)."""
    return f"{seconds * 1000:g} ms"


def print_report(report: DemoReport, console: Console) -> None:
    """Print the summary table, the failures (if any) and a one-line verdict."""
    from rich.markup import escape

    config = report.config
    verdict = report.verdict
    console.print(summary_table(report))
    for failure in verdict.failures[:FAILURES_SHOWN]:
        console.print(f"  [red]✗[/] {escape(failure)}")
    if len(verdict.failures) > FAILURES_SHOWN:
        console.print(f"  … and {len(verdict.failures) - FAILURES_SHOWN:,} more")
    # A talking client can only be expired if the loop stalled longer than its margin.
    margin = config.timeout - config.longest_interval
    if verdict.talking_expired and report.max_loop_lag >= margin:
        console.print(
            f"  [yellow]the event loop stalled for {report.max_loop_lag:.2f} s, longer than "
            f"the keepalive margin ({margin:.2f} s): the machine is too loaded for "
            f"{config.clients:,} clients; try fewer --clients or a longer --timeout[/]"
        )
    if verdict.unconnected:
        console.print(
            f"  [yellow]{verdict.unconnected:,} clients were still waiting to connect at the "
            f"end: the machine is too loaded for {config.clients:,} clients; try fewer "
            f"--clients or a longer --duration[/]"
        )
    if verdict.passed:
        console.print(
            f"[bold green]PASS[/]: {verdict.connected:,} clients, no talking client expired, "
            f"{verdict.silent_due_expired:,}/{verdict.silent_due:,} due silent clients expired "
            f"in time, none early",
            soft_wrap=True,
        )
    else:
        console.print(f"[bold red]FAIL[/]: {len(verdict.failures):,} problem(s)")
