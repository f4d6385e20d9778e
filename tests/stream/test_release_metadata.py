"""Released metadata is a function of public configuration and already-released values only.

Every release message carries, besides the noisy counts, metadata:
``release_id``, ``timestep``, ``kind``, ``method``, ``accuracy`` (confidence,
half_width, source_timestep, ε), the ε spent (total, window, budget), the
number of fresh releases, the config fingerprint, and PSD's ``details`` (the
released tree). The audit runs a stream ``D`` and its neighbour ``D'`` (one
more person, one record in some bin at every timestep) through the real
release path — ``Engine.step`` → ``MessageBuilder.release_with_bytes`` → the
canonical bytes — with the *same recorded noise* (``RecordingDrawer`` on
``D``, ``ReplayDrawer`` on ``D'``), and compares the bytes of each message
with the noisy values removed (``counts``, and the numbers inside
``details``, whose structure is still compared):

* for methods whose decision is a public schedule (uniform, fixed), the two
  message sequences must be byte-identical at every timestep, ``kind``
  included;
* for data-dependent decisions (dsat, dsft, bd, ba) ``kind`` is itself the
  noisy decision (audited in ``tests/controller``); at every timestep where the
  two runs have taken the same decisions so far, everything else must be
  byte-identical.

Any metadata field computed from the raw counts (rather than from
configuration and the decisions) differs between neighbours for some
timestep and fails. The broken variants below are caught.

PSD's ``half_width`` is the one metadata field that is not public: it is
computed from the released tree (``max(count − lower, upper − count)`` over
the bin's leaf, the leaf's ``lower``/``upper`` being released in
``details.tree.leaves``), so it moves with the noisy values and is left out
of the neighbour comparison. Instead the audit recomputes it from the
released message alone (a fresh message's counts and tree; a republished
message repeats its source's widths) and requires equality: a width that
reads anything unreleased fails (the broken variant "psd width from the raw
counts").
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from controller.method import GROUPED_METHODS, METHODS, W_EVENT_METHODS
from controller.step import Engine
from histogram.testing import RecordingDrawer, ReplayDrawer, ReplayThenFresh
from stream.messages import MessageBuilder
from stream.service.testing import small_settings

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PUBLIC_SCHEDULE = {"uniform", "fixed"}
STEPS = 24


def _settings(decision: str, mechanism: str, unit: str):  # type: ignore[no-untyped-def]
    privacy = (
        {"unit": "w-event", "w": 4, "cutoff": 2, "horizon": None}
        if unit == "w-event"
        else {"unit": "user-level", "horizon": STEPS + 1, "cutoff": 6}
    )
    return small_settings(1, privacy=privacy, release={"decision": decision, "mechanism": mechanism})


def neighbours(bins: int, seed: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """D: a changing population; D': D plus one person, in a different bin each timestep."""
    rng = np.random.default_rng(seed)
    d = np.zeros((STEPS, bins), dtype=np.int64)
    base = rng.integers(0, 12, bins)
    for t in range(STEPS):
        if t % 5 == 0:
            base = rng.integers(0, 12, bins)
        d[t] = base
    extra = np.zeros_like(d)
    extra[np.arange(STEPS), rng.integers(0, bins, STEPS)] = 1
    return d, d + extra


def _structure(obj):  # type: ignore[no-untyped-def]
    """The shape of ``details`` without its noisy numbers."""
    if isinstance(obj, dict):
        return {k: _structure(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_structure(v) for v in obj]
    return type(obj).__name__


def metadata_bytes(message_bytes: bytes) -> bytes:
    doc = json.loads(message_bytes)
    doc.pop("counts")
    if doc["method"]["mechanism"] == "psd":  # noise-derived, checked by psd_width_mismatches instead
        doc["accuracy"].pop("half_width")
    if "details" in doc:
        doc["details"] = _structure(doc["details"])
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _plain_step(engine: Engine, state, counts, drawer):  # type: ignore[no-untyped-def]
    return engine.step(state, counts, drawer)


def run_pair(settings, step=_plain_step):  # type: ignore[no-untyped-def]
    """(kinds, metadata bytes, counts) per timestep for D and D' on the same recorded noise."""
    engine, builder = settings.engine(), MessageBuilder(settings)
    d, d2 = neighbours(settings.domain().size)
    rnd = settings.noise_source()
    out = []
    for data, record in ((d, True), (d2, False)):
        state, tapes, rows = engine.initial_state(), [], []
        for t, counts in enumerate(data):
            if record:
                drawer = RecordingDrawer(rnd.drawer(settings.stream.id, t))
            elif settings.release.decision in GROUPED_METHODS:  # draw sizes follow the (noisy) groups
                drawer = ReplayThenFresh(out[0][1][t], rnd.drawer(settings.stream.id + "'", t))  # AdaPub, RescueDP: groups follow releases
            else:
                drawer = ReplayDrawer(out[0][1][t]) if t < len(out[0][1]) else None
            release, state = step(engine, state, counts, drawer)
            if record:
                tapes.append(drawer.tape)
            start = T0 + timedelta(minutes=t)
            _, raw = builder.release_with_bytes(release, start, start + timedelta(minutes=1))
            rows.append((release.kind, metadata_bytes(raw), json.loads(raw)["counts"], raw))
        out.append((rows, tapes))
    return out[0][0], out[1][0]


def differences(settings, step=_plain_step) -> tuple[list[int], int, int]:  # type: ignore[no-untyped-def]
    """(timesteps whose metadata differ, timesteps compared, timesteps whose counts differ)."""
    a, b = run_pair(settings, step)
    public = settings.release.decision in PUBLIC_SCHEDULE
    bad, compared, counts_differ = [], 0, 0
    for t in range(STEPS):
        same_decisions = [r[0] for r in a[: t + 1]] == [r[0] for r in b[: t + 1]]
        if not (public or same_decisions):
            continue
        compared += 1
        counts_differ += a[t][2] != b[t][2]
        if a[t][1] != b[t][1] or (public and a[t][0] != b[t][0]):
            bad.append(t)
    return bad, compared, counts_differ


CASES = [(m, "lpa", u) for m in METHODS for u in ("user-level", "w-event") if not (m in W_EVENT_METHODS and u == "user-level")]
CASES += [("uniform", "psd", "user-level"), ("dsat", "psd", "w-event")]


@pytest.mark.parametrize(("decision", "mechanism", "unit"), CASES, ids=["-".join(c) for c in CASES])
def test_metadata_is_identical_on_neighbours(decision, mechanism, unit):
    bad, compared, counts_differ = differences(_settings(decision, mechanism, unit))
    assert bad == [], f"metadata differ between neighbours at timesteps {bad}"
    assert compared >= STEPS // 2, "too few comparable timesteps: the audit would be vacuous"
    assert counts_differ > 0, "the neighbours never changed a released count: the pair is not a neighbour"


def _widths(doc) -> np.ndarray:  # type: ignore[no-untyped-def]
    hw = doc["accuracy"]["half_width"]
    n = len(doc["counts"])
    return np.full(n, np.inf if hw is None else hw) if not isinstance(hw, list) else np.array(
        [np.inf if v is None else v for v in hw]
    )


def psd_width_mismatches(raws: list[bytes]) -> list[int]:
    """Timesteps whose PSD half_width is not what the released message determines."""
    from histogram.psd.tree import PSDTree

    bad, source = [], None
    for t, raw in enumerate(raws):
        doc = json.loads(raw)
        got = _widths(doc)
        if doc["kind"] == "fresh":
            tree = PSDTree.from_description(doc["details"]["tree"])
            ids = tree.leaf_of_bin()
            out = np.asarray(doc["counts"], dtype=np.float64)
            lower = np.where(tree.volume == 1, np.asarray(tree.lower), 0.0)[ids]
            expected = np.maximum(out - lower, np.asarray(tree.upper)[ids] - out)
            source = got
            ok = np.allclose(got, expected, rtol=0, atol=1e-5)
        else:
            ok = source is not None and np.array_equal(got, source) or source is None and np.all(np.isinf(got))
        if not ok:
            bad.append(t)
    return bad


@pytest.mark.parametrize("data", ["D", "D'"])
@pytest.mark.parametrize(("decision", "unit"), [("uniform", "user-level"), ("dsat", "w-event")])
def test_psd_half_width_is_a_function_of_the_release(decision, unit, data):
    a, b = run_pair(_settings(decision, "psd", unit))
    rows = a if data == "D" else b
    assert sum(r[0] == "fresh" for r in rows) >= 3
    assert psd_width_mismatches([r[3] for r in rows]) == []


def _psd_width_from_raw(engine, state, counts, drawer):  # type: ignore[no-untyped-def]
    """PSD widths tightened to the realised error |released − raw| + 1 (reads the raw counts)."""
    release, new = engine.step(state, counts, drawer)
    if release.kind == "fresh":
        gap = np.abs(np.asarray(release.counts, dtype=np.float64) - counts)
        release = replace(release, half_width=np.minimum(np.asarray(release.half_width), gap + 1))
    return release, new


def test_psd_width_from_raw_counts_is_caught():
    a, _ = run_pair(_settings("uniform", "psd", "user-level"), BROKEN["psd half_width from the raw counts"])
    assert psd_width_mismatches([r[3] for r in a])


# -- broken variants: metadata computed from the raw counts


def _leaks_width(engine, state, counts, drawer):  # type: ignore[no-untyped-def]
    """half_width clipped at the true count (intervals 'cannot go below zero')."""
    release, new = engine.step(state, counts, drawer)
    width = np.minimum(np.asarray(release.half_width, dtype=np.float64), counts.astype(np.float64))
    return replace(release, half_width=width), new


def _leaks_kind(engine, state, counts, drawer):  # type: ignore[no-untyped-def]
    """Labels a timestep 'fresh' when its true total changed (a raw test, uncharged)."""
    release, new = engine.step(state, counts, drawer)
    return replace(release, kind="fresh" if int(counts.sum()) % 2 else "republished"), new


def _leaks_confidence(engine, state, counts, drawer):  # type: ignore[no-untyped-def]
    """Confidence nudged by the raw population (a 'data-aware' accuracy claim)."""
    release, new = engine.step(state, counts, drawer)
    return replace(release, confidence=min(0.99, release.confidence + int(counts.sum()) * 1e-6)), new


def _leaks_details(engine, state, counts, drawer):  # type: ignore[no-untyped-def]
    """An extra detail present only when a bin is empty in the raw data."""
    release, new = engine.step(state, counts, drawer)
    extra = {"empty_bins": True} if (counts == 0).any() else {}
    return replace(release, details={**release.details, **extra}), new


BROKEN = {
    "psd half_width from the raw counts": _psd_width_from_raw,
    "half_width from the raw counts": _leaks_width,
    "kind from the raw total": _leaks_kind,
    "confidence from the raw total": _leaks_confidence,
    "details keyed on raw zeros": _leaks_details,
}


# a data-dependent kind is dsat's audited decision (tests/controller): that variant runs on uniform only
BROKEN_CASES = [
    (v, d)
    for v in sorted(BROKEN)
    if not v.startswith("psd")  # caught by test_psd_width_from_raw_counts_is_caught
    for d in ("uniform", "dsat")
    if (v, d) != ("kind from the raw total", "dsat")
]


@pytest.mark.parametrize(("variant", "decision"), BROKEN_CASES)
def test_broken_metadata_is_caught(variant, decision):
    bad, _, _ = differences(_settings(decision, "lpa", "user-level"), BROKEN[variant])
    assert bad, f"{variant} not caught for {decision}"
