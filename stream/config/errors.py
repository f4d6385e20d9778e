"""What an invalid configuration raises, and which settings are secrets (never shown)."""

from __future__ import annotations

#: environment variables that override settings: ``DPSTREAM_<SECTION>__<NAME>``
ENV_PREFIX = "DPSTREAM_"


class ConfigError(ValueError):
    """The configuration is invalid; the message lists every problem found, one line each.

    Each line names the setting (dotted path, e.g. ``service.http_port``), the
    value found (never a secret's) and what to do. ``lines`` holds them.
    """

    def __init__(self, *lines: str) -> None:
        self.lines: tuple[str, ...] = tuple(line for text in lines for line in text.splitlines() if line.strip())
        super().__init__("\n".join(self.lines))


#: Settings whose values are secrets: ``SecretStr`` in the model, never shown in an error, a log,
#: ``repr`` or a dump; only :func:`stream.service.kafka_io.client_options` reads them in clear.
SECRET_SETTINGS: frozenset[str] = frozenset({"kafka.sasl_plain_password",
                                             "input.schema_registry.basic_auth_password"})
