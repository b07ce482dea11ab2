"""The examples in aiowheel's docstrings run, as sortedcontainers runs its doctests.

The twins' examples (the modules :data:`aiowheel._impl.TWINS` lists) run on both sides, each
side's from its own docstrings with its own classes, in ``test_twins.py``; every other module's
examples run once, here. An
example that cannot run in a doctest (an ``async with``) is marked ``+SKIP`` where it stands.
The Spark pipeline is left out: importing it needs pyspark.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import aiowheel
from aiowheel import _impl

# The twins' examples run on both sides in test_twins.py.
TWIN_MODULES = {home for _, pure, compiled, _ in _impl.TWINS for home in (pure, compiled)}


def run_examples(tests: list[doctest.DocTest], globs: dict[str, Any]) -> int:
    """Run ``tests`` with ``globs``; return how many examples ran (``+SKIP`` ones do not)."""
    ran = 0
    for test in tests:
        report: list[str] = []
        test.globs = dict(globs)
        result = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS).run(test, out=report.append)
        assert result.failed == 0, "".join(report)
        ran += result.attempted
    return ran


def package_modules() -> list[str]:
    """Every module of the package but the twins' and Spark's, found without importing any."""
    root = Path(aiowheel.__file__).parent
    names = set()
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(n for n in names if not n.startswith("aiowheel.spark") and n not in TWIN_MODULES)


@pytest.mark.parametrize("name", package_modules())
def test_every_other_modules_examples_run(name: str) -> None:
    module: ModuleType = importlib.import_module(name)
    tests = doctest.DocTestFinder(exclude_empty=True).find(module)
    run_examples(tests, vars(module))
