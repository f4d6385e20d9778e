"""Is the Kafka cluster still the one the stream's state describes? (issue 34 item 2)

A cluster restored without its data (or the embedded broker restarted: memory
storage) answers every request, so the broker probe (:mod:`stream.service.probe`)
sees it as up, and kafka-python's consumer does not raise on a topic that is
gone: it refreshes metadata and polls nothing. The service would then stay
ready and release nothing, or — with topics auto-created empty — read offsets
it never wrote. The loop therefore compares, every few seconds, what the
cluster says with what the stream's own state says:

* every input partition's end offset is at least the position the service
  committed (a smaller end: the log was deleted, truncated or replaced). The end
  is the log's end as a ``read_uncommitted`` client sees it (the high watermark),
  never the last stable offset: while an upstream transaction is open the last
  stable offset can be below a position already read (a position moves past the
  previous transaction's marker), and the embedded test broker then answers 0 for
  it, which read as "the log was emptied" and stopped a healthy scale-out
  releaser whenever a check fell inside a worker's transaction. The
  embedded test broker answers ListOffsets with its last *batch's* base offset
  + 1, below the true end, so a smaller end counts as a loss only when the
  partition is empty (end 0) or its last fetch's high watermark is below the
  committed position too (on Apache Kafka the end is exact and at least every
  earlier high watermark; a fetch past a truncated log fails on its own);
* the input topic still exists with the partitions the service reads;
* the consumer group still holds the checkpoint marker the service last
  committed on the state topic (``None`` or a smaller one: the group's offsets
  were lost, so the next start could not tell where it is);
* the output topic still exists.

The topics' existence and partitions come from one metadata request naming the
input and output topics only (:class:`stream.service.kafka_io.TopicMetadata`,
bounded at 5 s), never the metadata of every topic of a shared cluster.

Any of these is an operator matter, never repaired automatically (a reset
would re-read, re-count and re-release: ``docs/privacy.md`` §6, fail closed).
What is compared are offsets and sequence numbers the service itself wrote:
no data, nothing published.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["ClusterView", "cluster_loss", "CHECK", "CHECK_INTERVAL_S"]

#: the name of the readiness check (:class:`stream.service.http.Health`)
CHECK = "cluster"
#: seconds between two comparisons (each is one ListOffsets and one OffsetFetch request)
CHECK_INTERVAL_S = 5.0


@dataclass(frozen=True)
class ClusterView:
    """What the cluster answered (offsets only).

    Attributes:
        input_partitions: the input topic's partitions the cluster lists (empty: the topic is gone).
        input_ends: end offset per input partition (read_uncommitted: the high watermark).
        output_exists: whether the output topic exists.
        marker: the checkpoint sequence number the consumer group has committed (None: none).
        fetched_high: per input partition, the high watermark its last fetch reported (None: none yet).
    """

    input_partitions: frozenset[int]
    input_ends: Mapping[int, int]
    output_exists: bool
    marker: int | None
    fetched_high: Mapping[int, int | None] = field(default_factory=dict)


def cluster_loss(view: ClusterView, *, input_topic: str, output_topic: str, reading: frozenset[int],
                 committed: Mapping[int, int], committed_seq: int) -> str | None:
    """The first way the cluster contradicts the stream's state, as one operator-facing sentence; None if none.

    Args:
        reading: the input partitions the service reads.
        committed: per partition, the input offset of the last committed checkpoint.
        committed_seq: the sequence number of the last checkpoint committed to this cluster (0: none yet).
    """
    restore = ("the cluster lost data the stream's state depends on (deleted topics, or a cluster restored "
               "without its data); restore it, or start a new stream id: dpstream does not reset by itself")
    if not view.input_partitions:
        return f"input topic {input_topic} is gone: {restore}"
    missing = sorted(reading - view.input_partitions)
    if missing:
        return f"input topic {input_topic} lost partition(s) {', '.join(map(str, missing))}: {restore}"
    for p in sorted(reading):
        end, pos, high = view.input_ends.get(p), committed.get(p), view.fetched_high.get(p)
        if end is not None and pos is not None and end < pos and (end == 0 or high is None or high < pos):
            return (f"input partition {p} ends at offset {end}, before the position {pos} the stream committed: "
                    f"{restore}")
    if not view.output_exists:
        return f"output topic {output_topic} is gone: {restore}"
    if committed_seq > 0 and (view.marker is None or view.marker < committed_seq):
        held = "none" if view.marker is None else str(view.marker)
        return (f"the consumer group holds checkpoint {held} on the state topic, but checkpoint {committed_seq} "
                f"was committed: {restore}")
    return None
