"""The ``aiowheel`` command line; ``python -m aiowheel`` runs the same.

This module only wires commands to the modules that own them:

* ``aiowheel demo`` -- the idle-expiring TCP server and its simulated clients, checked end to end
  (:mod:`aiowheel.demo`; its output needs the ``cli`` extra, ``rich``);
* ``aiowheel spark ...`` -- the Spark pipeline's commands (generate, replay, report, stream).
  Everything after ``spark`` goes unparsed to ``aiowheel.spark.cli.main(argv)``, which owns
  those options; ``aiowheel spark --help`` is its help. It is imported only when a ``spark``
  command runs, so the rest of the CLI needs neither pyspark nor Java.

Exit status: what the command returns (the demo: 0 passed, 1 a check failed, 2 could not run),
2 for a usage error, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Sequence

import aiowheel
from aiowheel.demo import _cli as demo

__all__ = ["build_parser", "main", "version_line"]

SPARK = "spark"


def version_line() -> str:
    """What ``--version`` prints: the version, the core that runs and the Python it runs on."""
    python = f"{platform.python_implementation()} {platform.python_version()}"
    return f"aiowheel {aiowheel.__version__} ({aiowheel.IMPLEMENTATION} implementation, {python})"


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser, with one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="aiowheel",
        description="aiowheel: an asyncio timer service on a hierarchical timing wheel.",
    )
    parser.add_argument("--version", action="version", version=version_line())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo_parser = commands.add_parser(
        "demo",
        help="run the idle-expiring TCP server against simulated clients and check it",
    )
    demo.add_arguments(demo_parser)
    # Listed for --help only: main() hands "spark ..." to the Spark CLI before parsing.
    commands.add_parser(
        SPARK,
        help="the Spark pipeline: generate, replay, report, stream (needs the spark extra)",
        add_help=False,
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` names (default: ``sys.argv[1:]``) and return its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args[:1] == [SPARK]:
            return _run_spark(args[1:])
        parser = build_parser()
        options = parser.parse_args(args)
        if options.command is None:
            parser.print_help(sys.stderr)
            return 2
        try:
            config = demo.config_from_args(options)
        except ValueError as exc:
            parser.error(str(exc))
        return demo.main(config)
    except KeyboardInterrupt:
        print("aiowheel: interrupted", file=sys.stderr)
        return 130


# -- hook: ``aiowheel spark ...`` -----------------------------------------------------------
# The Spark commands belong to aiowheel.spark.cli, which owns their options: its
# ``main(argv) -> int`` parses everything after "spark" (e.g. ["replay", "--timeouts", "30"])
# and returns the exit status. Imported here, when a spark command runs, and nowhere else.


def _run_spark(argv: list[str]) -> int:
    """Run ``aiowheel spark ...``; pyspark is imported only now."""
    try:
        from aiowheel.spark.cli import main as spark_main
    except ImportError as exc:
        if exc.name == "rich":
            print(f"aiowheel {SPARK} needs rich: pip install 'aiowheel[cli]'", file=sys.stderr)
        else:  # no pyspark: aiowheel.spark's message says what to install
            print(f"aiowheel {SPARK}: {exc}", file=sys.stderr)
        return 2
    return spark_main(argv)


if __name__ == "__main__":
    sys.exit(main())
