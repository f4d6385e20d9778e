"""The population ledger file: several streams' declarations over the same people, shared on disk.

One JSON file (``service.population_ledger``, default
``<state_dir>/populations.json``) holds every declared population
(:class:`controller.population.PopulationLedger`). Streams that share a
population must point at the same file (same host or a shared volume).
A stream registers at start-up, before it reads any input:

* the file is locked (``fcntl.flock`` on ``<file>.lock``), so two streams
  starting at once are serialised: they cannot both pass the cap;
* the new contents are written to a temporary file, fsynced, renamed over
  the old one and the directory fsynced: a crash leaves the old or the new
  ledger, never a torn one;
* registering the same stream with the same declaration again (a restart)
  changes nothing.

A refusal (:class:`controller.population.PopulationRefused`) stops the
service with exit code 2 and a message naming the streams involved.
"""

from __future__ import annotations

import fcntl
import json
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

from controller.population import PopulationEntry, PopulationLedger, PopulationRefused

__all__ = ["ledger_path", "register_stream", "read_ledgers", "entry_for", "PopulationRefused"]


def ledger_path(settings: Any) -> Path:
    """Where the population ledger of ``settings`` lives."""
    explicit = settings.service.population_ledger
    return Path(explicit) if explicit else Path(settings.service.state_dir) / "populations.json"


def entry_for(settings: Any) -> PopulationEntry:
    """This stream's declaration: its id, unit and ε (w-event: per window of ``w``).

    With ``privacy.personal`` a person loses up to their own tier's ε in this stream, and a tier
    may be above ``privacy.epsilon``: the entry registers the largest declared ε (every tier and
    the default), so the population's sum bounds the loss of a person of any tier in every stream
    (``docs/privacy.md`` §10). Registering only ``privacy.epsilon`` would let two streams with a
    research tier at ε = 2 both pass a cap of 2 while a research-tier person loses 4.
    """
    p = settings.privacy
    epsilon = Fraction(p.epsilon)
    if p.personal is not None:
        epsilon = max(epsilon, *(Fraction(e) for e in p.personal.tiers.values()))
    return PopulationEntry(settings.stream.id, p.unit, epsilon, p.w if p.unit == "w-event" else None)


def read_ledgers(path: Path) -> dict[str, PopulationLedger]:
    """Every population in the file (empty when it does not exist)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise PopulationRefused(f"the population ledger {path} cannot be read ({exc}); restore it from backup: "
                                "without it the streams over the same people cannot be added up") from exc
    return {p["name"]: PopulationLedger.from_json(p) for p in data.get("populations", [])}


def _write(path: Path, ledgers: dict[str, PopulationLedger]) -> None:
    doc = {"format": "dpstream-populations-v1",
           "populations": [ledgers[n].to_json() for n in sorted(ledgers)]}
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def register_stream(path: Path, name: str, cap: Fraction, entry: PopulationEntry) -> PopulationLedger:
    """Register ``entry`` in population ``name`` (cap ``cap``) in the file at ``path``; the new ledger.

    Raises:
        PopulationRefused: see :meth:`controller.population.PopulationLedger.register`, or an unreadable file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            ledgers = read_ledgers(path)
            current = ledgers.get(name, PopulationLedger(name, Fraction(cap)))
            updated = current.register(entry, Fraction(cap))
            if updated != current:
                _write(path, {**ledgers, name: updated})
            return updated
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
