"""How the service process stops: SIGTERM/SIGINT only set the stop flag (the loop finishes its
iteration, checkpoints and exits 0), and a watchdog ends a process whose loop is stuck after a
stop was asked (e.g. a hanging commit) once ``service.shutdown_timeout`` has passed. Leaving
then is safe: the journal makes the next start re-send, never redraw.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any

from stream.service.logs import get_logger, log

__all__ = ["install_signals", "watchdog"]

_log = get_logger("service")


def install_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT set ``stop`` and nothing else (call from the main thread)."""

    def handler(signum: int, frame: Any) -> None:  # only sets the flag
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)


def watchdog(stop: threading.Event, finished: threading.Event, timeout_s: float, exit_code: int) -> None:
    """If a stop was requested and the loop is stuck (e.g. a hanging commit), leave with ``exit_code``
    after ``timeout_s`` seconds (run it in a daemon thread; ``finished``: the loop returned)."""
    stop.wait()
    if not finished.wait(timeout_s):
        log(_log, logging.ERROR, "shutdown timed out; exiting (the journal makes the next start safe)",
            timeout_seconds=timeout_s)
        os._exit(exit_code)
