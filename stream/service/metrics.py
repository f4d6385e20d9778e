"""Every Prometheus metric of the service, in one place.

Names follow the Prometheus conventions: namespace ``dpstream``, base units
in the name (``_seconds``), counters end in ``_total`` (added by the client
library), no ``_ms``, no app name inside the name. The registry is injected
(tests build their own; the service builds one per process), never the
global default.

What the metrics may carry (docs/privacy.md §9, the trust boundary):
operational totals over the service's whole life and public release facts
(how many releases of each kind, ε spent and remaining — all published in
every release message anyway), classified in :data:`CLASSES`. Never
per-timestep true counts, noise, thresholds or anything derived from one
timestep's data. ``events_consumed`` and the dead-letter / late totals
reveal input *volume*, so ``/metrics`` is an operator surface: keep it off
the public network.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from stream.ingest.events import DEAD_LETTER_REASONS, LATE_REASONS

__all__ = ["Metrics", "NAMESPACE", "LATENCY_BUCKETS", "CLASSES", "LABELS"]

#: Every metric family, by class (docs/privacy.md §9). ``public``: facts every release message
#: already states. ``volume``: totals of records/events over the service's life (input volume:
#: operator-only). ``health``: how the service itself is doing (durations, transactions, errors,
#: journal size, readiness). No class holds a per-timestep raw statistic: nothing here is reset
#: per timestep or labelled by timestep, and no value is computed from one timestep's counts.
#: ``tests/stream/service/test_metrics.py`` fails on a family missing here.
CLASSES: dict[str, str] = {
    "dpstream_timesteps_sealed": "public",
    "dpstream_releases": "public",
    "dpstream_releases_resent": "health",
    "dpstream_epsilon_spent": "public",
    "dpstream_epsilon_remaining": "public",
    "dpstream_epsilon_budget": "public",
    "dpstream_budget_exhausted": "public",
    "dpstream_last_released_timestep": "public",
    "dpstream_last_published_timestep": "public",
    "dpstream_build": "public",
    "dpstream_messages_consumed": "volume",
    "dpstream_events_consumed": "volume",
    "dpstream_events_accepted": "volume",
    "dpstream_dead_letters": "volume",
    "dpstream_late_events": "volume",
    "dpstream_arrived_after_seal": "volume",
    "dpstream_shuffle_rows_after_seal": "volume",
    "dpstream_consumer_lag_records": "volume",
    "dpstream_step_duration_seconds": "health",
    "dpstream_seal_to_publish_seconds": "health",
    "dpstream_checkpoint_duration_seconds": "health",
    "dpstream_journal_write_seconds": "health",
    "dpstream_journal_size_bytes": "health",
    "dpstream_journal_write_failures": "health",
    "dpstream_journal_write_blocked": "health",
    "dpstream_transactions": "health",
    "dpstream_kafka_errors": "health",
    "dpstream_recoveries": "health",
    "dpstream_last_release_timestamp_seconds": "health",
    "dpstream_timesteps_behind_schedule": "health",
    "dpstream_release_behind_schedule_seconds": "health",
    "dpstream_ready": "health",
    "dpstream_broker_connected": "health",
    "dpstream_broker_probe_failures": "health",
    "dpstream_cluster_lost": "health",
    "dpstream_start_time_seconds": "health",
    # declared queries (issue 33): released answers and detectors on them, one series per declared
    # query (and detector kind): computed from committed release messages and public configuration only
    "dpstream_query_value": "public",
    "dpstream_query_half_width": "public",
    "dpstream_query_detector_statistic": "public",
    "dpstream_query_alert_firing": "public",
    "dpstream_alerts": "public",
}
#: The only label names a metric may have, each with a closed set of values from code or configuration.
LABELS = frozenset({"reason", "kind", "outcome", "retriable", "partition", "query", "detector"})

NAMESPACE = "dpstream"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """The service's metrics, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        ns = NAMESPACE
        self.messages_consumed = Counter("messages_consumed", "Kafka records read from the input topic.",
                                         namespace=ns, registry=r)
        self.events_consumed = Counter(
            "events_consumed", "Events read from the input topic (every element of an array message; "
            "a message that cannot be parsed counts as one).", namespace=ns, registry=r)
        self.events_accepted = Counter("events_accepted", "Events accepted into an open timestep.",
                                       namespace=ns, registry=r)
        self.dead_letters = Counter("dead_letters", "Events or messages sent to the dead-letter topic, by reason.",
                                    ["reason"], namespace=ns, registry=r)
        for reason in (*DEAD_LETTER_REASONS, "internal_error"):
            self.dead_letters.labels(reason)
        self.late_events = Counter("late_events", "Events for an already sealed timestep, sent to the late topic.",
                                   namespace=ns, registry=r)
        self.arrived_after_seal = Counter(
            "arrived_after_seal", "Late events whose own record time was within their timestep's deadline "
            "but that were read after it was released (broker clock behind the wall clock by more than "
            "stream.clock_skew); a subset of late_events.", namespace=ns, registry=r)
        self.shuffle_after_seal = Counter(
            "shuffle_rows_after_seal", "Scale-out releaser: rows a worker handed over for a timestep already "
            "released (its partition's broker clock lagged by more than stream.clock_skew); dropped, like "
            "arrived_after_seal in one process.", namespace=ns, registry=r)
        self.timesteps_sealed = Counter("timesteps_sealed", "Timesteps sealed (each gets exactly one release).",
                                        namespace=ns, registry=r)
        self.releases = Counter("releases", "Releases published, by kind (fresh | republished).", ["kind"],
                                namespace=ns, registry=r)
        for kind in ("fresh", "republished"):
            self.releases.labels(kind)
        self.releases_resent = Counter(
            "releases_resent", "Journaled releases re-sent byte for byte after a restart (no new noise).",
            namespace=ns, registry=r)
        self.epsilon_spent = Gauge("epsilon_spent", "Privacy budget ε spent so far (public: in every release).",
                                   namespace=ns, registry=r)
        self.epsilon_remaining = Gauge(
            "epsilon_remaining", "ε still available (user-level: of the total; w-event: in the current window).",
            namespace=ns, registry=r)
        self.epsilon_budget = Gauge("epsilon_budget", "The configured ε (user-level total, or per window).",
                                    namespace=ns, registry=r)
        self.budget_exhausted = Gauge(
            "budget_exhausted", "1 when no fresh release is possible any more (user-level: after C fresh "
            "releases, N for uniform, or ε spent); every timestep is then republished, which is normal.",
            namespace=ns, registry=r)
        self.consumer_lag = Gauge("consumer_lag_records", "Input records not yet read, per partition.",
                                  ["partition"], namespace=ns, registry=r)
        self.step_duration = Histogram("step_duration_seconds", "Time to seal one timestep and step the engine.",
                                       namespace=ns, registry=r, buckets=LATENCY_BUCKETS)
        self.seal_to_publish = Histogram(
            "seal_to_publish_seconds", "From a timestep's seal to its release's transaction being committed.",
            namespace=ns, registry=r, buckets=LATENCY_BUCKETS)
        self.checkpoint_duration = Histogram(
            "checkpoint_duration_seconds", "Journal write + fsync + Kafka transaction of one checkpoint.",
            namespace=ns, registry=r, buckets=LATENCY_BUCKETS)
        self.journal_fsync = Histogram("journal_write_seconds", "Journal append including fsync.",
                                       namespace=ns, registry=r, buckets=LATENCY_BUCKETS)
        self.journal_bytes = Gauge("journal_size_bytes", "Size of the privacy journal file.", namespace=ns,
                                   registry=r)
        self.journal_write_failures = Counter(
            "journal_write_failures", "Journal appends or compactions that failed (disk full, I/O error); an "
            "append is retried with the same bytes, nothing is published meanwhile.", namespace=ns, registry=r)
        self.journal_blocked = Gauge(
            "journal_write_blocked", "1 while releases are stopped because the journal cannot be written "
            "(free disk space in service.state_dir; the service resumes by itself).", namespace=ns, registry=r)
        self.transactions = Counter("transactions", "Kafka transactions, by outcome (committed | failed).",
                                    ["outcome"], namespace=ns, registry=r)
        for outcome in ("committed", "failed"):
            self.transactions.labels(outcome)
        self.kafka_errors = Counter("kafka_errors", "Kafka operation failures, by retriability.", ["retriable"],
                                    namespace=ns, registry=r)
        for retriable in ("true", "false"):  # exported as 0 from the start (dashboards and rate() see them)
            self.kafka_errors.labels(retriable)
        self.recoveries = Counter("recoveries", "Start-ups that re-sent an uncommitted journaled checkpoint.",
                                  namespace=ns, registry=r)
        self.last_release_time = Gauge("last_release_timestamp_seconds",
                                       "Wall time of the last committed release (Unix seconds).",
                                       namespace=ns, registry=r)
        self.timesteps_behind_schedule = Counter(
            "timesteps_behind_schedule", "service.publish: on-schedule: timesteps not complete by their scheduled "
            "release time (deadline + stream.clock_skew + service.publish_margin), released late once complete "
            "(broker lag, a backlog after downtime); each counted once.", namespace=ns, registry=r)
        self.behind_schedule = Gauge(
            "release_behind_schedule_seconds", "service.publish: on-schedule: how far past its scheduled release "
            "time the next timestep is while it waits to be complete (0: on schedule).", namespace=ns, registry=r)
        self.last_timestep = Gauge("last_released_timestep", "Index of the last timestep released (its noise "
                                   "drawn, journaled and committed).", namespace=ns, registry=r)
        self.last_published = Gauge(
            "last_published_timestep", "Index of the last timestep whose release message is on the output topic: "
            "last_released_timestep - release.delay while the stream runs (equal without a delay; -1 until the "
            "first one, timestep 0 being published at timestep release.delay).", namespace=ns, registry=r)
        self.last_published.set(-1)
        self.ready = Gauge("ready", "1 when /readyz answers 200: recovered, last transaction committed, journal "
                           "writable, broker reachable, release loop turning.", namespace=ns, registry=r)
        self.broker_connected = Gauge(
            "broker_connected", "1 while the Kafka cluster answers the broker probe (ListOffsets of the input "
            "topic), 0 after it failed twice in a row (stream/service/probe.py).", namespace=ns, registry=r)
        self.cluster_lost = Gauge(
            "cluster_lost", "1 while the Kafka cluster contradicts the stream's committed state (an input "
            "partition ends before the committed position, a topic or the checkpoint marker is gone: "
            "stream/service/integrity.py); the service stops, or waits with service.on_cluster_loss: wait.",
            namespace=ns, registry=r)
        self.broker_probe_failures = Counter(
            "broker_probe_failures", "Broker probes that failed (timed out or refused).", namespace=ns, registry=r)
        self.start_time = Gauge("start_time_seconds", "When this process started (Unix seconds): the alert on "
                                "stalled releases counts from here until the first release.",
                                namespace=ns, registry=r)
        self.start_time.set_to_current_time()
        self.query_value = Gauge(
            "query_value", "A declared query's answer in the last committed release (configuration queries:; "
            "post-processing of the release message, which carries it).", ["query"], namespace=ns, registry=r)
        self.query_half_width = Gauge(
            "query_half_width", "Half-width of that answer's accuracy interval at the release's confidence "
            "(NaN: no interval claimed).", ["query"], namespace=ns, registry=r)
        self.query_statistic = Gauge(
            "query_detector_statistic", "A detector's statistic after the last fresh release (threshold: the "
            "answer; cusum, ewma: the chart in standard deviations); NaN until it has a baseline.",
            ["query", "detector"], namespace=ns, registry=r)
        self.query_firing = Gauge(
            "query_alert_firing", "1 when the detector fired on the last fresh release of the query, else 0.",
            ["query", "detector"], namespace=ns, registry=r)
        self.alerts = Counter("alerts", "Alert events published on the alerts topic, by query and detector.",
                              ["query", "detector"], namespace=ns, registry=r)
        self.info = Info("build", "Stream identity and method (public configuration).", namespace=ns, registry=r)

    # -- helpers used by the service ------------------------------------------------
    def track_ready(self, is_ready: Callable[[], bool]) -> None:
        """``dpstream_ready`` reads ``is_ready()`` at every scrape: it always agrees with ``/readyz``."""
        self.ready.set_function(lambda: 1.0 if is_ready() else 0.0)

    def declare_queries(self, queries: list[tuple[str, list[str]]]) -> None:
        """Export one series per declared query and detector from the start (0 / NaN until released)."""
        for name, detectors in queries:
            self.query_value.labels(name).set(float("nan"))
            self.query_half_width.labels(name).set(float("nan"))
            for d in detectors:
                self.query_statistic.labels(name, d).set(float("nan"))
                self.query_firing.labels(name, d).set(0)
                self.alerts.labels(name, d)

    def set_budget(self, *, budget: Fraction, spent: Fraction, remaining: Fraction, exhausted: bool) -> None:
        self.epsilon_budget.set(float(budget))
        self.epsilon_spent.set(float(spent))
        self.epsilon_remaining.set(float(max(Fraction(0), remaining)))
        self.budget_exhausted.set(1 if exhausted else 0)

    def count_rejections(self, counts: dict[str, int]) -> None:
        for reason, n in counts.items():
            if reason in LATE_REASONS:
                self.late_events.inc(n)
                if reason == "arrived_after_seal":
                    self.arrived_after_seal.inc(n)
            else:
                self.dead_letters.labels(reason).inc(n)
