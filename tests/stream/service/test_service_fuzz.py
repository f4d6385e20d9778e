"""Fuzzed input: 100,000 random and mutated payloads; 0 crashes, every one counted or dead-lettered.

The bulk runs in-process through exactly the service's path (``EventDecoder``
→ ``ReleasePipeline.offer`` → ``rejection_records``); a smaller batch goes
through the real broker and the running service.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream.ingest.events import REASONS, EventDecoder
from stream.pipeline import ReleasePipeline
from stream.service.kafka_io import rejection_records
from tests.kafka_harness import (  # noqa: F401
    STEP,
    T0,
    WALL,
    InProcessService,
    broker,
    dedupe_by_key,
    produce,
    read_all,
    service_config,
    settings_from,
    wait_for,
)

JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from(["M", "F", "X", "", "2024-01-01T00:00:00Z", "1704067201", "NaN", "1e400", "\u00e9",
                     "2024-13-45", "9999-01-01", "1704067201.5"]),
)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)), max_leaves=12)
EVENTS = st.fixed_dictionaries(
    {},
    optional={
        "user_id": st.one_of(st.text(max_size=300), st.integers(), JSON_SCALARS),
        "event_time": st.one_of(st.floats(T0 - 1e3, T0 + 1e4), JSON_SCALARS),
        "attributes": st.one_of(
            st.fixed_dictionaries({}, optional={"age": JSON_SCALARS | st.floats(-10, 120),
                                                "sex": st.sampled_from(["M", "F"]) | JSON_SCALARS,
                                                "extra": JSON_SCALARS}),
            JSON_VALUES),
        "other": JSON_VALUES,
    },
)
STRUCTURED = st.one_of(
    EVENTS.map(lambda e: json.dumps(e).encode()),
    st.lists(EVENTS, max_size=6).map(lambda es: json.dumps(es).encode()),
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
)


def _valid(rng: np.random.Generator, n: int, base: float = T0) -> list[bytes]:
    out = []
    for i in range(n):
        ev = {"user_id": f"u{int(rng.integers(0, 50))}", "event_time": base + float(rng.uniform(0, 20 * STEP)),
              "attributes": {"age": float(rng.uniform(0, 100)), "sex": "MF"[i % 2]}}
        out.append(json.dumps([ev, ev] if i % 5 == 0 else ev).encode())
    return out


_TOKENS = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"null", b"true", b"[]", b"{}", b'"x"', b"-0",
           b"99999999999999999999999", b'"\\ud800"', b"\xff", b"\x00", b'"2261-12-31T23:59:59Z"']


def mutate(rng: np.random.Generator, corpus: list[bytes], n: int) -> list[bytes]:
    """Fast byte- and token-level mutations of ``corpus`` (flips, cuts, splices, token swaps, bombs)."""
    out = []
    for _ in range(n):
        data = bytearray(corpus[int(rng.integers(0, len(corpus)))])
        for _ in range(int(rng.integers(1, 4))):
            op = int(rng.integers(0, 9))
            pos = int(rng.integers(0, len(data) + 1))
            if op == 0 and data:
                data[min(pos, len(data) - 1)] ^= 1 << int(rng.integers(0, 8))
            elif op == 1:
                del data[pos:]
            elif op == 2:
                data[pos:pos] = rng.integers(0, 256, int(rng.integers(1, 8)), dtype=np.uint8).tobytes()
            elif op == 3:
                data[pos:pos] = _TOKENS[int(rng.integers(0, len(_TOKENS)))]
            elif op == 4:
                other = corpus[int(rng.integers(0, len(corpus)))]
                data[pos:] = other[int(rng.integers(0, len(other) + 1)):]
            elif op == 5:
                for number in (b"1704", b"30", b"0."):
                    data = bytearray(bytes(data).replace(number, _TOKENS[int(rng.integers(0, len(_TOKENS)))], 1))
            elif op == 6:
                depth = 1200 if rng.random() < 0.1 else int(rng.integers(1, 40))  # > 1000: recursion limit
                data = bytearray(b"[" * depth + bytes(data))
            elif op == 7:
                data = bytearray(b"[" + b",".join([bytes(data)] * int(rng.integers(2, 30))) + b"]")
            else:
                data = bytearray(bytes(data).replace(b'"user_id"', b'"user_id":"' + b"x" * 300 + b'","u"', 1))
        out.append(bytes(data))
    return out


_DECODERS: dict[int, tuple[object, EventDecoder]] = {}


def _decoder(settings) -> EventDecoder:
    """The service builds its decoder once (pydantic schemas take ~20 ms to build); so does the fuzz."""
    cached = _DECODERS.get(id(settings))
    if cached is None or cached[0] is not settings:
        cached = _DECODERS[id(settings)] = (settings, EventDecoder.from_settings(settings))
    return cached[1]


def _account(settings, payloads: list[bytes]) -> dict[str, int]:
    """Run payloads through the service's path; assert every one is counted or rejected with a reason."""
    decoder = _decoder(settings)
    pipe = ReleasePipeline(settings)
    sources = [(0, i) for i in range(len(payloads))]
    decoded = decoder.decode(payloads, sources)
    offered = pipe.offer(decoded.batch, now=time.time())
    accepted = len(decoded.batch) - len(offered)
    rejected = list(decoded.rejections) + list(offered)
    assert all(r.reason in REASONS and r.detail for r in rejected)
    records = rejection_records(rejected, input_topic="in", stream="s")
    assert len(records) == len(rejected)
    # per message: a message-level rejection stands alone; otherwise every event of the
    # message is either accepted (in the batch and not rejected) or rejected
    touched = {src[1] for _, coords, _, _ in records for src in [coords.decode().split(":")]}
    touched = {int(t) for t in touched}
    if len(decoded.batch):
        touched |= set(np.asarray(decoded.batch.messages).tolist())
    for i, payload in enumerate(payloads):  # even an empty JSON array (dead letter: empty_message)
        assert i in touched, f"payload {i} vanished: {payload[:80]!r}"
    return {"accepted": accepted, "rejected": len(rejected), "events": len(decoded.batch) + len(decoded.rejections)}


_SETTINGS = settings_from(service_config("127.0.0.1:1", "/tmp/unused", seed=1))


@pytest.mark.slow
@pytest.mark.nightly  # 100,000 fuzzed payloads (~40 s)
@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(structured=st.lists(STRUCTURED, min_size=5, max_size=5), seed=st.integers(0, 2**32 - 1))
def test_fuzz_100k_payloads_in_process(structured, seed):
    """100 examples × 1,000 payloads: 5 drawn by hypothesis, 995 mutated from a valid corpus + those."""
    rng = np.random.default_rng(seed)
    settings_ = _SETTINGS
    corpus = _valid(rng, 30) + structured
    payloads = structured + mutate(rng, corpus, 995)
    assert len(payloads) == 1000
    counts = _account(settings_, payloads)
    assert counts["accepted"] + counts["rejected"] == counts["events"]


@pytest.mark.kafka
def test_fuzzed_payloads_through_the_real_broker(broker, tmp_path):  # noqa: F811
    # Event times just behind the clock and a short max_future: a mutated time then lands in the
    # past (late), beyond the clock (far future) or within ~1 h — never years of timesteps to seal.
    rng = np.random.default_rng(1234)
    # Record time is the producer's real clock here (stamp=WALL, a broker stamping "now"), with a
    # public start ten minutes ago: a mutated time lands before the start, late, beyond max_future
    # of its own record time, or in one of the ~10 timesteps since the start.
    now = time.time()
    cfg = service_config(broker.bootstrap, tmp_path / "state", seed=1,
                         stream={"start": int(now) // 60 * 60 - 600, "max_future": "10m", "clock_skew": "5s"})
    settings_ = settings_from(cfg)
    k = settings_.kafka
    payloads = mutate(rng, _valid(rng, 50, base=now - 300), 1000)
    with InProcessService(settings_) as svc:
        produce(broker.bootstrap, k.input_topic, payloads, stamp=WALL)
        wait_for(lambda: svc.metric("dpstream_messages_consumed_total") >= len(payloads), timeout=60,
                 what="all fuzzed messages consumed")
        wait_for(lambda: svc.service.positions == svc.service.committed, what="a checkpoint")
        consumed = svc.metric("dpstream_events_consumed_total")
        accepted = svc.metric("dpstream_events_accepted_total")
        dead = sum(svc.metric("dpstream_dead_letters_total", {"reason": r}) for r in REASONS if r != "timestep_sealed")
        late = svc.metric("dpstream_late_events_total")
        assert svc.health.ready
    assert consumed == accepted + dead + late and dead > 0
    dlq, problems = dedupe_by_key(read_all(broker.bootstrap, k.dead_letter_topic, expect=int(dead)))
    late_records, problems2 = dedupe_by_key(read_all(broker.bootstrap, k.late_topic))
    assert not problems and not problems2
    assert len(dlq) == dead and len(late_records) == late
    assert all(dict(r.headers)["dpstream.reason"].decode() in REASONS for r in dlq.values())
