"""``release.decision: auto``: choose the method, its parameters and the post-processing from
public information only (issue 13 item 3).

The planner answers "which method gives the most accurate dashboard for my ε?" *before* any
data arrives, from what the configuration declares:

* the domain size ``U`` (``schema``), the mechanism (``release.mechanism``) and the
  contribution bound Δ;
* the privacy unit, ε, ``w`` or the horizon ``N``, and the cutoff ``C`` (``privacy``);
* the declared population ``n`` (``privacy.population``: people per timestep, public);
* optionally a history the user **declares public** (``release.planner.public_history``, a
  counts file: one row per timestep, one column per bin).

It runs every candidate — each decision method this configuration can run
(:data:`controller.method.METHODS`, through :func:`runnable_methods`), DSFT and
DSAT both with the configured threshold and with ``release.noise_floor: true``, each as published,
``nonnegative``, ``kalman``-smoothed and (the schedules uniform, fixed, Sample, Adaptive Sample)
with the structural ``model`` filter and with its trend-following ``model-trend`` — through the
engine on **synthetic public
streams** (:data:`SCENARIOS`): the six families of :mod:`stream.planning.families` (the w-event
benchmark's shapes) with the declared population as their peak, and the ``steady`` stream, the
declared population at every timestep (a census, a hospital's patients: what
``privacy.population``, "people per timestep", says the stream is); their totals are spread over
the ``U`` bins by a fixed Dirichlet share (:func:`scenario`), ``realisations`` draws of each
(scenario seeds ``13, 14, …``), each simulated once with its own noise seed. The
planner chooses the candidate whose largest **regret** over the scenarios, its mean absolute
error per bin less the best candidate's on the same scenario (counts per bin), is smallest
(minimax regret: the most robust across shapes it cannot know), among those never worse than the
zero release on the declared ``steady`` stream if there are any (:func:`rank`). With a public
history, the history is the only scenario.

**Privacy** (``docs/privacy.md`` §13): the choice is a function of the configuration (and the
declared-public history) alone. It never reads the events or the counts being released, so it
is independent of the private input and costs no ε; its simulation noise is seeded and never
published. The same configuration gives the same choice on every machine and every restart
(the seeds are constants), so the configuration fingerprint a journal records stays the same.

Warnings (:class:`Plan.warnings`, also for non-``auto`` configs via :func:`warnings_for`): the
configured DSFT/DSAT threshold lies below the distance's noise floor
(:func:`stream.planning.diagnostics.threshold_below_noise_floor`), or the method is expected to do
worse than publishing nothing: for ``auto``, its simulated error exceeds the zero release's on
some scenarios; for any method, the expected noise of its most generous fresh release alone
already exceeds the zero release's error ``n / U`` (:func:`noise_above_data`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from controller.method import METHODS
from controller.policies.adaptive import AdaptiveSamplePolicy
from controller.runs import step_run
from histogram.accuracy import RunErrors, Workload, stream_errors
from histogram.noise import Randomness
from histogram.postprocess import POSTPROCESSORS, PostProcessor, postprocess
from stream.planning.families import FAMILIES, FLOOR, FamilyParams, family_series, spread_over_bins

__all__ = [
    "AUTO",
    "Candidate",
    "auto_method",
    "Plan",
    "PlannerError",
    "plan",
    "resolve",
    "scenario",
    "SCENARIOS",
    "STEADY",
    "noise_above_data",
    "runnable_methods",
    "warnings_for",
]

#: The ``release.decision`` value that asks the planner.
AUTO = "auto"
#: Decision methods with a distance threshold (the planner also tries them with the noise floor).
DISTANCE = ("dsat", "dsft")
#: Post-processing the service publishes (``release.postprocess``) that the planner compares.
SERVICE_POST = tuple(p for p in ("none", "nonnegative") if p in POSTPROCESSORS)
#: Smoothing the planner also compares (``m+kalman``: ``release.postprocess: nonnegative+kalman``;
#: the service publishes it when ``privacy.population`` is declared and the method is not fast/pegasus).
LAB_POST = ("kalman",)
#: The chain a ``+kalman`` candidate publishes.
KALMAN_CHAIN = "nonnegative+kalman"
#: The structural state-space filter (``m+model``: ``release.postprocess: model+nonnegative``,
#: :mod:`histogram.statespace`): it needs no declared population (its process variance is learnt
#: from the releases), so the service publishes it for every method but fast/pegasus.
MODEL_POST = ("model", "model-trend")
#: The chain a ``+model`` candidate publishes.
MODEL_CHAIN = "model+nonnegative"
#: The chain a ``+model-trend`` candidate publishes (``model`` whose bank also follows a trend
#: between sparse releases).
MODEL_TREND_CHAIN = "model-trend+nonnegative"
#: The decision methods the planner simulates with the ``model`` and ``model-trend`` filters: the
#: fixed schedules (each simulated run of the filter costs milliseconds per timestep; the schedules'
#: runs share their fresh timesteps, so the filter steps them together) and Adaptive Sample, the
#: schedule that learns its interval (its runs are filtered one at a time). Measured best with them:
#: ``docs/results.md``.
MODEL_BASES = ("uniform", "fixed", "sample", "adaptive-sample")
#: Every filter the planner simulates, and the chain each publishes.
FILTER_CHAINS = {"kalman": KALMAN_CHAIN, "model": MODEL_CHAIN, "model-trend": MODEL_TREND_CHAIN}
#: Methods that publish their own filtered values: the configuration refuses a smoother after them.
_SELF_SMOOTHING = ("fast", "pegasus")
#: Planning horizon: at most this many timesteps per scenario (and at most N, user-level).
MAX_TIMESTEPS = 200
#: Default seeded runs per candidate on a declared-public history.
RUNS = 2
#: Default draws of each synthetic scenario (one seeded run each): measured, one draw decided the plan
#: at ε = 1, w = 50 by its realisation alone (``docs/results.md``, "The planner draws each family
#: four times").
REALISATIONS = 4
#: Dirichlet concentration of the public bin shares of a synthetic scenario (1: uniform on the simplex).
ALPHA = 1.0
#: The scenario of a stream that is what ``privacy.population`` declares: that many people at every
#: timestep (the families have it as their peak; most of them average far below it).
STEADY = "steady"
#: The synthetic scenarios, in simulation order (a scenario's seeds depend on its position: ``steady``
#: comes last, so the families' figures are those of the planner before it had ``steady``).
SCENARIOS = (*FAMILIES, STEADY)
#: The scenarios' seeds: constants, so the choice is the same on every machine and restart.
SCENARIO_SEED = 13
NOISE_SEED = 1013


class PlannerError(ValueError):
    """The planner cannot run as configured; the message says why and what to do."""


@dataclass(frozen=True)
class Candidate:
    """One configuration the planner may choose.

    Attributes:
        decision: a decision method of :data:`controller.method.METHODS`.
        post: ``none`` | ``nonnegative`` | ``kalman`` | ``model`` | ``model-trend``
            (``release.postprocess``; ``kalman`` is the chain ``nonnegative+kalman``, ``model`` the chain
            ``model+nonnegative``, ``model-trend`` the chain ``model-trend+nonnegative``).
        noise_floor: DSFT/DSAT's ``release.noise_floor`` (None: as configured; other methods).
        min_per_window: Adaptive Sample's ``release.min_per_window`` (None: no floor; other methods).
    """

    decision: str
    post: str = "none"
    noise_floor: bool | None = None
    min_per_window: int | None = None

    @property
    def name(self) -> str:
        nf = "(noise_floor)" if self.noise_floor else ""
        floor = "" if self.min_per_window is None else f"(min_per_window={self.min_per_window})"
        return f"{self.decision}{nf}{floor}" + ("" if self.post == "none" else f"+{self.post}")

    @property
    def service(self) -> bool:
        """Whether the service can publish it as configured (a smoother needs a declared
        population, checked by :meth:`publishable`; fast and pegasus take no smoother)."""
        return self.post in SERVICE_POST or (self.post in FILTER_CHAINS and self.decision not in _SELF_SMOOTHING)

    def publishable(self, population: int | None) -> bool:
        """:attr:`service`, and a smoother only with ``privacy.population`` declared."""
        return self.service and (self.post not in LAB_POST or bool(population))

    def release_changes(self) -> dict[str, Any]:
        """The ``release`` settings this candidate sets."""
        out: dict[str, Any] = {"decision": self.decision, "postprocess": FILTER_CHAINS.get(self.post, self.post)}
        if self.noise_floor is not None:
            out["noise_floor"] = self.noise_floor
        out["min_per_window"] = self.min_per_window  # only Adaptive Sample reads it
        return out

    def to_json(self) -> dict[str, Any]:
        out = {"name": self.name, "decision": self.decision, "post": self.post, "noise_floor": self.noise_floor}
        if self.min_per_window is not None:
            out["min_per_window"] = self.min_per_window
        return out


@dataclass(frozen=True)
class Plan:
    """The planner's choice and why.

    Attributes:
        choice: the best candidate the service can publish (``release.*`` of :meth:`release_changes`).
        lab_choice: the best candidate of all, a smoother without a declared population included
            (what ``evaluate --methods auto`` runs; equal to ``choice`` when the service can publish it).
        scenarios: names of the scenarios scored (synthetic families, or ``public-history``).
        scores: per candidate name, the geometric mean over scenarios of MAE / best MAE.
        mae: per candidate name, the mean absolute error per bin on each scenario.
        zero_mae: the zero release's error on each scenario.
        reasons: human-readable lines: why this choice.
        warnings: human-readable lines: what to worry about.
        facts: the public facts the plan was computed from (JSON-ready).
    """

    choice: Candidate
    lab_choice: Candidate
    scenarios: tuple[str, ...]
    scores: dict[str, float]
    mae: dict[str, tuple[float, ...]]
    zero_mae: tuple[float, ...]
    reasons: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    facts: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"choice": self.choice.to_json(), "lab_choice": self.lab_choice.to_json(),
                "scenarios": list(self.scenarios), "scores": {k: _finite(v) for k, v in self.scores.items()},
                "mae": {k: [_finite(x) for x in v] for k, v in self.mae.items()}, "zero_mae": list(self.zero_mae),
                "reasons": list(self.reasons), "warnings": list(self.warnings), "facts": dict(self.facts)}

    def text(self) -> str:
        """The reasons and warnings, one line each (for the terminal and the start-up log)."""
        return "\n".join([*self.reasons, *(f"warning: {w}" for w in self.warnings)])


def _finite(x: float) -> float | None:
    """JSON has no infinity: an unusable candidate's error is null."""
    return x if math.isfinite(x) else None


# -- public facts and scenarios ---------------------------------------------------------------


def public_facts(settings: Any) -> dict[str, Any]:
    """Everything the planner reads from ``settings``: public configuration, JSON-ready."""
    p, r = settings.privacy, settings.release
    planner = getattr(r, "planner", None)
    return {"bins": settings.domain().size, "shape": list(settings.domain().shape), "unit": p.unit,
            "epsilon": str(p.epsilon), "w": p.w, "horizon": p.horizon, "cutoff": p.cutoff,
            "population": p.population, "contribution_bound": p.contribution_bound,
            "mechanism": r.mechanism, "threshold": r.threshold,
            "public_history": None if planner is None else planner.public_history,
            "runs": RUNS if planner is None else planner.runs,
            "realisations": REALISATIONS if planner is None else planner.realisations,
            "timesteps": MAX_TIMESTEPS if planner is None else planner.timesteps,
            # Adaptive Sample's floor, when set (unset, the facts and their cache key are as before)
            **({} if r.min_per_window is None else {"min_per_window": r.min_per_window})}


def planning_timesteps(facts: dict[str, Any]) -> int:
    """Timesteps per synthetic scenario: ``release.planner.timesteps`` (default :data:`MAX_TIMESTEPS`),
    at most the horizon N (user-level)."""
    steps = int(facts.get("timesteps") or MAX_TIMESTEPS)
    if facts["unit"] == "user-level" and facts["horizon"]:
        return max(1, min(steps, int(facts["horizon"])))
    return steps


def scenario(family: str, timesteps: int, bins: int, population: int, seed: int = SCENARIO_SEED) -> np.ndarray:
    """A synthetic public ``(timesteps, bins)`` count stream shaped by public parameters only.

    The total per timestep is the ``family`` stream (:func:`stream.planning.families.family_series`)
    whose largest value is the declared ``population``, or (``family`` :data:`STEADY`) the
    ``population`` at every timestep; with ``bins > 1`` each timestep's total is
    spread over the bins by a multinomial draw with shares from a Dirichlet(:data:`ALPHA`) draw
    (fixed per stream), so a sparse domain (``population / bins`` below 1) gives sparse
    histograms. Seeded from constants: no private input, the same on every machine."""
    if family == STEADY:
        totals = np.full(timesteps, max(int(population), 0), dtype=np.int64)
    else:
        scale = max(float(population), FLOOR + 1.0)
        totals = family_series(family, timesteps, seed, params=FamilyParams(scale=scale))[:, 0]
    return spread_over_bins(totals, bins, seed, ALPHA)


def _history(path: str, bins: int) -> np.ndarray:
    from stream.ingest.csvio import CsvError, read_counts

    try:
        arr = read_counts(path, bins)
    except CsvError as exc:
        raise PlannerError(f"release.planner.public_history: {exc}") from None
    if arr.shape[0] < 1:
        raise PlannerError(f"release.planner.public_history {path}: no timesteps; give a counts file with rows")
    return arr


# -- simulation -------------------------------------------------------------------------------


def _simulate(settings: Any, truth: np.ndarray, seed: int, posts: tuple[str, ...]
              ) -> tuple[dict[str, float], _Trace]:
    """Mean absolute error per bin (:class:`histogram.accuracy.RunErrors`' ``mae``, records) of one
    seeded engine run on ``truth``, for each post-processing but ``model``, and the run's releases
    (for :func:`_chain_errors`).

    Steps ``settings.engine()`` once (its decisions and its accountant, as the service would) and
    publishes every variant from the same releases: ``none``, ``nonnegative`` and ``kalman`` (the
    service's chain ``nonnegative+kalman``; without a declared population the lab stands in the
    bin count for it); the variants are scored as the runs of one :class:`RunErrors`. The noise is
    seeded and never published."""
    engine = settings.engine()
    noise = Randomness.seeded(seed)
    timesteps, bins = truth.shape
    posts = tuple(p for p in posts if p not in MODEL_POST)
    published = {p: np.zeros(bins) for p in posts}
    smoother = PostProcessor.for_stream(KALMAN_CHAIN, population=settings.privacy.population or bins, bins=bins,
                                        contribution_bound=settings.privacy.contribution_bound) \
        if "kalman" in posts else None
    post_state = smoother.initial() if smoother is not None else None
    counts, widths = np.zeros((timesteps, bins)), np.zeros((timesteps, bins))
    fresh, has = np.zeros(timesteps, dtype=bool), np.zeros(timesteps, dtype=bool)
    confidence = 0.0
    last: int | None = None
    errors = RunErrors(_workload(truth), len(posts)) if posts else None  # one "run" per variant
    # the one step loop (controller.runs.step_run); an infinite published interval gives the filter a zero gain
    for t, release, _ in step_run(engine, truth, lambda t: noise.drawer("planner", t, "release")):
        src = release.source_timestep
        if src is not None:
            has[t], fresh[t], confidence = True, release.kind == "fresh", release.confidence
            counts[t], widths[t] = release.counts, np.broadcast_to(release.half_width, (bins,))
            if src != last:
                raw = release.counts
                if "none" in published:
                    published["none"] = raw.astype(np.float64)
                clamped = postprocess("nonnegative", raw).astype(np.float64)
                if "nonnegative" in published:
                    published["nonnegative"] = clamped
                last = src
            if smoother is not None:
                with np.errstate(invalid="ignore", divide="ignore"):
                    out, post_state = smoother.apply(post_state, release.counts, release.half_width,
                                                     release.confidence, release.kind == "fresh")
                published["kalman"] = np.asarray(out.counts, dtype=np.float64)
        if errors is not None:
            errors.add(t, np.stack([published[p] for p in posts]))
    mae = {} if errors is None else {p: m["mae"] for p, m in zip(posts, errors.metrics(), strict=True)}
    return mae, _Trace(counts, widths, fresh, has, confidence)


def _workload(truth: np.ndarray) -> Workload:
    """A simulated (public) stream as the error metrics' workload: per-bin figures, no queries."""
    return Workload.build(truth, (int(truth.shape[1]),))


@dataclass(frozen=True)
class _Trace:
    """One simulated run's releases (simulation only, never published): ``counts``/``widths``
    (T, B) the released counts and half-widths, ``fresh``/``has`` (T,) whether the timestep drew
    new noise / published anything."""

    counts: np.ndarray
    widths: np.ndarray
    fresh: np.ndarray
    has: np.ndarray
    confidence: float


def _chain_errors(settings: Any, chain: str, truths: list[np.ndarray], traces: list[_Trace], *,
                  delay: int = 0) -> list[float]:
    """Each run's mean absolute error per bin (:class:`histogram.accuracy.RunErrors`' ``mae``,
    records) with the post-processing ``chain`` (``release.postprocess`` text, e.g.
    ``model+nonnegative``) applied to its releases as the service applies it
    (:meth:`histogram.postprocess.PostProcessor.for_stream`; without a declared population the bin
    count stands in for it), run ``i`` having released ``traces[i]`` of ``truths[i]`` (all of the
    same shape). With ``delay`` k (``release.delay``, a ``model`` chain) each timestep is scored with
    the value the fixed-lag smoother publishes for it k timesteps later, and the last k with the
    stream's end smoothed as far as it goes, as the lab's runner and the service publish them.

    The chain takes all runs at once that drew fresh noise at the same timesteps (a schedule:
    uniform, fixed, Sample, on every stream), one group at a time otherwise: its rows are
    independent, so these are the numbers of one run at a time, in fewer steps. Within a group,
    the runs of one stream are scored together (one :class:`RunErrors` per stream)."""
    timesteps, bins = truths[0].shape
    out = [0.0] * len(traces)
    groups: dict[bytes, list[int]] = {}
    for i, tr in enumerate(traces):
        groups.setdefault(tr.fresh.tobytes() + tr.has.tobytes(), []).append(i)
    filt = PostProcessor.for_stream(chain, population=settings.privacy.population or bins, bins=bins,
                                    contribution_bound=settings.privacy.contribution_bound, delay=delay)
    workloads: dict[int, Workload] = {}  # one per distinct truth (the runs of one stream share it)
    for idx in groups.values():
        first = traces[idx[0]]
        state = filt.initial()
        counts = np.stack([traces[i].counts for i in idx])  # (R, T, B)
        widths = np.stack([traces[i].widths for i in idx])
        rows: dict[int, list[int]] = {}  # truth -> the group's rows that ran on it
        for j, i in enumerate(idx):
            rows.setdefault(id(truths[i]), []).append(j)
        scored = []
        for key, js in rows.items():
            if key not in workloads:
                workloads[key] = _workload(truths[idx[js[0]]])
            scored.append((np.asarray(js), RunErrors(workloads[key], len(js))))
        zeros = np.zeros((len(idx), bins))
        start = int(np.argmax(first.has)) if first.has.any() else timesteps  # the first release
        out_at: list[np.ndarray] = [zeros] * timesteps  # what each timestep publishes (in order for RunErrors)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            for t in range(start, timesteps):
                got, state = filt.apply(state, counts[:, t], widths[:, t], first.confidence, bool(first.fresh[t]))
                if t - delay >= start:
                    out_at[t - delay] = np.asarray(got.counts, dtype=np.float64)
            tail = filt.pending(state, (len(idx), bins)) if start < timesteps else None
        if tail is not None:
            for j in range(delay):
                if timesteps - delay + j >= start:
                    out_at[timesteps - delay + j] = np.asarray(tail[j], dtype=np.float64)
        for t in range(timesteps):
            for js, errors in scored:
                errors.add(t, out_at[t][js])
        for js, errors in scored:
            for j, m in zip(js, errors.metrics(), strict=True):
                out[idx[j]] = m["mae"]
    return out


def simulate(settings: Any, streams: list[np.ndarray] | list[list[np.ndarray]], runs: int, seed: int
             ) -> tuple[dict[str, list[float]], dict[str, Candidate]]:
    """Every candidate's mean absolute error per bin on each stream (mean over ``runs`` seeded runs;
    run ``r`` on stream ``i`` draws from seed ``seed + 100·i + r``), and the candidates by name.
    A stream is one series for all its runs, or a list of ``runs`` series (run ``r`` on the
    ``r``-th: draws of one family). The ``model`` and ``model-trend`` filters are simulated over the
    schedules of :data:`MODEL_BASES` only."""
    truths = [list(t) if isinstance(t, list | tuple) else [t] * runs for t in streams]
    if any(len(t) != runs for t in truths):
        raise ValueError(f"simulate: a stream given as draws needs one per run ({runs}), got "
                         f"{sorted({len(t) for t in truths})}")

    posts = (*SERVICE_POST, *FILTER_CHAINS)
    mae: dict[str, list[float]] = {}
    cands: dict[str, Candidate] = {}
    for bc in _bases(settings):
        s = settings.with_changes({"release": {k: v for k, v in bc.release_changes().items()
                                               if k != "postprocess"}})
        # fast and pegasus publish their own filtered values: no filter after them (never publishable)
        mine = tuple(p for p in posts if (p not in FILTER_CHAINS or bc.decision not in _SELF_SMOOTHING)
                     and (p not in MODEL_POST or bc.decision in MODEL_BASES))
        done = [[_simulate(s, truth[r], seed + 100 * i + r, mine) for r in range(runs)]
                for i, truth in enumerate(truths)]
        per_stream = [{p: float(np.mean([e[p] for e, _ in d])) for p in mine if p not in MODEL_POST} for d in done]
        for post in (p for p in MODEL_POST if p in mine):  # every stream's runs through the filter at once
            errs = _chain_errors(s, FILTER_CHAINS[post], [t for ts in truths for t in ts],
                                 [tr for d in done for _, tr in d])
            for i, row in enumerate(per_stream):
                row[post] = float(np.mean(errs[i * runs:(i + 1) * runs]))
        for p in mine:
            c = Candidate(bc.decision, p, bc.noise_floor, bc.min_per_window)
            cands[c.name] = c
            # non-finite: unusable (e.g. kalman over FAST, which publishes no interval to weigh by)
            mae[c.name] = [row[p] if math.isfinite(row[p]) else math.inf for row in per_stream]
    return mae, cands


def runnable_methods(settings: Any) -> list[str]:
    """The decision methods (:data:`controller.method.METHODS`, in that order) this configuration
    can run: those for which ``settings`` re-validated with ``release.decision`` set to the method
    is a valid configuration (e.g. not ``bd``/``ba`` under user-level privacy)."""
    from stream.config.errors import ConfigError

    out = []
    for method in METHODS:
        try:
            settings.with_changes({"release": {"decision": method}})
        except ConfigError:
            continue
        out.append(method)
    return out


def _bases(settings: Any) -> list[Candidate]:
    """The (decision, parameters) pairs to simulate: every method this configuration can run."""
    out = []
    for base in runnable_methods(settings):
        if base in DISTANCE:
            if not settings.privacy.population:
                continue  # DSFT/DSAT need a declared population
            out.append(Candidate(base, noise_floor=False))
            out.append(Candidate(base, noise_floor=True))
        elif base == "adaptive-sample":
            out.extend(_adaptive_candidates(settings))
        else:
            out.append(Candidate(base))
    if not out:
        raise PlannerError("no decision method can run under this configuration: check privacy.unit and w")
    return out


def _adaptive_candidates(settings: Any) -> list[Candidate]:
    """Adaptive Sample as configured (``release.min_per_window``, unset: no floor) and, when unset and
    the policy starts below ``w`` releases per window, also floored at its start: never fewer fresh
    releases per window than it starts with (``privacy.cutoff``), so never staler than at its start.
    Measured (``docs/results.md``, "A floor under Adaptive Sample"): a stream with rare level shifts
    looks calm until its first shift, and without a floor the policy coarsens to one release in 25
    timesteps before it (w = 50) and then misses the shift for up to that long."""
    configured = settings.release.min_per_window
    out = [Candidate("adaptive-sample", min_per_window=configured)]
    if configured is None:
        policy = AdaptiveSamplePolicy(settings.method_spec("adaptive-sample").unit)  # type: ignore[arg-type]
        start = policy.levels[policy.start_level]
        if start < policy.unit.w:  # at w releases per window a floor at the start is Uniform
            out.append(Candidate("adaptive-sample", min_per_window=start))
    return out


def _concrete(settings: Any) -> Any:
    """``settings`` with ``release.decision`` set to a runnable placeholder (for re-validation):
    Uniform, or Adaptive Sample when ``release.min_per_window`` (its floor) is set."""
    placeholder = "uniform" if settings.release.min_per_window is None else "adaptive-sample"
    return settings.with_changes({"release": {"decision": placeholder}}) if settings.release.decision == AUTO \
        else settings


_CACHE: dict[str, Plan] = {}


def _cache_key(facts: dict[str, Any], lab: bool, history_digest: str | None) -> str:
    import json

    return hashlib.sha256(json.dumps([facts, lab, history_digest], sort_keys=True, default=str).encode()).hexdigest()


def plan(settings: Any, *, runs: int | None = None) -> Plan:
    """The planner's choice for ``settings`` (a :class:`stream.config.Settings`; its
    ``release.decision`` may be ``auto``). Reads the configuration and the declared-public
    history only. Deterministic; cached per public facts.

    Raises:
        PlannerError: no method can run, or the public history cannot be read.
    """
    if settings.privacy.personal is not None:
        raise PlannerError("privacy.personal: the planner does not plan personalized streams yet (its candidates "
                           "are simulated on one budget); name release.decision (dsat, dsft, fixed, …) and compare "
                           "them with 'dpstream evaluate --methods … --personal all'")
    facts = public_facts(settings)
    if runs is not None:
        facts["runs"] = runs
    digest = None
    if facts["public_history"]:
        path = Path(facts["public_history"])
        if not path.is_file():
            raise PlannerError(f"release.planner.public_history {path} does not exist: give a counts file you "
                               "declare public, or remove the setting to plan on synthetic streams")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    key = _cache_key(facts, True, digest)
    if key in _CACHE:
        return _CACHE[key]
    base = _concrete(settings)
    bins = facts["bins"]
    streams: dict[str, list[np.ndarray]]
    if facts["public_history"]:  # its last `timesteps` rows (start-up time stays bounded)
        count = int(facts["runs"])  # noise draws on the one history
        history = _history(facts["public_history"], bins)[-int(facts["timesteps"]):]
        streams = {"public-history": [history] * count}
    else:  # draws of each family, one seeded run each
        count, steps, population = int(facts["realisations"]), planning_timesteps(facts), facts["population"] or bins
        streams = {f: [scenario(f, steps, bins, population, SCENARIO_SEED + r) for r in range(count)] for f in SCENARIOS}
    mae, cands = simulate(base, list(streams.values()), count, NOISE_SEED)
    zero = tuple(float(np.mean([stream_errors(_workload(t), np.zeros(t.shape))[0]["mae"] for t in draws]))
                 for draws in streams.values())
    declared = [i for i, name in enumerate(streams) if name in (STEADY, "public-history")]
    scores, order = rank(mae, zero=zero, guard_on=declared)
    lab_choice = cands[order[0]]
    choice = next(cands[n] for n in order if cands[n].publishable(settings.privacy.population))
    result = Plan(choice, lab_choice, tuple(streams), scores, {n: tuple(v) for n, v in mae.items()}, zero,
                  (), (), facts)

    result = _explain(result, base.with_changes({"release": choice.release_changes()}))
    _CACHE[key] = result
    return result


#: The issue's tolerance: a candidate "as good as the best" is within this factor of its error.
TOLERANCE = 1.1
#: The zero-release guard: a candidate whose simulated error on the declared stream (``steady``, or the
#: declared-public history) exceeds this factor of the zero release's is chosen only if every
#: candidate's does (the issue's goal: never more than 5 % worse than publishing zeros).
ZERO_GUARD = 1.0


def rank(mae: dict[str, list[float]] | dict[str, tuple[float, ...]],
         use: list[int] | None = None, zero: tuple[float, ...] | list[float] | None = None,
         guard_on: list[int] | None = None) -> tuple[dict[str, float], list[str]]:
    """Scores and the candidate names best first, over the streams ``use`` (default all).

    The score is the geometric mean over the streams of MAE / that stream's best MAE (reported).
    The order is robust first: with ``zero`` (the zero release's error on each stream), the
    candidates never worse than :data:`ZERO_GUARD` times it on the streams ``guard_on`` (default
    all of ``use``) come first (if any is); among them the **smallest largest regret**, MAE less
    that stream's best MAE, in counts per bin (the planner cannot know which shape the data will
    have, so it bounds the loss on the worst one), then the lower score, the more streams within
    :data:`TOLERANCE` of the best, the name.

    Measured (``docs/results.md``, "The planner" and "Minimax regret and the steady scenario"):
    ranking by the most streams within :data:`TOLERANCE` first chose Sample at ε = 0.1, w = 50,
    2.4× the best on ``sine``; ranking by the largest *ratio* to the best let the sparsest
    scenario (a few people per bin, where every release loses to zeros by a count or two) outweigh
    the declared one, and chose candidates that never release (BA, BD) on ``census`` at ε = 0.1,
    up to 1.40× the zero release's error there."""
    cols = list(range(len(next(iter(mae.values()))))) if use is None else list(use)
    guarded = cols if guard_on is None else [i for i in guard_on if i in cols]
    clean = {n: [x if math.isfinite(x) else math.inf for x in v] for n, v in mae.items()}  # NaN: unusable
    best = {i: max(min(v[i] for v in clean.values()), 1e-12) for i in cols}
    ratios = {n: [max(v[i], 1e-12) / best[i] for i in cols] for n, v in clean.items()}
    # a scenario no candidate could run (every error infinite) tells nothing: it has no regret
    scored = [i for i in cols if math.isfinite(best[i])]
    regret = {n: max((v[i] - best[i] for i in scored), default=0.0) for n, v in clean.items()}
    scores = {n: float(np.exp(np.mean(np.log(r)))) for n, r in ratios.items()}
    above = {n: zero is not None and any(v[i] > ZERO_GUARD * zero[i] for i in guarded) for n, v in clean.items()}
    guard = not all(above.values())

    def key(n: str) -> tuple:
        r = ratios[n]
        return (guard and above[n], round(regret[n], 9), round(scores[n], 12), -sum(x <= TOLERANCE for x in r), n)

    return scores, sorted(scores, key=key)


def _explain(p: Plan, chosen: Any) -> Plan:
    f = p.facts
    unit = (f"w-event ε={f['epsilon']} per w={f['w']}" if f["unit"] == "w-event"
            else f"user-level ε={f['epsilon']} over N={f['horizon']}")
    where = ("the declared-public history" if p.scenarios == ("public-history",) else
             f"{len(p.scenarios)} synthetic public streams ({', '.join(p.scenarios)}; "
             f"{planning_timesteps(f)} timesteps, {f['population'] or f['bins']} people over {f['bins']} bins at "
             "the peak, steady at every timestep)")
    ranked = sorted(p.scores, key=p.scores.get)
    service_ranked = [n for n in ranked if f["population"] or not n.endswith(tuple(f"+{x}" for x in LAB_POST))]
    c = p.choice.name
    reasons = [f"planner (decision: auto, public information only: {unit}, C={f['cutoff']}, "
               f"{f['bins']} bins, {f['mechanism']}): simulated {len(p.scores)} candidates on {where}, "
               + (f"{f['runs']} seeded run(s)" if p.scenarios == ("public-history",) else
                  f"{f['realisations']} draw(s) of each, one seeded run each")]
    runner = next((n for n in service_ranked if n != c), None)
    within = sum(m <= TOLERANCE * min(v[i] for v in p.mae.values()) for i, m in enumerate(p.mae[c]))
    worst = max(m - min(v[i] for v in p.mae.values()) for i, m in enumerate(p.mae[c]))
    reasons.append(f"chose {c}: at most {worst:.3g} counts per bin worse than the best candidate on any stream "
                   f"(the smallest worst case), within {TOLERANCE}x of the best on {within} of "
                   f"{len(p.scenarios)} streams, {p.scores[c]:.3g}x the best on average (geometric mean)"
                   + (f"; next {runner} at {p.scores[runner]:.3g}x on average" if runner else ""))
    reasons.append("release settings: " + ", ".join(f"release.{k}: {str(v).lower() if isinstance(v, bool) else v}"
                                                    for k, v in p.choice.release_changes().items())
                   + " (write them into the configuration to pin the choice)")
    if p.lab_choice != p.choice:
        gain = 1 - p.scores[p.lab_choice.name] / p.scores[c]
        reasons.append(f"with privacy.population declared it would choose {p.lab_choice.name} ({gain:.0%} lower "
                       "relative error; the smoother needs the public population); 'dpstream evaluate --methods "
                       "auto' runs it")
    warnings = list(_zero_warnings(p, c))
    warnings += warnings_for(chosen, simulated=True)
    return Plan(p.choice, p.lab_choice, p.scenarios, p.scores, p.mae, p.zero_mae, tuple(reasons),
                tuple(warnings), p.facts)


def _zero_warnings(p: Plan, name: str) -> list[str]:
    """Scenarios where the choice is not at least 2 % better than the zero release."""
    worse = [s for s, m, z in zip(p.scenarios, p.mae[name], p.zero_mae, strict=True) if m >= 0.98 * z]
    if not worse:
        return []
    return [f"{name} is expected to do no better than publishing nothing (the zero release), or worse, on "
            f"{len(worse)} of {len(p.scenarios)} public streams ({', '.join(worse)}): at this ε and domain the "
            "noise is as large as the counts; consider a larger ε, a coarser domain (fewer bins) or a larger w"]


# -- warnings for any configuration ------------------------------------------------------------


def noise_above_data(settings: Any, *, max_steps: int | None = None) -> str | None:
    """A warning when even the most generous fresh release is expected noisier than the data.

    The zero release's mean absolute error per bin is the mean count per bin, at most
    ``privacy.population / U`` (public). A fresh release at ε' has expected absolute noise
    ``E|Z|`` per bin (the mechanism's public formula). Stepping the engine on an all-zero
    histogram (no data; seeded noise, never published) for ``max_steps`` timesteps gives the
    largest ε' this method spends on one release; if ``E|Z|`` at that ε' exceeds ``n / U``, every
    release is expected to be worse than publishing nothing. None: no warning (or no population)."""
    p = settings.privacy
    if not p.population or settings.release.decision == AUTO:
        return None
    bins = settings.domain().size
    if bins > 200_000:
        return None
    steps = max_steps or min(p.horizon or 2 * (p.w or 1), 2 * (p.w or 1) if p.w else 50, 100)
    zeros = np.zeros(bins, dtype=np.int64)
    noise = Randomness.seeded(0)
    eps = Fraction(0)
    for _, release, _ in step_run(settings.engine(), lambda t, state: zeros,
                                  lambda t: noise.drawer("planner-diagnostics", t), timesteps=max(1, steps)):
        if release.kind == "fresh" and release.epsilon_release and release.epsilon_release > eps:
            eps = Fraction(release.epsilon_release)
    if eps <= 0:
        return None
    expected = settings.mechanism().expected_abs_error(eps, bins)
    data = p.population / bins
    if expected <= data:
        return None
    return (f"{settings.release.decision} is expected to do worse than publishing nothing: its most generous "
            f"release (epsilon {float(eps):.4g}) has an expected noise of {expected:.4g} per bin, above the zero "
            f"release's error of at most {data:.4g} per bin (privacy.population / {bins} bins). Use a larger "
            "epsilon, a coarser domain, or decision: auto to compare the methods")


def warnings_for(settings: Any, *, simulated: bool = False) -> list[str]:
    """Warnings about a configuration from public information only (no simulation):
    threshold below the noise floor; noise above the data (``simulated``: skip, the plan's own
    zero-release comparison replaces it)."""
    from stream.planning.diagnostics import threshold_below_noise_floor

    out = []
    if settings.release.decision == AUTO:
        return out
    diagnosis = threshold_below_noise_floor(settings)
    if diagnosis is not None:
        out.append(diagnosis.message())
    if not simulated:
        above = noise_above_data(settings)
        if above is not None:
            out.append(above)
    return out


def auto_method(settings: Any) -> tuple[str, Any]:
    """What ``evaluate --methods auto`` runs: the row name (``auto``, or ``auto+kalman`` when the
    plan's choice smooths) and the settings of the plan's choice (what the service would publish).
    Reads only the configuration (:func:`plan`), never the evaluated input."""

    chosen = plan(settings).choice
    name = AUTO + (f"+{chosen.post}" if chosen.post in FILTER_CHAINS else "")
    return name, _concrete(settings).with_changes({"release": chosen.release_changes()})


def resolve(settings: Any) -> Any:
    """``settings`` with ``release.decision: auto`` replaced by the plan's choice (a validated
    :class:`stream.config.Settings` whose ``plan`` is the :class:`Plan`); others unchanged."""
    if settings.release.decision != AUTO:
        return settings

    chosen = plan(settings)
    out = _concrete(settings).with_changes({"release": chosen.choice.release_changes()})
    out._plan = chosen  # a private attribute: not a setting, not in the fingerprint
    return out
