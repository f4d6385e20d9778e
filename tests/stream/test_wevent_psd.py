"""The w-event mechanisms with PSD releases, through the engine and the message builder.

Sample publishes a PSD release (its tree in ``details``) at timesteps 0, w, 2w, …; PeGaSus
perturbs with PSD at ε_p every timestep and, inside a group, publishes the mean of the group's
PSD outputs with a null half_width and ``details.smoothed_over``. In both, everything but the
noisy counts is the same for neighbours D and D′ wherever the (private) decisions agree, and a
group-opening PeGaSus release keeps PSD's tree and the half_width the tree determines.
"""

from __future__ import annotations

import json

from tests.stream.test_release_metadata import _settings, psd_width_mismatches, run_pair


def test_sample_with_psd():
    a, b = run_pair(_settings("sample", "psd", "w-event"))  # w = 4
    assert [r[0] for r in a] == ["fresh" if t % 4 == 0 else "republished" for t in range(len(a))]
    assert [r[1] for r in a] == [r[1] for r in b]  # decisions are public: metadata identical
    assert psd_width_mismatches([r[3] for r in a]) == []


def test_pegasus_with_psd():
    a, b = run_pair(_settings("pegasus", "psd", "w-event"))
    docs = [json.loads(r[3]) for r in a]
    assert all(d["kind"] == "fresh" for d in docs)
    smoothed = [d for d in docs if "smoothed_over" in d["details"]]
    opening = [r[3] for r, d in zip(a, docs, strict=True) if "smoothed_over" not in d["details"]]
    assert smoothed and opening
    assert all(d["accuracy"]["half_width"] is None and "tree" not in d["details"] for d in smoothed)
    # a group-opening release is the PSD release itself: its widths are what its tree determines
    assert all(psd_width_mismatches([raw]) == [] for raw in opening)


def test_fast_with_psd():
    a, b = run_pair(_settings("fast", "psd", "w-event"))  # w = 4, M = C = 2
    docs = [json.loads(r[3]) for r in a]
    fresh_at = [t for t, d in enumerate(docs) if d["kind"] == "fresh"]
    assert len(fresh_at) >= 4
    assert all(sum(s <= t < s + 4 for t in fresh_at) <= 2 for s in range(len(docs)))
    assert all(docs[t]["accuracy"]["half_width"] is None for t in fresh_at)  # filtered: no interval claimed


def test_adaptive_sample_with_psd():
    """Adaptive Sample reads back PSD releases (its noise model is PSD's public error model): the
    decisions and every field but the noisy counts are the same for neighbours."""
    a, b = run_pair(_settings("adaptive-sample", "psd", "w-event"))
    docs = [json.loads(r[3]) for r in a]
    assert sum(d["kind"] == "fresh" for d in docs) >= 4
    assert [r[1] for r in a] == [r[1] for r in b]
    assert psd_width_mismatches([r[3] for r in a if json.loads(r[3])["kind"] == "fresh"]) == []
