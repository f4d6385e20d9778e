"""What the settings build: the domain, the privacy unit, the method, the mechanism, the
post-processor and, in one place, the engine (:func:`build_engine`).

Every cross-section check that needs a built object lives here (the model mechanisms' options,
the engine's own checks through :func:`controller.method.build_engine`); :func:`validate` runs
them all once at load time, so a configuration that fails here releases nothing. Single-section
checks live with their section (:mod:`stream.config.sections`).
"""

from __future__ import annotations

from dataclasses import replace
from math import comb
from typing import Any

from controller import method as _method
from controller.errors import ConfigurationError
from controller.method import MethodSpec
from controller.personal import PersonalEngine
from controller.pid import PIDGains
from controller.step import Engine
from controller.units import UserLevel, WEvent
from histogram.domain import CategoricalAttribute, Domain, NumericAttribute
from histogram.errors import HistogramError
from histogram.lpa import LaplaceMechanism
from histogram.mechanism import Mechanism
from histogram.noise import Randomness
from histogram.postprocess import STATEFUL, PostProcessor, parse_chain
from stream.config.alerts import private_engine
from stream.config.errors import ConfigError
from stream.config.sections import (
    HISTOGRAM_ONLY_DECISIONS,
    MODEL_MECHANISMS,
    CopulaSection,
    MarginalsSection,
)
from stream.config.view import SettingsView

__all__ = ["build_engine", "build_mechanism", "domain", "ingest_domain", "method_spec", "model_tables", "noise_source",
           "postprocessor", "unit", "validate"]


def domain(settings: SettingsView) -> Domain:
    """The public histogram domain (``schema.attributes``)."""
    attrs = []
    for a in settings.schema_.attributes:
        if a.kind == "categorical":
            attrs.append(CategoricalAttribute(a.name, tuple(str(v) for v in a.values or ())))
        else:
            attrs.append(
                NumericAttribute(
                    a.name, float(a.min), float(a.max), int(a.bins),  # type: ignore[arg-type]
                    a.out_of_range or settings.schema_.out_of_domain,
                )
            )
    return Domain(tuple(attrs))


def ingest_domain(settings: SettingsView) -> Domain:
    """The domain events are decoded with: the counted attributes, plus the consent attribute
    (``privacy.personal.attribute``: its tier names; never counted, only routed by)."""
    counted = domain(settings)
    personal = settings.privacy.personal
    if personal is None or personal.attribute is None:
        return counted
    return Domain((CategoricalAttribute(personal.attribute, tuple(personal.tiers)), *counted.attributes))


def unit(settings: SettingsView) -> UserLevel | WEvent:
    """The privacy unit and its budget (``privacy.unit``, ``privacy.epsilon`` and the unit's fields)."""
    p = settings.privacy
    if p.unit == "user-level":
        return UserLevel(p.epsilon, p.horizon, p.cutoff)  # type: ignore[arg-type]
    return WEvent(p.epsilon, p.w, p.cutoff)  # type: ignore[arg-type]


def model_tables(settings: SettingsView) -> int:
    """How many marginal tables a model release publishes (1 for a histogram mechanism).

    The decision of a model release compares the released tables (``docs/privacy.md`` §11.4):
    its sensitivity is ``contribution_bound × tables`` and its threshold T applies to the mean
    normalised L1 per table, i.e. ``T × population × tables`` in counts.
    """
    r, m = settings.release, len(settings.schema_.attributes)
    if r.mechanism == "copula":
        pairwise = (r.copula or CopulaSection()).decision_space == "pairwise" and m >= 2
        return m + comb(m, 2) if pairwise else m
    if r.mechanism == "marginals":
        k = (r.marginals or MarginalsSection()).k
        return sum(comb(m, i) for i in range(1, min(k, m) + 1))
    return 1


def method_spec(settings: SettingsView, decision: str | None = None) -> MethodSpec:
    """The controller's view of ``release.*`` and ``privacy.*`` (``decision``: another method with the
    same parameters). :class:`~controller.method.MethodSpec` checks the method's own parameters."""
    r, p = settings.release, settings.privacy
    if (decision or r.decision) == "auto":
        raise ConfigurationError(
            "release.decision: auto is replaced by the planner's choice before use: load the configuration "
            "with a dpstream command (check-config, run, evaluate, replay) or stream.commands.load_resolved")
    method = decision or r.decision
    tables = model_tables(settings)
    return MethodSpec(
        decision=decision or r.decision,
        unit=unit(settings),
        threshold=r.threshold,
        population=None if p.population is None else p.population * tables,
        k=r.k,
        svt_split=r.svt_split,
        pid=PIDGains(**r.pid.model_dump()),
        burn_in=r.burn_in,
        sensitivity=p.contribution_bound * tables,
        noise_floor=r.noise_floor,
        # the configured method's floor (MethodSpec refuses one for another method); a method
        # evaluated beside it (``decision``) runs without
        min_per_window=r.min_per_window if decision is None or method == "adaptive-sample" else None,
    )


def build_mechanism(settings: SettingsView) -> Mechanism:
    """The release mechanism (``release.mechanism``) over this domain."""
    bound, conf = settings.privacy.contribution_bound, settings.release.confidence
    _check_model_options(settings)
    if settings.release.mechanism in MODEL_MECHANISMS:
        return _model_mechanism(settings)
    if settings.release.mechanism == "lpa":
        if settings.release.psd:
            raise ConfigurationError("release.psd options are set but release.mechanism is lpa")
        return LaplaceMechanism(bound, conf)
    from histogram.psd.mechanism import PSDMechanism  # imported lazily: optional heavy module

    return PSDMechanism.from_options(domain(settings).shape, sensitivity=bound, confidence=conf,
                                     options=settings.release.psd)


def _check_model_options(settings: SettingsView) -> None:
    """``release.copula`` / ``release.marginals`` only with their mechanism, and what a model release needs."""
    r = settings.release
    for name in MODEL_MECHANISMS:
        if getattr(r, name) is not None and r.mechanism != name:
            raise ConfigurationError(
                f"release.{name} is set but release.mechanism is {r.mechanism}; remove release.{name} or set "
                f"release.mechanism: {name}")
    if r.mechanism not in MODEL_MECHANISMS:
        return
    if r.psd:
        raise ConfigurationError(f"release.psd options are set but release.mechanism is {r.mechanism}; remove "
                                 "release.psd")
    if r.decision in HISTOGRAM_ONLY_DECISIONS:
        raise ConfigurationError(
            f"release.decision: {r.decision} rewrites histogram counts and cannot drive a model release "
            f"(release.mechanism: {r.mechanism}); use one of dsat, dsft, uniform, fixed, bd, ba, sample")
    post = getattr(r, "postprocess", "none")
    if isinstance(post, str) and post != "none":
        raise ConfigurationError(
            f"release.postprocess: {post} applies to histogram counts; a model release (release.mechanism: "
            f"{r.mechanism}) is published as released: set release.postprocess: none")
    m = len(settings.schema_.attributes)
    if r.mechanism == "copula" and m < 2:
        raise ConfigurationError(
            f"release.mechanism: copula needs at least 2 attributes in schema.attributes (got {m}); a copula "
            "models their dependence: use lpa or psd for a single attribute")
    if r.mechanism == "marginals":
        opts = r.marginals or MarginalsSection()
        if opts.k > m:
            raise ConfigurationError(
                f"release.marginals.k: {opts.k} exceeds the {m} attribute(s) in schema.attributes; set k "
                f"between 1 and {m}")
        if opts.synthetic_size and opts.k < 2 and m > 1:
            raise ConfigurationError(
                f"release.marginals.synthetic_size: {opts.synthetic_size} needs 2-way tables to synthesise "
                "from; set release.marginals.k: 2 (or more), or synthetic_size: 0")


def _model_mechanism(settings: SettingsView) -> Mechanism:
    from histogram.copula.mechanism import DPCopula  # imported lazily: scipy-heavy modules
    from histogram.marginals.kway import KWayMarginals
    from histogram.model_release import CopulaModelMechanism, KWayModelMechanism

    r, p = settings.release, settings.privacy
    levels = domain(settings).shape
    if r.mechanism == "copula":
        opts = r.copula or CopulaSection()
        floor = opts.min_records if opts.min_records is not None else p.population
        if floor is None:
            raise ConfigurationError(
                "release.copula.min_records is not set and privacy.population is not declared; set "
                "release.copula.min_records to a public floor on the records per timestep (Kendall's "
                "sensitivity is 4/(n0+1) with it), e.g. the smallest population you expect")
        if floor < 2:
            raise ConfigurationError(
                f"release.copula.min_records defaults to privacy.population ({floor}), which is below 2; set "
                "release.copula.min_records: 2 or more")
        copula = DPCopula(levels, opts.correlation, opts.budget_split, floor, opts.partitions,
                          sensitivity=p.contribution_bound)
        return CopulaModelMechanism(copula, opts.synthetic_size, r.confidence, opts.decision_space)
    opts_m = r.marginals or MarginalsSection()
    return KWayModelMechanism(KWayMarginals(levels, opts_m.k, sensitivity=p.contribution_bound),
                              opts_m.consistency, opts_m.synthetic_size, r.confidence)


def postprocessor(settings: SettingsView) -> PostProcessor:
    """``release.postprocess`` with its public parameters (:mod:`histogram.postprocess`).

    Raises:
        ConfigurationError: a smoother without ``privacy.population``.
    """
    try:
        return PostProcessor.for_stream(settings.release.postprocess, population=settings.privacy.population,
                                        bins=domain(settings).size,
                                        contribution_bound=settings.privacy.contribution_bound,
                                        delay=settings.release.delay)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None


def noise_source(settings: SettingsView) -> Randomness:
    """Secure randomness, or seeded when (and only when) ``randomness.allow_seeded_noise`` allows it."""
    seed = settings.randomness.seed
    return Randomness.secure() if seed is None else Randomness.seeded(seed)


def build_engine(settings: SettingsView, *, decision: str | None = None, mechanism: Mechanism | None = None,
                 randomness: Randomness | None = None) -> Engine | PersonalEngine:
    """The one place an engine is built from settings: the service, replay, the lab and the checks
    at load time all come here.

    Args:
        decision: another decision method with the same parameters (default ``release.decision``).
        mechanism: a stand-in for :func:`build_mechanism` built from the same settings (the lab wraps the
            model mechanisms to keep each released model); its sensitivity is checked like any other.
        randomness: under ``privacy.personal``, what keys the Sampling coins (default
            :func:`noise_source`, as the service; the lab passes ``Randomness.seeded(seed + r)`` so
            that run ``r`` is ``replay --seed seed+r``). Unused without ``privacy.personal``.

    Returns:
        An :class:`~controller.step.Engine`, or under ``privacy.personal`` a
        :class:`~controller.personal.PersonalEngine`: one engine per part of the declaration's plan,
        each with the stream's method at the part's ε (a ledger per budget level).

    Raises:
        ConfigurationError: the method, the mechanism or the declaration is inconsistent.
    """
    spec = method_spec(settings, decision)
    mech = build_mechanism(settings) if mechanism is None else mechanism
    bins = domain(settings).size
    online = settings.release.planner is not None and settings.release.planner.online is not None
    if online and (settings.privacy.personal is not None or any(q.private is not None for q in settings.queries)):
        raise ConfigurationError("release.planner.online does not re-plan personalized streams or streams with "
                                 "private alerts: remove release.planner.online or those settings")
    if any(q.private is not None for q in settings.queries):  # private threshold alerts (issue 33)
        try:
            return private_engine(settings, lambda s: _method.build_engine(s, mech, bins), spec)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
    if settings.privacy.personal is None:
        engine = _method.build_engine(spec, mech, bins)
        if online:
            return replace(engine, policy=online_policy(settings, spec, mech, bins))
        return engine
    declaration = settings.personal_declaration()
    engines = []
    for part in declaration.plan.parts:
        u = spec.unit
        part_unit = (UserLevel(part.epsilon, u.horizon, u.cutoff) if isinstance(u, UserLevel)
                     else WEvent(part.epsilon, u.w, u.cutoff))
        engines.append(_method.build_engine(replace(spec, unit=part_unit), mech, bins))
    return PersonalEngine(declaration.plan, engines, spec.unit, declaration.tier_level, declaration.default_level,
                          noise_source(settings) if randomness is None else randomness, settings.stream.id,
                          declaration=(bytes.fromhex(declaration.budgets.fingerprint()) if declaration.table_keys
                                       else b""))


#: Post-processing steps that smooth by the releases' published noise (the configuration refuses
#: them after FAST and PeGaSus, which publish filtered counts with no interval): every stateful step.
_SMOOTHERS = STATEFUL


def online_policy(settings: SettingsView, spec: MethodSpec, mech: Mechanism, bins: int) -> Any:
    """``release.planner.online``: the stream's method wrapped in a :class:`controller.online.OnlinePolicy`.

    The candidates are the planner's (:func:`stream.planning.planner.runnable_methods`: every
    decision method this unit can run; DSFT and DSAT with and without ``release.noise_floor``),
    built from ``spec`` with only the method (and the noise floor) changed: same unit, mechanism,
    bins, Δ, threshold and PID gains. It starts with the configured method (the planner's choice
    under ``decision: auto``) and re-plans with :func:`stream.planning.online.replanner`.

    Raises:
        ConfigurationError: not w-event, a model release, or personalized/private-alert streams.
    """
    from controller.method import GROUPED_METHODS, METHODS
    from controller.online import OnlinePolicy
    from stream.planning.online import candidate_label, replanner

    online = settings.release.planner.online  # type: ignore[union-attr]
    if settings.privacy.unit != "w-event":
        raise ConfigurationError("release.planner.online re-plans among w-event methods: set privacy.unit: "
                                 "w-event (under user-level privacy name release.decision)")
    if getattr(mech, "view", None) is not None:
        raise ConfigurationError("release.planner.online plans histogram releases: use release.mechanism lpa or psd")
    smoothing = any(s in _SMOOTHERS for s in parse_chain(settings.release.postprocess))
    policies, labels = [], []
    for decision in METHODS:
        if (decision in GROUPED_METHODS and settings.release.mechanism != "lpa") or \
                (smoothing and decision in ("fast", "pegasus")):
            continue
        for floor in ((False, True) if decision in ("dsat", "dsft") else (None,)):
            try:
                cand = replace(spec, decision=decision, noise_floor=spec.noise_floor if floor is None else floor)
                policies.append(_method.build_policy(cand, bins))
            except ConfigurationError:
                continue
            labels.append(candidate_label(decision, floor))
    start_label = candidate_label(spec.decision, spec.noise_floor if spec.decision in ("dsat", "dsft") else None)
    if start_label not in labels:
        raise ConfigurationError(f"release.planner.online cannot start from {start_label}: it is not a candidate here")
    return OnlinePolicy(tuple(policies), tuple(labels), labels.index(start_label),
                        replanner(settings, tuple(labels)), online.every, online.min_releases,
                        settings.release.planner.timesteps)  # type: ignore[union-attr]


def validate(settings: SettingsView) -> None:
    """Build the domain, the method, the engine and the post-processor once, so every cross-field
    error surfaces at load time.

    ``release.decision: auto`` is checked with a placeholder method (``uniform``) and without the
    personal declaration; the commands replace it with the planner's choice
    (:func:`stream.commands.load_resolved`), whose settings are validated again.

    Raises:
        ConfigError: ``invalid configuration: <what was wrong and what to do>``.
    """
    try:  # queries: resolved against the domain (a malformed one says what to write)
        settings.declared_queries()
    except (HistogramError, ValueError) as exc:
        raise ConfigError(f"invalid configuration: {exc}") from exc
    try:
        domain(settings)
        if settings.release.decision == "auto":
            _method.build_engine(method_spec(settings, "uniform"), build_mechanism(settings), domain(settings).size)
            return
        method_spec(settings)
        build_engine(settings)
        postprocessor(settings)
    except (ConfigurationError, HistogramError) as exc:
        raise ConfigError(f"invalid configuration: {exc}") from exc
