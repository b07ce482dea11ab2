"""Types of the compiled part aiowheel/spark/_cvisit.pyx: a shard's visit, the same API as
:mod:`aiowheel.spark._visit`."""

from collections.abc import Mapping, Sequence

from aiowheel.spark._keystate import Event, IdleRule
from aiowheel.spark._shard import PageReader, Shard, ShardVisit

__all__ = ["add_events", "visit"]

CPYTHON_FALLBACK: bool

def add_events(
    arrived: dict[str, list[Event]],
    names: Sequence[str],
    ts: Sequence[float],
    ranks: Sequence[int],
    event_ids: Sequence[str | None],
) -> None: ...
def visit(
    rule: IdleRule,
    shard: Shard | None,
    arrived: Mapping[str, list[Event]],
    watermark: int,
    read: PageReader,
    *,
    width: int,
    firing: int | None = None,
) -> ShardVisit: ...
