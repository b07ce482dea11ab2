"""pyspark is imported lazily, and a missing extra says what to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)


def test_import_aiowheel_does_not_import_pyspark() -> None:
    done = _python("import sys, aiowheel; print('pyspark' in sys.modules)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_missing_extra_names_what_to_install() -> None:
    # sys.modules[name] = None makes "import name" raise ImportError, as if not installed.
    done = _python("import sys; sys.modules['pyspark'] = None; import aiowheel.spark")
    assert done.returncode != 0
    assert "pip install 'aiowheel[spark]'" in done.stderr
