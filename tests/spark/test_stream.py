"""stream's arguments: a bad value is refused before any query starts, naming the value.

What the stream emits is tested in test_agreement.py (against replay and IdleTimeouts, across
restarts) and its per-key logic in test_keystate.py.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from pyspark.sql import SparkSession

from aiowheel.spark import EVENT_SCHEMA, expiry_stream

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        ({"delay": -1.0}, ValueError, "delay must be finite and >= 0, got -1.0"),
        ({"delay": float("nan")}, ValueError, "delay must be finite and >= 0, got nan"),
        ({"delay": "10"}, TypeError, "delay must be a real number, got '10'"),
        ({"shards": 0}, ValueError, "shards must be >= 1, got 0"),
        ({"shards": 2.5}, TypeError, "shards must be an int or None, got 2.5"),
        ({"shards": True}, TypeError, "shards must be an int or None, got True"),
        ({"api": "arrow"}, ValueError, "api must be 'row' or 'pandas', got 'arrow'"),
        ({"tick": 0}, ValueError, "tick must be finite and > 0, got 0"),
        ({"timeouts": [30.0, -1]}, ValueError, "each timeout must be finite and > 0, got -1"),
    ],
)
def test_bad_arguments_are_refused_with_the_value_named(
    spark: SparkSession, given: dict[str, Any], error: type[Exception], message: str
) -> None:
    events = spark.createDataFrame([], EVENT_SCHEMA)
    arguments: dict[str, Any] = {"timeouts": [30.0], "tick": 0.001, **given}
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        expiry_stream(events, **arguments)
