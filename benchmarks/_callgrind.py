"""CPU instructions per operation under valgrind's callgrind: what every ``--callgrind`` option
of the benchmarks (``suite.py``, ``bench_loop.py``, ``bench_timer.py``) shares.

A command is run twice under callgrind, once doing ``n`` operations and once ``2n``, each in a
fresh process; the difference of the two totals divided by ``n`` is the instructions per
operation, with the interpreter's start-up and the workload's set-up (the same in both runs)
cancelled out. An instruction count does not depend on the machine's load, so it compares two
versions of the code, or two loops, on a busy machine as well as on an idle one; it says nothing
about cache misses, which a count cannot see.

Every run gets ``PYTHONHASHSEED=0`` unless the environment given sets a seed: with a random
seed the count of one workload varies from run to run by a few hundred instructions (the string
hashes change dicts' layouts and collisions), which would hide a change of that size.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Callable

_COLLECTED = re.compile(r"Collected : (\d+)")


def instructions(command: list[str], env: dict[str, str] | None = None) -> int:
    """The CPU instructions callgrind counts for a whole run of ``command``.

    Raises RuntimeError, with the last line of the command's stderr, if it fails."""
    env = {"PYTHONHASHSEED": "0", **(os.environ if env is None else env)}
    with tempfile.TemporaryDirectory() as scratch:
        traced = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={scratch}/out"]
        done = subprocess.run(
            [*traced, *command], capture_output=True, text=True, check=False, env=env
        )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        raise RuntimeError(f"callgrind run failed: {lines[-1]}")
    match = _COLLECTED.search(done.stderr)
    if match is None:
        raise RuntimeError(f"no instruction count in callgrind's output:\n{done.stderr}")
    return int(match.group(1))


def per_operation(
    command: Callable[[int], list[str]], n: int, env: dict[str, str] | None = None
) -> float:
    """Instructions per operation: ``command(n)`` runs ``n`` operations; the difference of the
    runs of ``2n`` and ``n`` over ``n``."""
    return (instructions(command(2 * n), env) - instructions(command(n), env)) / n
