"""``input.*``, ``kafka.*`` and ``service.*``: how the service reads, writes and runs."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import (
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from stream.config.values import Duration, Section


class SchemaRegistrySection(Section):
    """``input.schema_registry.*``: a Confluent-compatible Schema Registry the writer schemas come from.

    Schemas are fetched by id (``GET /schemas/ids/{id}``) the first time a record names one and
    kept in a bounded cache (``cache_size`` ids, least recently used out). While the registry
    cannot be reached, records whose schema id is cached decode as usual; the others are
    dead-lettered as ``schema_unavailable`` (their bytes intact, to replay) and ``/readyz`` names
    the outage; the registry is asked again at most every ``retry_backoff``.
    """

    url: str = Field(min_length=1, pattern=r"^https?://")
    basic_auth_username: str | None = None
    #: a secret (:data:`SECRET_SETTINGS`): give it as DPSTREAM_INPUT__SCHEMA_REGISTRY__BASIC_AUTH_PASSWORD
    basic_auth_password: SecretStr | None = None
    #: TLS like ``kafka.ssl_*``: the CA bundle that signs the registry's certificate, and a client
    #: certificate and key for mutual TLS
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    timeout: Duration = timedelta(seconds=5)
    cache_size: int = Field(default=1000, ge=1)
    retry_backoff: Duration = timedelta(seconds=10)

    @model_validator(mode="after")
    def _pairs(self) -> SchemaRegistrySection:
        if (self.basic_auth_username is None) != (self.basic_auth_password is None):
            raise ValueError("basic auth needs both input.schema_registry.basic_auth_username and "
                             "basic_auth_password (the password as DPSTREAM_INPUT__SCHEMA_REGISTRY__BASIC_AUTH_PASSWORD)")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("mutual TLS needs both input.schema_registry.ssl_certfile and ssl_keyfile")
        if self.timeout <= timedelta(0):
            raise ValueError("input.schema_registry.timeout must be > 0")
        return self


class InputSection(Section):
    """``input.*``: how the input topic's record values are encoded.

    ``json`` (default): the JSON events of the consumer guide. ``avro``, ``protobuf``,
    ``jsonschema``: one record per Kafka message in the Schema Registry wire format (byte 0, a
    4-byte big-endian schema id, for Protobuf the message indexes, then the body), the writer
    schema from ``schema_registry`` or from local ``schemas`` files (air-gapped). Fields are
    addressed by path from the record's root: ``schema.user_id``, ``schema.event_time`` and each
    attribute's name (or its entry in ``fields``), dots for nested records (``patient.id``).
    """

    format: Literal["json", "avro", "protobuf", "jsonschema"] = "json"
    schema_registry: SchemaRegistrySection | None = None
    #: schema id → file: ``.avsc`` (Avro), ``.desc``/``.binpb`` (a Protobuf FileDescriptorSet, as
    #: ``protoc --include_imports --descriptor_set_out`` writes), ``.proto`` (needs ``protoc`` on the
    #: PATH at start-up), ``.json`` (JSON Schema). Used instead of a registry, or before asking it.
    schemas: dict[int, str] = Field(default_factory=dict)
    #: attribute name → path of its field in the record (default: the attribute's name)
    fields: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _source(self) -> InputSection:
        if self.format == "json":
            if self.schema_registry is not None or self.schemas or self.fields:
                raise ValueError("input.schema_registry, input.schemas and input.fields apply to input.format "
                                 "avro, protobuf or jsonschema; input.format is json (the default): set the format "
                                 "or remove them")
            return self
        if self.schema_registry is None and not self.schemas:
            raise ValueError(f"input.format {self.format} needs the writer schemas: set input.schema_registry.url, "
                             "or input.schemas (schema id → file) for an air-gapped deployment")
        for sid in self.schemas:
            if not 0 <= sid < 2**32:
                raise ValueError(f"input.schemas: {sid} is not a schema id (0 to 2^32-1)")
        return self


class KafkaSection(Section):
    """``kafka.*``: where the service reads and writes."""

    bootstrap_servers: str = "127.0.0.1:9092"
    input_topic: str = "dpstream.events"
    #: Which clock decides inclusion (``docs/privacy.md`` §1.1). ``log-append-time``: each event's
    #: own record timestamp, stamped by the broker (the input topic must have
    #: ``message.timestamp.type=LogAppendTime``; checked at start-up, the service refuses when it
    #: cannot confirm it). ``trusted-create-time``: the producer's record timestamp, for producers
    #: the operator controls (a producer that lies about time can then only misfile its own
    #: events). ``watermark``: the legacy rule (largest event time − allowed_lateness, idle
    #: sealing), whose inclusion depends on other people's events: NOT covered by the privacy
    #: proof, refused unless ``allow_data_dependent_inclusion: true``. Default ``log-append-time``.
    record_time: Literal["watermark", "log-append-time", "trusted-create-time"] = "log-append-time"
    #: The explicit opt-out that ``record_time: watermark`` needs (validation refuses it otherwise):
    #: the operator confirms that which events count may then depend on other people's events,
    #: so the per-timestep sensitivity the proofs assume does not hold (``docs/privacy.md`` §1).
    allow_data_dependent_inclusion: bool = False
    output_topic: str = "dpstream.releases"
    dead_letter_topic: str = "dpstream.dead-letters"
    late_topic: str = "dpstream.late"
    state_topic: str = "dpstream.state"
    group_id: str = "dpstream"
    #: Scale-out (``service.role`` worker/releaser): the internal topic where workers hand the
    #: releaser their accepted rows and per-partition completeness (default
    #: ``<input_topic>.<stream id>.shuffle``). Holds raw per-person rows: protect it like the input.
    shuffle_topic: str | None = None
    transactional_id: str | None = None
    client_id: str = "dpstream"
    create_topics: bool = True
    topic_partitions: int = 1
    replication_factor: int = 1
    max_poll_records: int = 2000
    #: bytes one fetch may return per partition (kafka-python's default is 1 MiB: one round trip
    #: per ~13 500-event messages, which left scale-out workers waiting on fetches; see
    #: docs/scale-out.md). Memory: up to this much buffered per assigned partition.
    max_partition_fetch_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_poll_interval_ms: int = 300_000
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    request_timeout_ms: int = 30_000
    transaction_timeout_ms: int = 60_000
    max_request_size: int = Field(default=1_048_576, ge=1024)
    startup_tail_records: int = Field(default=1000, ge=1)
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_plain_username: str | None = None
    #: a secret (:data:`SECRET_SETTINGS`): give it as DPSTREAM_KAFKA__SASL_PLAIN_PASSWORD, not in the file
    sasl_plain_password: SecretStr | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    @field_validator("topic_partitions", "replication_factor", "max_poll_records", "max_poll_interval_ms",
                     "session_timeout_ms", "heartbeat_interval_ms", "request_timeout_ms",
                     "transaction_timeout_ms")
    @classmethod
    def _positive_count(cls, v: int) -> int:
        if v < 1:
            raise ValueError(f"{v} is not a positive count; set a whole number >= 1")
        return v


class ServiceSection(Section):
    """``service.*``: the process around the pipeline."""

    http_host: str = "127.0.0.1"
    #: TCP port of /metrics, /healthz, /readyz (0: any free port, printed at start-up)
    http_port: int = 8000
    #: the public port (releases, the domain message and the live page only: docs/api.md);
    #: None (the default) serves no public port, 0 any free port (tests)
    public_host: str = "127.0.0.1"
    public_port: int | None = Field(default=None, ge=0, le=65535)
    #: how many of the latest releases the public port keeps in memory (and at most
    #: ``public_history_bytes`` of them); older timesteps are read from the output topic
    public_history: int = Field(default=1000, ge=1)
    public_history_bytes: int = Field(default=64 << 20, ge=1)
    state_dir: str = "./dpstream-state"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    max_message_bytes: int = 1_048_576
    max_events_per_message: int = 10_000
    commit_interval: Duration = timedelta(seconds=1)
    poll_timeout: Duration = timedelta(milliseconds=200)
    shutdown_timeout: Duration = timedelta(seconds=30)
    max_buffered_records: int = Field(default=10_000, ge=1)
    #: at most this many releases per checkpoint (one journal frame, one transaction): a backlog of
    #: complete timesteps (a restart after downtime, a start far in the past) is released in
    #: checkpoints of this size, one after another, so memory and the journal are bounded by it and
    #: the open timesteps, not by the backlog (issue 28 measured ~24 KB of journal and ~230 KB of
    #: memory per release held, at 4,096 bins)
    max_releases_per_checkpoint: int = Field(default=100, ge=1)
    #: the population ledger file shared by the streams of a ``privacy.shared_population``
    #: (default ``<state_dir>/populations.json``; streams of one population must point at one file)
    population_ledger: str | None = None
    #: ``single``: one process reads every input partition and releases (the default).
    #: ``worker``: one of several processes in the consumer group ``kafka.group_id``; reads the
    #: partitions the group assigns it, decides inclusion and hands accepted rows to the releaser
    #: over ``kafka.shuffle_topic``. ``releaser``: exactly one per stream; merges the workers'
    #: rows, seals timesteps once every input partition is complete, releases (docs/scale-out.md).
    role: Literal["single", "worker", "releaser"] = "single"
    #: a worker's stable name (its transactional id); default: the host name
    worker_id: str | None = None
    #: compact the privacy journal once it exceeds this many bytes (default: automatic,
    #: max(1 MiB, 4 × its size right after the last compaction), so disk and restart time stay
    #: bounded by one snapshot; 0 compacts after every checkpoint)
    journal_compact_bytes: int | None = Field(default=None, ge=0)
    #: what to do when the Kafka cluster no longer holds what the stream committed (an input partition
    #: ends before the committed position, the input or output topic or the checkpoint marker is gone:
    #: a cluster restored without its data). ``stop`` (default): not ready, one ERROR line, exit 1; the
    #: next start refuses with the reason. ``wait``: not ready, read and release nothing, resume when the
    #: cluster matches again (an operator restoring it). Never a reset (stream/service/integrity.py).
    on_cluster_loss: Literal["stop", "wait"] = "stop"
    #: When a complete timestep is released (docs/privacy.md §1.3). ``on-schedule`` (the default):
    #: timestep c is released at the public wall-clock time D(c) + ``stream.clock_skew`` +
    #: ``publish_margin`` (D(c): its end + ``stream.allowed_lateness``), never earlier, and once it
    #: is complete; its output record carries that scheduled time as its timestamp, so neither
    #: reveals whether someone sent an event in the seconds after the deadline.
    #: ``when-complete``: as soon as every partition is known past D(c) (earlier on a busy stream,
    #: but the release time then depends on other people's records).
    publish: Literal["on-schedule", "when-complete"] = "on-schedule"
    #: ``publish: on-schedule``: extra wait after D(c) + clock_skew (reading a partition to its end
    #: and the workers' hand-over take a moment); a release later than its schedule is counted in
    #: ``dpstream_timesteps_behind_schedule_total``
    publish_margin: Duration = timedelta(seconds=1)

    @model_validator(mode="after")
    def _margin_needs_schedule(self) -> ServiceSection:
        if self.publish == "when-complete" and "publish_margin" in self.model_fields_set:
            raise ValueError("service.publish_margin is set but service.publish is when-complete, which never "
                             "waits for a schedule: remove service.publish_margin, or set service.publish: "
                             "on-schedule")
        return self

    @model_validator(mode="after")
    def _distinct_ports(self) -> ServiceSection:
        if self.public_port and self.public_port == self.http_port:
            raise ValueError(f"service.public_port {self.public_port} is also service.http_port: the public "
                             "port must not serve /metrics; choose another port")
        return self

    @field_validator("http_port")
    @classmethod
    def _port(cls, v: int) -> int:
        if not 0 <= v <= 65535:
            raise ValueError(f"{v} is not a valid port (1–65535, or 0 for any free port); "
                             "set service.http_port to a free port such as 8000")
        return v

    @field_validator("max_message_bytes", "max_events_per_message")
    @classmethod
    def _positive_count(cls, v: int) -> int:
        if v < 1:
            raise ValueError(f"{v} is not a positive count; set a whole number >= 1")
        return v

    @field_validator("commit_interval", "poll_timeout", "shutdown_timeout")
    @classmethod
    def _positive_service_duration(cls, v: timedelta) -> timedelta:
        if v <= timedelta(0):
            raise ValueError("must be > 0")
        return v

    @field_validator("publish_margin")
    @classmethod
    def _publish_margin(cls, v: timedelta) -> timedelta:
        if v <= timedelta(0):
            raise ValueError(f"service.publish_margin is {v.total_seconds():g}s: at exactly deadline + "
                             "stream.clock_skew a quiet partition is not yet known past the deadline, so every "
                             "release would run behind its schedule; set it above 0 (e.g. 1s, more than the "
                             "workers' service.commit_interval with scale-out)")
        return v
