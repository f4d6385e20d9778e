"""The catch-up arithmetic (stream/service/catchup.py) and the ``stream.end`` setting, without Kafka."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from stream.config import StreamSection
from stream.ingest.windowing import Grid
from stream.service.catchup import (
    LAST_RECORD,
    LastRecord,
    StreamEnd,
    catch_up_summary,
    checkpoint_room,
)

T0 = datetime(2024, 1, 1, tzinfo=UTC)
GRID = Grid(datetime(1970, 1, 1, tzinfo=UTC), timedelta(minutes=1), 0.0, 86400.0, 30.0, T0.timestamp())
FIRST = GRID.start_cell


def test_checkpoint_room_is_bounded_by_the_setting_and_the_end():
    assert checkpoint_room(0, 100, 0, None) == 100
    assert checkpoint_room(97, 100, 5, None) == 3
    assert checkpoint_room(100, 100, 5, None) == 0
    assert checkpoint_room(0, 100, 18, 20) == 2  # --max-timesteps 20: never seal timestep 20
    assert checkpoint_room(0, 100, 25, 20) == 0


def test_an_end_instant_covers_the_timesteps_that_start_before_it():
    end = StreamEnd(GRID, None, T0 + timedelta(minutes=30))
    assert end.stop_index(FIRST, {}) == 30
    off_grid = StreamEnd(GRID, None, T0 + timedelta(minutes=30, seconds=1))
    assert off_grid.stop_index(FIRST, {}) == 31
    both = StreamEnd(GRID, 12, T0 + timedelta(minutes=30))
    assert both.stop_index(FIRST, {}) == 12 and "--max-timesteps 12" in both.reason()


def test_last_record_is_unknown_until_decided_then_frozen():
    end = StreamEnd(GRID, None, LAST_RECORD, LastRecord())
    end.last.observe([T0.timestamp() + 5, T0.timestamp() + 19 * 60 + 59.9, T0.timestamp() + 60])
    assert end.stop_index(FIRST, {}) is None  # not caught up yet: no bound
    end.last.decide()
    assert end.stop_index(FIRST, {}) == 20
    end.last.observe([T0.timestamp() + 3600])  # appended later: the end does not move
    assert end.stop_index(FIRST, {}) == 20
    again = StreamEnd(GRID, None, LAST_RECORD, LastRecord.restore(end.last.snapshot()))
    assert again.stop_index(FIRST, {}) == 20
    empty = StreamEnd(GRID, None, LAST_RECORD, LastRecord())
    empty.last.decide()
    assert empty.stop_index(FIRST, {}) == 0


def test_the_catch_up_summary_counts_what_the_clock_completes():
    now = (T0 + timedelta(minutes=100, seconds=30)).timestamp()
    s = catch_up_summary(GRID, FIRST, 0, now, 5.0, None)
    # timestep 99 ends at 100:00, before now − 5 s; timestep 100 is still open
    assert s["timesteps"] == 100 and s["from"].startswith("2024-01-01T00:00") and s["to"].startswith("2024-01-01T01:40")
    assert catch_up_summary(GRID, FIRST, 0, now, 5.0, 20)["timesteps"] == 20
    assert catch_up_summary(GRID, FIRST + 90, 90, now, 5.0, None)["timesteps"] == 10
    assert catch_up_summary(GRID, None, 0, now, 5.0, None) == {"timesteps": 0}


def test_stream_end_must_follow_the_start_and_names_last_record():
    assert StreamSection(start=T0, end="last-record").end == LAST_RECORD
    with pytest.raises(ValidationError, match="not after stream.start"):
        StreamSection(start=T0, end=T0)
    with pytest.raises(ValidationError):
        StreamSection(end="last-data")
