"""The audit catalogue covers every shipped mechanism, and every broken variant it lists is caught.

The mechanisms are discovered from the code's registries, not from a hand
list: the decision methods from :data:`controller.method.METHODS`, the release
mechanisms from the ``release.mechanism`` field of the configuration. A new
method or mechanism without an audit entry fails here.

Every listed variant is checked twice: it must exist in the audit module (the
catching test function, and the module's own variant registry when there is
one, whose keys must all be catalogued), and the catching call must pass,
i.e. the audit catches it. When this session already runs that very call (the
audit module's own test item with exactly the catalogued arguments, not marked
skip or xfail), the catalogue checks that the item is there instead of running
the same audit a second time in the same session (that duplicate was ~530 s of
the suite's test time, 8 %); run on its own, or when the item is deselected,
it calls the audit itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import typing

import numpy as np
import pytest

from controller.method import METHODS
from histogram.postprocess import STATEFUL
from stream.config import PersonalSection, ReleaseSection, Settings
from tests.dp_audit import CATALOGUE, AuditEntry


def shipped_mechanisms() -> set[str]:
    releases = set(typing.get_args(typing.get_type_hints(ReleaseSection)["mechanism"]))
    assert releases, "could not read release.mechanism's choices from stream.config"
    personal = {f"personal:{m}" for m in typing.get_args(typing.get_type_hints(PersonalSection)["mechanism"])}
    assert personal, "could not read privacy.personal.mechanism's choices from stream.config"
    return set(METHODS) | releases | personal


def _module(entry: AuditEntry):  # type: ignore[no-untyped-def]
    if entry.pending and importlib.util.find_spec(entry.module) is None:
        pytest.skip(f"{entry.module} is pending (written on another branch)")
    return importlib.import_module(entry.module)


def test_every_shipped_mechanism_has_an_audit():
    missing = shipped_mechanisms() - set(CATALOGUE)
    assert not missing, f"shipped mechanisms without an audit entry: {sorted(missing)}"


def test_only_psd_may_be_pending():
    assert {n for n, e in CATALOGUE.items() if e.pending} <= {"psd"}


def test_every_entry_has_broken_variants():
    empty = [n for n, e in CATALOGUE.items() if not e.variants and not e.pending]
    assert not empty, f"audits without a broken variant prove nothing: {empty}"


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_listed_variants_exist(name):
    entry = CATALOGUE[name]
    module = _module(entry)
    for variant, catch in entry.variants.items():
        assert callable(getattr(module, catch.function, None)), f"{name}/{variant}: no {catch.function}"
    if entry.registry is not None:
        registry = getattr(module, entry.registry)
        listed = {k.removeprefix("w-event ") for k in entry.variants} | {
            c.kwargs.get("name") for c in entry.variants.values()
        }
        uncatalogued = set(registry) - listed
        assert not uncatalogued, f"{name}: variants in {entry.module}.{entry.registry} not catalogued: {uncatalogued}"
        if entry.pending:
            assert entry.variants, f"{name}: {entry.module} now exists: list its variants and clear pending"


CALLS = [(n, v) for n in sorted(CATALOGUE) for v in sorted(CATALOGUE[n].variants)]


def _run(name: str, variant: str) -> None:
    entry = CATALOGUE[name]
    catch = entry.variants[variant]
    getattr(_module(entry), catch.function)(**catch.kwargs)


def _session_runs(session: pytest.Session, name: str, variant: str) -> str | None:
    """The node id of the test item of this session that makes exactly the catalogued call, if any:
    the catching function of the audit module, its parameters equal to the catalogued arguments,
    and nothing that would stop it from asserting (skip, skipif, xfail)."""
    entry = CATALOGUE[name]
    catch = entry.variants[variant]
    path = entry.module.replace(".", "/") + ".py"
    for item in session.items:
        if item.nodeid.split("::", 1)[0] != path or getattr(item, "originalname", None) != catch.function:
            continue
        params = dict(getattr(getattr(item, "callspec", None), "params", {}))
        if params != dict(catch.kwargs):
            continue
        if any(True for m in ("skip", "skipif", "xfail") for _ in item.iter_markers(m)):
            continue
        return item.nodeid
    return None


@pytest.mark.parametrize(("name", "variant"), CALLS)
def test_listed_variant_is_caught(name, variant, request):
    if _session_runs(request.session, name, variant) is None:
        _run(name, variant)  # no item of this session makes the call: make it here


def test_session_runs_finds_only_the_exact_call(request):
    """The look-up that spares the second run is not vacuous: an item with other arguments, in
    another module, or marked skip, is not taken for the catalogued call."""
    name, variant = next((n, v) for n, v in CALLS if CATALOGUE[n].variants[v].kwargs)
    entry, catch = CATALOGUE[name], CATALOGUE[name].variants[variant]
    path = entry.module.replace(".", "/") + ".py"

    class _Spec:
        def __init__(self, params: dict) -> None:
            self.params = params

    class _Item:
        def __init__(self, nodeid: str, params: dict, marks: tuple[str, ...] = ()) -> None:
            self.nodeid, self.originalname, self.callspec, self._marks = nodeid, catch.function, _Spec(params), marks

        def iter_markers(self, m: str):  # type: ignore[no-untyped-def]
            return iter([m] if m in self._marks else [])  # a generator-like iterator, as pytest's

    class _Session:
        items: list[_Item] = []

    exact = dict(catch.kwargs)
    other = {k: f"not-{v}" for k, v in exact.items()}
    _Session.items = [_Item(f"{path}::{catch.function}[x]", other),
                      _Item(f"tests/elsewhere.py::{catch.function}[x]", exact),
                      _Item(f"{path}::{catch.function}[x]", exact, ("skip",))]
    assert _session_runs(_Session, name, variant) is None  # type: ignore[arg-type]
    _Session.items.append(_Item(f"{path}::{catch.function}[y]", exact))
    assert _session_runs(_Session, name, variant) == f"{path}::{catch.function}[y]"  # type: ignore[arg-type]


def test_catalogue_check_is_not_vacuous(monkeypatch):
    """A method added to the registry without an entry is reported."""
    import controller.method as method

    monkeypatch.setattr(method, "METHODS", (*METHODS, "new-method"))
    monkeypatch.setitem(globals(), "METHODS", method.METHODS)
    with pytest.raises(AssertionError, match="new-method"):
        test_every_shipped_mechanism_has_an_audit()


# ---------------------------------------------------------------------------
# Post-processing filters read releases and public configuration only (issue 30)


def _smoothed_outputs(steps: str, truth: np.ndarray, shift: np.ndarray, leak: bool = False,
                      delay: int = 0) -> list[bytes]:
    """Step the engine (uniform, LPA, w-event) on ``truth`` with seeded noise minus ``shift``
    (the coupling that makes a neighbour's releases equal D's) and post-process with ``steps``
    (and ``release.delay``); ``leak``: a broken filter that also reads the true counts."""
    from histogram.noise import Randomness

    settings = Settings(**{
        "stream": {"id": "audit-filters", "timestep": "1h", "start": "2024-01-01T00:00:00+00:00"},
        "schema": {"attributes": [{"name": "bin", "kind": "numeric", "min": 0, "max": 3, "bins": 3}]},
        "privacy": {"epsilon": 1.0, "unit": "w-event", "w": 5, "population": 300, "cutoff": 1},
        "release": {"decision": "uniform", "postprocess": steps, "delay": delay},
    }).validate_all()
    engine, post, rnd = settings.engine(), settings.postprocessor(), Randomness.seeded(7)
    state, post_state, outs = engine.initial_state(), post.initial(), []

    class Coupled:
        def __init__(self, inner, delta):  # type: ignore[no-untyped-def]
            self.inner, self.delta = inner, delta

        def discrete_laplace(self, scale, size=None):  # type: ignore[no-untyped-def]
            return np.asarray(self.inner.discrete_laplace(scale, size)) - self.delta

    for t in range(truth.shape[0]):
        release, state = engine.step(state, truth[t], Coupled(rnd.drawer("audit-filters", t, "release"), shift[t]))
        if release.source_timestep is None:
            continue
        counts = np.asarray(release.counts, dtype=np.float64) + (truth[t] if leak else 0.0)
        out, post_state = post.apply(post_state, counts, release.half_width, release.confidence,
                                     release.kind == "fresh")
        outs.append(np.asarray(out.counts, dtype=np.float64).tobytes())
    return outs


@pytest.mark.parametrize("steps", sorted({*STATEFUL, "model+nonnegative", "model-perbin+integer"}))
def test_each_filter_gives_neighbours_with_the_same_recorded_noise_the_same_output(steps):
    """D and D' differ by one person in one bin at one timestep; D' draws D's noise shifted by
    that difference, so the engine's releases are equal and a filter of releases only must publish
    the same bytes. The broken variant (a filter that also reads the true counts) is caught."""
    rng = np.random.default_rng(3)
    truth = rng.integers(20, 80, (60, 3)).astype(np.int64)
    neighbour, shift = truth.copy(), np.zeros_like(truth)
    neighbour[30, 1] += 1
    shift[30, 1] = 1  # D' draws noise - 1 there: the same release
    assert _smoothed_outputs(steps, truth, np.zeros_like(truth)) == _smoothed_outputs(steps, neighbour, shift)
    assert (_smoothed_outputs(steps, truth, np.zeros_like(truth), leak=True)
            != _smoothed_outputs(steps, neighbour, shift, leak=True))


@pytest.mark.parametrize("steps", ["model+nonnegative", "model-trend+nonnegative"])
def test_the_delayed_filters_across_level_shifts_give_neighbours_the_same_output(steps):
    """The same check with ``release.delay: 2`` on a stream with level shifts, so that the change
    detector restarts the bank and the smoother fixes the delayed values before each restart
    (``lag_fixed``): still a function of the releases only. The person differs at the first
    shift."""
    from histogram.statespace import ModelFilter

    rng = np.random.default_rng(5)
    truth = rng.integers(20, 30, (60, 3)).astype(np.int64) + np.where(np.arange(60) >= 30, 400, 0)[:, None]
    truth[45:] -= 300
    neighbour, shift = truth.copy(), np.zeros_like(truth)
    neighbour[30, 1] += 1
    shift[30, 1] = 1
    calls = []
    fix = ModelFilter._fix_before_shift
    with pytest.MonkeyPatch.context() as mp:  # the shifts happen (the path under audit is run)
        mp.setattr(ModelFilter, "_fix_before_shift", staticmethod(lambda a, sh, b: (calls.append(1), fix(a, sh, b))[1]))
        same = _smoothed_outputs(steps, truth, np.zeros_like(truth), delay=2)
    assert len(calls) >= 2, calls
    assert same == _smoothed_outputs(steps, neighbour, shift, delay=2)
    assert (_smoothed_outputs(steps, truth, np.zeros_like(truth), leak=True, delay=2)
            != _smoothed_outputs(steps, neighbour, shift, leak=True, delay=2))
