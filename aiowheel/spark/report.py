"""The capacity report: metrics as Parquet and CSV, PNG plots, and one HTML page tying them up.

This module owns the files a capacity-planning run leaves behind, in one directory::

    series.parquet, series.csv      pending timers and expirations per bucket and timeout
    summary.parquet, summary.csv    the what-if table: one row per timeout
    pending.png                     pending timers over time, one line per timeout
    expirations.png                 expirations per second over time, one line per timeout
    index.html                      the what-if table, the plots and links to the data

The metrics are computed by Spark (:func:`aiowheel.spark.metrics`); only their small result
(buckets x timeouts rows) comes to the driver, as pandas, to be written and drawn. Plots use
matplotlib's object API with the Agg canvas, so no display and no global pyplot state.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd  # type: ignore[import-untyped]
from pyspark.sql import DataFrame, SparkSession

from aiowheel.spark.metrics import metrics

__all__ = ["ReportFiles", "report"]


@dataclass(frozen=True)
class ReportFiles:
    """Paths of everything :func:`report` wrote, and the two tables it wrote them from."""

    directory: str
    index: str
    pending_plot: str
    expirations_plot: str
    series: pd.DataFrame
    summary: pd.DataFrame


def report(
    spark: SparkSession,
    events: DataFrame,
    directory: str,
    *,
    timeouts: Sequence[float],
    tick: float,
    horizon: float | None = None,
    bucket: float = 1.0,
    title: str = "aiowheel capacity report",
) -> ReportFiles:
    """Compute the capacity metrics of ``events`` and write the report into ``directory``.

    Arguments as for :func:`aiowheel.spark.metrics`. ``directory`` is created if needed and
    files in it are overwritten. Returns the paths and the two tables as pandas DataFrames.
    """
    result = metrics(spark, events, timeouts=timeouts, tick=tick, horizon=horizon, bucket=bucket)
    series_frame = result.series.persist()
    try:
        series: pd.DataFrame = series_frame.toPandas()
        summary: pd.DataFrame = result.summary.toPandas()
    finally:
        series_frame.unpersist()
    os.makedirs(directory, exist_ok=True)
    for name, table in (("series", series), ("summary", summary)):
        table.to_parquet(os.path.join(directory, f"{name}.parquet"), index=False)
        table.to_csv(os.path.join(directory, f"{name}.csv"), index=False)
    pending_plot = os.path.join(directory, "pending.png")
    expirations_plot = os.path.join(directory, "expirations.png")
    _plot(series, "pending", "pending timers (keys tracked)", pending_plot)
    _plot(series, "expirations_per_second", "expirations per second", expirations_plot)
    index = os.path.join(directory, "index.html")
    with open(index, "w", encoding="utf-8") as page:
        page.write(_page(title, summary, tick=tick, bucket=bucket))
    return ReportFiles(
        directory=directory,
        index=index,
        pending_plot=pending_plot,
        expirations_plot=expirations_plot,
        series=series,
        summary=summary,
    )


def _plot(series: pd.DataFrame, column: str, label: str, path: str) -> None:
    """One line per timeout of ``column`` against time, saved as a PNG."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 4.5), dpi=100, layout="constrained")
    axes = figure.add_subplot()
    for timeout, rows in series.groupby("timeout", sort=True):
        axes.plot(rows["bucket_start"], rows[column], label=f"timeout {timeout:g} s", linewidth=1)
    axes.set_xlabel("time (s)")
    axes.set_ylabel(label)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="best")
    figure.savefig(path)


def _page(title: str, summary: pd.DataFrame, *, tick: float, bucket: float) -> str:
    table = summary.rename(
        columns={
            "timeout": "timeout (s)",
            "touches": "touches",
            "expirations": "expirations",
            "peak_pending": "peak pending timers",
            "peak_pending_at": "peak at (s)",
            "mean_pending": "mean pending",
            "peak_expirations_per_second": "peak expirations/s",
            "pending_at_horizon": "pending at horizon",
            "end": "end of log (s)",
        }
    ).to_html(index=False, float_format=lambda value: f"{value:,.3f}".rstrip("0").rstrip("."))
    name = html.escape(title)
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{name}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 70rem; color: #222; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #ccc; padding: 0.3rem 0.6rem; text-align: right; }}
th {{ background: #f3f3f3; }}
img {{ max-width: 100%; }}
</style>
</head>
<body>
<h1>{name}</h1>
<p>Replay of the event log through the idle-expiry rule of <code>aiowheel.IdleTimeouts</code>,
tick {tick:g} s, buckets of {bucket:g} s.</p>
<h2>What if: one row per idle timeout</h2>
{table}
<h2>Pending timers over time</h2>
<img src="pending.png" alt="pending timers over time, one line per timeout">
<h2>Expirations per second</h2>
<img src="expirations.png" alt="expirations per second over time, one line per timeout">
<p>Data: <a href="series.csv">series.csv</a> (<a href="series.parquet">Parquet</a>),
<a href="summary.csv">summary.csv</a> (<a href="summary.parquet">Parquet</a>).</p>
</body>
</html>
"""
