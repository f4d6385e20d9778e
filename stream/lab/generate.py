"""Synthetic dynamic datasets for evaluation (thesis §4.5.1), written as events.

Two generators, both vectorised with numpy and streamed to CSV one timestep
(in chunks of at most ``chunk_rows`` rows) at a time, so memory is bounded by
the population, never by the length of the stream:

* **census** — a census-like population over the thesis's six attributes
  (Age 96, Gender 2, Education 12, Health insurance 2, Marital status 2,
  Income 3 = 27,648 bins). Attributes are correlated through a small
  hand-written model (education follows age, income follows education and
  age, insurance follows income and age, marital status follows age). The
  stream is split into ``periods`` periods (default 10); in each period every
  timestep deletes ``m`` people chosen at random and inserts ``m`` new ones,
  with ``m ~ N(r·P/2, σ²)`` drawn once per period (clipped to ``[0, P]``).
  Newcomers are drawn from a *period profile* (a tilt of the age, gender,
  education and income distributions), so the composition drifts at a speed
  set by the period's ``m``; the thesis inserts from a public pool of real
  census records instead. Each person present at a timestep emits one event
  in it.
* **traffic** — ``P`` moving objects on a ``G × G`` grid (default 64 × 64):
  homes clustered around residential centres, workplaces around business
  centres; commuters leave home around 07:00–09:00 and go back around
  16:00–19:00 (rush hours; weekends without commute), others run a midday
  errand; every object also jitters by a cell now and then. Each object emits
  one event (its cell) per timestep.

Randomness here is public workload, not privacy noise: it uses its own seeded
numpy generator and never touches a release.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import numpy as np

__all__ = [
    "CENSUS_ATTRIBUTES",
    "CensusProfile",
    "GenerateReport",
    "census_attributes",
    "census_schedule",
    "census_stream",
    "traffic_attributes",
    "traffic_stream",
    "generate",
    "default_cutoff",
    "BUDGET_LAWS",
    "draw_budgets",
    "budget_units",
]

#: ``--budgets``: per-person ε laws of thesis §5.3 (uniform on [0.01, 0.1]; N(0.1, 1) truncated to
#: [0.01, 1]) and three consent tiers 0.01/0.05/0.1 held by 20/50/30 % of the people.
BUDGET_LAWS = ("uniform", "normal", "tiers")

Kind = Literal["census", "traffic", "highdim", "exponential", "sine", "lognormal", "trend", "randomwalk", "sudden"]
DEFAULT_START = datetime(2024, 1, 1, tzinfo=UTC)

# -- the census domain (thesis §4.5.1) ------------------------------------------------

EDUCATION = (
    "none", "grade-1-4", "grade-5-6", "grade-7-8", "grade-9", "grade-10", "grade-11",
    "grade-12", "high-school", "some-college", "bachelor", "graduate",
)
CENSUS_ATTRIBUTES: tuple[dict[str, Any], ...] = (
    {"name": "age", "kind": "numeric", "min": 0, "max": 96, "bins": 96},
    {"name": "gender", "kind": "categorical", "values": ["female", "male"]},
    {"name": "education", "kind": "categorical", "values": list(EDUCATION)},
    {"name": "health_insurance", "kind": "categorical", "values": ["yes", "no"]},
    {"name": "marital_status", "kind": "categorical", "values": ["married", "not-married"]},
    # the thesis's income classes: < 0 (people under 20), 0–28K, above 28K (the median)
    {"name": "income", "kind": "categorical", "values": ["negative", "0-28k", "over-28k"]},
)


def census_attributes(dimensions: int = 6) -> list[dict[str, Any]]:
    """``schema.attributes`` of the census domain, optionally only its first ``dimensions``."""
    if not 1 <= dimensions <= len(CENSUS_ATTRIBUTES):
        raise ValueError(f"the census domain has 1 to {len(CENSUS_ATTRIBUTES)} dimensions, got {dimensions}")
    return [dict(a) for a in CENSUS_ATTRIBUTES[:dimensions]]


def traffic_attributes(grid: int) -> list[dict[str, Any]]:
    """Two numeric attributes, one bin per grid cell on each axis."""
    return [
        {"name": "x", "kind": "numeric", "min": 0, "max": grid, "bins": grid},
        {"name": "y", "kind": "numeric", "min": 0, "max": grid, "bins": grid},
    ]


def default_cutoff(timesteps: int, w: int | None = None) -> int:
    """Thesis Table 4.2: C = 0.01·N, rounded up, at least 1 (and at most w)."""
    c = max(1, math.ceil(0.01 * timesteps - 1e-9))
    return min(c, w) if w is not None else c


@dataclass(frozen=True)
class CensusProfile:
    """Tilts of the census model for one period's newcomers (0 = neutral)."""

    age: float = 0.0
    female: float = 0.0
    education: float = 0.0
    income: float = 0.0

    @classmethod
    def draw(cls, rng: np.random.Generator) -> CensusProfile:
        return cls(
            age=float(rng.uniform(-1.5, 1.5)),
            female=float(rng.uniform(-0.1, 0.1)),
            education=float(rng.uniform(-1.0, 1.0)),
            income=float(rng.uniform(-1.0, 1.0)),
        )


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def sample_census(n: int, profile: CensusProfile, rng: np.random.Generator) -> np.ndarray:
    """``n`` people as an ``(n, 6)`` int array of codes (age in years, then value positions)."""
    ages = np.arange(96, dtype=np.float64)
    weights = np.where(ages <= 60, 1.0, 1.0 - 0.85 * (ages - 60) / 35)
    weights *= np.exp(profile.age * (ages - 45) / 30)
    age = rng.choice(96, size=n, p=weights / weights.sum())
    female = rng.random(n) < np.clip(0.51 + profile.female, 0.05, 0.95)
    gender = np.where(female, 0, 1)
    # education: by age for children, a tilted distribution over levels 6..11 for adults
    school = np.clip(1 + ((age - 5) * 8) // 13 + rng.integers(-1, 1, n, endpoint=True), 1, 8)
    adult_levels = np.arange(6, 12)
    base = np.log(np.array([0.08, 0.10, 0.30, 0.20, 0.20, 0.12]))
    logits = base + profile.education * (adult_levels - 8) / 2
    p_adult = np.exp(logits - logits.max())
    adult = rng.choice(adult_levels, size=n, p=p_adult / p_adult.sum())
    education = np.where(age < 5, 0, np.where(age < 18, school, adult))
    # income: negative under 20, else high with a probability rising with education and age
    p_high = _sigmoid(-0.4 + 0.6 * (education - 8) + profile.income + 0.03 * (np.minimum(age, 55) - 40))
    income = np.where(age < 20, 0, np.where(rng.random(n) < p_high, 2, 1))
    p_insured = np.clip(
        0.72 + 0.15 * (income == 2) + 0.15 * (age >= 65) - 0.12 * ((age >= 18) & (age < 30)), 0.02, 0.98
    )
    insurance = np.where(rng.random(n) < p_insured, 0, 1)
    p_married = np.where(age < 18, 0.0, 0.65 * _sigmoid((age - 27) / 4.0) * np.where(age > 75, 0.7, 1.0))
    marital = np.where(rng.random(n) < p_married, 0, 1)
    return np.stack([age, gender, education, insurance, marital, income], axis=1).astype(np.int64)


def census_schedule(
    timesteps: int,
    population: int,
    rate: float,
    periods: int,
    sigma: float | None,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-timestep update size ``m`` and period number.

    Timestep 0 is the initial population (``m = 0``); timesteps ``1..N-1`` are
    cut into ``periods`` nearly equal periods, each with one
    ``m ~ N(r·P/2, σ²)`` rounded and clipped to ``[0, P]``. ``σ`` defaults to
    half the mean.
    """
    if periods < 1:
        raise ValueError("periods must be >= 1")
    mean = rate * population / 2.0
    sd = mean / 2.0 if sigma is None else float(sigma)
    m = np.zeros(timesteps, dtype=np.int64)
    period = np.zeros(timesteps, dtype=np.int64)
    if timesteps > 1:
        parts = np.array_split(np.arange(1, timesteps), min(periods, timesteps - 1))
        for p, idx in enumerate(parts):
            m[idx] = int(np.clip(round(rng.normal(mean, sd)), 0, population))
            period[idx] = p
    return m, period


@dataclass(frozen=True)
class Chunk:
    """Events of one timestep (or part of one): person ids and attribute codes."""

    timestep: int
    ids: np.ndarray
    codes: np.ndarray  # (rows, attributes) int


def census_stream(
    timesteps: int,
    population: int,
    seed: int,
    *,
    rate: float = 0.5,
    periods: int = 10,
    sigma: float | None = None,
    dimensions: int = 6,
    info: dict[str, Any] | None = None,
) -> Iterator[Chunk]:
    """The census population at each timestep (one row per person present)."""
    rng = np.random.default_rng([seed, 0xCE05])
    m, period = census_schedule(timesteps, population, rate, periods, sigma, rng)
    profiles = [CensusProfile.draw(rng) for _ in range(int(period.max()) + 1)]
    if info is not None:
        info.update(updates=m.tolist(), periods=period.tolist(), profiles=[vars(p) for p in profiles])
    codes = sample_census(population, CensusProfile(), rng)
    ids = np.arange(population, dtype=np.int64)
    next_id = population
    for t in range(timesteps):
        k = int(m[t])
        if k:
            out = rng.choice(population, size=k, replace=False)
            codes[out] = sample_census(k, profiles[int(period[t])], rng)
            ids[out] = np.arange(next_id, next_id + k, dtype=np.int64)
            next_id += k
        yield Chunk(t, ids, codes[:, :dimensions])


def budget_units(law: str, n: int, rng: np.random.Generator, grid: int) -> np.ndarray:
    """``n`` budgets drawn from ``law`` as numerators over ``grid`` (int64, floored, at least 0.01).

    Laws: :data:`BUDGET_LAWS`, and ``normal-clipped`` (N(0.1, 1) clipped to [0.01, 1]: most people
    at the ends; an earlier reading of the thesis, kept for ``benchmarks/bench_pdp.py``)."""
    if law == "uniform":
        x = rng.uniform(0.01, 0.1, n)
    elif law == "normal":  # N(0.1, 1) truncated to [0.01, 1] by redrawing (thesis §5.3)
        x = rng.normal(0.1, 1.0, n)
        bad = (x < 0.01) | (x > 1.0)
        while bad.any():
            x[bad] = rng.normal(0.1, 1.0, int(bad.sum()))
            bad = (x < 0.01) | (x > 1.0)
    elif law == "normal-clipped":
        x = np.clip(rng.normal(0.1, 1.0, n), 0.01, 1.0)
    elif law == "tiers":
        x = rng.choice([0.01, 0.05, 0.1], size=n, p=[0.2, 0.5, 0.3])
    else:
        raise ValueError(f"unknown budget law {law!r}; choose from {', '.join((*BUDGET_LAWS, 'normal-clipped'))}")
    return np.maximum(np.floor(np.round(x * grid, 6)).astype(np.int64), grid // 100)


def draw_budgets(persons: np.ndarray, law: str, seed: int, grid: int = 100) -> tuple[list[str], dict[str, str]]:
    """Each person's tier under ``law`` (:data:`BUDGET_LAWS`), drawn independently of their records.

    Budgets are floored to a public grid of ``1/grid`` (at least 0.01); a tier is named by its ε
    (``"0.04"``). Returns ``(tier of each person, tier → ε as an exact decimal string)``. Public
    workload randomness (its own seeded generator), like the rest of the generator.
    """
    if law not in BUDGET_LAWS:
        raise ValueError(f"--budgets must be one of {', '.join(BUDGET_LAWS)}, got {law!r}")
    if not 100 <= grid <= 10_000 or grid % 100:
        raise ValueError(f"--budget-grid must be a multiple of 100 in [100, 10000], got {grid}")
    units = budget_units(law, int(persons.size), np.random.default_rng([seed, 0xB0D6E7]), grid)
    digits = len(str(grid)) - 1

    def name(u: int) -> str:
        return f"{u / grid:.{digits}f}"

    names = {int(u): name(int(u)) for u in np.unique(units).tolist()}
    return [names[int(u)] for u in units.tolist()], {v: v for v in sorted(names.values(), key=float)}


def _write_consent(out_dir: Path, persons: np.ndarray, law: str, seed: int, grid: int) -> dict[str, Any]:
    """``out_dir/consent.csv`` (person id, tier) and the ``privacy.personal`` block that reads it."""
    tiers_of, tiers = draw_budgets(persons, law, seed, grid)
    path = (out_dir / "consent.csv").resolve()
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("person_id,tier\n")
        fh.writelines(f"{p},{t}\n" for p, t in zip(persons.tolist(), tiers_of, strict=True))
    return {"mechanism": "privacy_aware", "tiers": tiers, "table": str(path),
            "min_size": max(1, int(persons.size) // 20)}


def traffic_stream(
    timesteps: int,
    population: int,
    seed: int,
    *,
    grid: int = 64,
    timestep_seconds: float = 900.0,
    info: dict[str, Any] | None = None,
) -> Iterator[Chunk]:
    """``population`` objects moving on a ``grid × grid`` grid, one row per object per timestep."""
    if grid < 2:
        raise ValueError("the traffic grid needs at least 2 cells per side")
    rng = np.random.default_rng([seed, 0x7AF1C])
    n, g = population, float(grid)
    homes_c = rng.uniform(0.1 * g, 0.9 * g, size=(6, 2))
    work_c = g / 2 + rng.normal(0, g / 8, size=(3, 2))
    home = homes_c[rng.integers(0, 6, n)] + rng.normal(0, g / 12, (n, 2))
    work = work_c[rng.integers(0, 3, n)] + rng.normal(0, g / 20, (n, 2))
    home, work = np.clip(home, 0, g - 1), np.clip(work, 0, g - 1)
    commuter = rng.random(n) < 0.75
    speed = g * rng.uniform(0.6, 1.2, n)  # cells per hour
    ids = np.arange(n, dtype=np.int64)
    if info is not None:
        info.update(grid=grid, commuters=int(commuter.sum()))
    day_plan: tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
    for t in range(timesteps):
        seconds = t * timestep_seconds
        day = int(seconds // 86400)
        hour = (seconds - day * 86400) / 3600.0
        if day_plan is None or day_plan[0] != day:
            weekend = day % 7 in (5, 6)
            goes = commuter & (not weekend)
            leave = np.where(goes, rng.normal(7.75, 0.6, n), rng.uniform(9.5, 14.0, n))
            back = np.where(goes, rng.normal(17.25, 0.8, n), leave + rng.uniform(1.0, 3.0, n))
            dest = np.where(goes[:, None], work, work_c[rng.integers(0, 3, n)] + rng.normal(0, g / 16, (n, 2)))
            dest = np.clip(dest, 0, g - 1)
            trip = np.maximum(np.linalg.norm(dest - home, axis=1) / speed, 1e-6)  # hours
            day_plan = (day, leave, back, dest, trip)
        _, leave, back, dest, trip = day_plan
        out_frac = np.clip((hour - leave) / trip, 0, 1)
        back_frac = np.clip((hour - back) / trip, 0, 1)
        frac = np.where(hour < back, out_frac, 1 - back_frac)
        pos = home + (dest - home) * frac[:, None]
        pos += rng.integers(-1, 2, (n, 2)) * (rng.random((n, 2)) < 0.2)
        cells = np.clip(np.floor(pos + 0.5), 0, grid - 1).astype(np.int64)
        yield Chunk(t, ids, cells)


# -- writing --------------------------------------------------------------------------


@dataclass
class GenerateReport:
    """What :func:`generate` wrote."""

    kind: str
    events: Path | None
    config: Path
    counts: Path | None
    timesteps: int
    population: int
    rows: int
    bins: int
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "events": None if self.events is None else str(self.events),
            "config": str(self.config),
            "counts": None if self.counts is None else str(self.counts),
            "timesteps": self.timesteps,
            "population": self.population,
            "rows": self.rows,
            "bins": self.bins,
        }


class _CsvSink:
    """Streams event rows to a CSV file (pyarrow's writer when present, numpy otherwise)."""

    def __init__(self, path: Path, header: list[str]) -> None:
        self.path = path
        self._fh = open(path, "wb")  # noqa: SIM115 - closed in close()
        self._fh.write((",".join(header) + "\n").encode())
        try:
            import pyarrow as pa
            import pyarrow.csv as pacsv
        except ImportError:  # pragma: no cover - pyarrow is normally installed
            self._pa = None
        else:
            self._pa = (pa, pacsv)

    def write(self, columns: list[np.ndarray | tuple[np.ndarray, list[str]]]) -> None:
        """Each column: an int array, or ``(codes, values)`` for a categorical column."""
        if self._pa is not None:
            pa, pacsv = self._pa
            arrays = []
            for col in columns:
                if isinstance(col, tuple):
                    codes, values = col
                    arrays.append(pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(values)))
                else:
                    arrays.append(pa.array(col))
            table = pa.table(arrays, names=[f"c{i}" for i in range(len(arrays))])
            pacsv.write_csv(
                table, self._fh, write_options=pacsv.WriteOptions(include_header=False, quoting_style="none")
            )
            return
        parts = []
        for col in columns:
            if isinstance(col, tuple):
                codes, values = col
                parts.append(np.asarray(values, dtype=object)[codes].astype(str))
            else:
                parts.append(np.asarray(col).astype(str))
        lines = parts[0]
        for p in parts[1:]:
            lines = np.char.add(np.char.add(lines, ","), p)
        self._fh.write(("\n".join(lines.tolist()) + "\n").encode())

    def close(self) -> None:
        self._fh.close()


def _format_times(epoch: np.ndarray, time_format: str) -> np.ndarray | tuple[np.ndarray, list[str]]:
    if time_format == "epoch":
        return epoch
    text = np.datetime_as_string(epoch.astype("datetime64[s]"), unit="s")
    return np.char.add(text, "Z")


def _write_counts_header(fh: Any, bins: int) -> None:
    fh.write(("timestep," + ",".join(f"b{i}" for i in range(bins)) + "\n").encode())


def generate(
    kind: Kind,
    out: str | Path,
    *,
    timesteps: int,
    population: int,
    seed: int,
    rate: float = 0.5,
    periods: int = 10,
    sigma: float | None = None,
    dimensions: int = 6,
    grid: int = 64,
    timestep: str | None = None,
    start: datetime = DEFAULT_START,
    time_format: Literal["epoch", "iso"] = "epoch",
    epsilon: float = 1.0,
    threshold: float = 0.025,
    w: int | None = None,
    cutoff: int | None = None,
    counts: bool = False,
    events: bool = True,
    chunk_rows: int = 1_000_000,
    progress: Callable[[int], None] | None = None,
    arrival_delay: float | None = None,
    bins: int = 1,
    family: Any = None,
    highdim: Any = None,
    budgets: str | None = None,
    budget_grid: int = 100,
) -> GenerateReport:
    """Write ``out/events.csv`` and ``out/config.yaml`` (and ``out/counts.csv`` if ``counts``).

    ``events=False`` (with ``counts=True``) skips the events file: for
    experiments at populations whose events would not fit the time budget;
    the counts are exactly what windowing the events would give (each person
    has one event per timestep, so contribution bounding drops nothing).

    The config is valid for :func:`stream.config.load_settings`: the domain,
    ``privacy.population = population``, the thesis defaults of Table 4.2
    (ε = 1, C = ⌈0.01·N⌉, δ = 0.05, θ = 0.5, T = 0.025); user-level privacy
    over the horizon N for census, w-event (w = one day of timesteps unless
    given) for traffic.

    ``arrival_delay`` (seconds, the median delivery delay) adds an ``arrival_time`` column: each
    event's arrival is its event time plus a seeded log-normal delay (median ``arrival_delay``,
    σ = 1: most events arrive within seconds, a long tail minutes later), rows are written in
    arrival order, and the config sets ``schema.arrival_time`` with ``stream.allowed_lateness``
    at the model's 99.9th percentile (about 22 × the median), so replay and evaluate follow the
    service's per-event rule (``docs/privacy.md`` §1.1) and about 0.1% of events are late.

    The synthetic families (:mod:`stream.planning.families`: ``exponential``, ``sine``,
    ``lognormal``, ``trend``, ``randomwalk``, ``sudden``) write a ``bins``-bin count stream
    shaped by ``family`` (a :class:`~stream.planning.families.FamilyParams`); ``population`` is
    ignored and the config declares ``privacy.population = scale · bins`` (public: the
    family's own parameter), w-event with ``w`` (default 10).

    ``highdim`` (:mod:`stream.lab.highdim`, parameters ``highdim``, a
    :class:`~stream.lab.highdim.HighDimParams`) writes ``population`` people with 8–12
    correlated, drifting attributes over a domain of at least 10⁶ cells; w-event with ``w``
    (default 10). Its histogram is too large for ``counts.csv``: ``counts`` is refused.

    ``budgets`` (census and traffic; one of :data:`BUDGET_LAWS`) makes a personalized-DP stream
    (thesis ch. 5): every person who appears gets a budget drawn from the law, independently of
    their records, written to ``out/consent.csv`` (person id, tier named by its ε), and the
    config gains ``privacy.personal`` reading that table (privacy-aware partitioning, groups of at
    least 5 % of the people; ``dpstream evaluate --personal all`` compares all five mechanisms).

    Raises:
        ValueError: a parameter is out of range.
    """
    from stream.planning.families import (
        FAMILIES,
        FamilyParams,
        family_attributes,
        family_chunks,
        family_series,
    )

    is_family = kind in FAMILIES
    if is_family:
        family = family or FamilyParams()
        population = max(1, math.ceil(family.scale * bins))
    if arrival_delay is not None and not (0 < arrival_delay <= 86_400):
        raise ValueError(f"--arrival-delay must lie in (0, 86400] seconds, got {arrival_delay}")
    if kind == "highdim":
        from stream.lab.highdim import HighDimParams

        highdim = highdim or HighDimParams()
        if counts:
            raise ValueError(
                f"highdim has {highdim.cells:,} cells per timestep: a counts file would need that many columns "
                "per row. Write the events only (drop --counts/--counts-only); 'dpstream evaluate --mechanisms' "
                "reads the records and never builds the histogram")
    if kind not in ("census", "traffic", "highdim") and not is_family:
        raise ValueError(f"unknown dataset {kind!r}: choose census, traffic or one of {', '.join(FAMILIES)}")
    if bins < 1:
        raise ValueError(f"--bins must be >= 1, got {bins}")
    if timesteps < 1:
        raise ValueError(f"--timesteps must be >= 1, got {timesteps}")
    if population < 1:
        raise ValueError(f"--population must be >= 1, got {population}")
    if seed < 0:
        raise ValueError(f"--seed must be >= 0, got {seed}")
    if not 0 <= rate <= 2:
        raise ValueError(f"--rate must lie in [0, 2], got {rate}")
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be >= 1")
    if budgets is not None:
        if kind not in ("census", "traffic"):
            raise ValueError(f"--budgets makes per-person budgets for the census and traffic populations, not {kind}")
        if not events:
            raise ValueError("--budgets needs the events file (a consent table keys persons by id): drop --counts-only")
        draw_budgets(np.zeros(0, dtype=np.int64), budgets, seed, budget_grid)  # checks the law and the grid
    if not (events or counts):
        raise ValueError("nothing to write: ask for events, counts or both")
    if kind == "traffic" and grid < 2:
        raise ValueError(f"--grid must be >= 2 cells per side, got {grid}")
    from stream.config import parse_duration

    step = parse_duration(timestep or ("1d" if kind in ("census", "highdim") else "1h" if is_family else "15m"))
    if step.total_seconds() < 1 or step.total_seconds() != int(step.total_seconds()):
        raise ValueError(f"--timestep must be a whole number of seconds >= 1, got {timestep}")
    step_s = int(step.total_seconds())
    info: dict[str, Any] = {}
    if is_family:
        attrs = family_attributes(bins)
        series = family_series(kind, timesteps, seed, bins=bins, params=family)
        info.update(family=kind, params=vars(family), max=int(series.max()), mean=float(series.mean()))
        chunks = family_chunks(series)
        header_attrs = ["bin"]
        w = w if w is not None else min(10, timesteps)
    elif kind == "highdim":
        from stream.lab.highdim import highdim_attributes, highdim_stream

        attrs = highdim_attributes(highdim)
        chunks = highdim_stream(timesteps, population, seed, highdim, info=info)
        header_attrs = [a["name"] for a in attrs]
        w = w if w is not None else min(10, timesteps)
    elif kind == "census":
        attrs = census_attributes(dimensions)
        chunks = census_stream(
            timesteps, population, seed, rate=rate, periods=periods, sigma=sigma, dimensions=dimensions, info=info
        )
        header_attrs = [a["name"] for a in attrs]
    else:
        attrs = traffic_attributes(grid)
        chunks = traffic_stream(timesteps, population, seed, grid=grid, timestep_seconds=step_s, info=info)
        header_attrs = ["x", "y"]
    config = build_config(
        kind, attrs, timesteps=timesteps, population=population, step_seconds=step_s, start=start,
        epsilon=epsilon, threshold=threshold, w=w, cutoff=cutoff,
    )
    if arrival_delay is not None:
        config["schema"]["arrival_time"] = "arrival_time"
        config["stream"]["allowed_lateness"] = f"{math.ceil(arrival_delay * math.exp(3.0902))}s"
    _validate_config(config)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    shape = [int(a["bins"]) if a["kind"] == "numeric" else len(a["values"]) for a in attrs]
    bins = math.prod(shape)
    jitter = np.random.default_rng([seed, 0x71DE])
    t0 = int(start.timestamp())
    events_path = out_dir / "events.csv"
    with_arrival = arrival_delay is not None
    sink = (_CsvSink(events_path, ["person_id", "event_time", *(["arrival_time"] if with_arrival else []),
                                   *header_attrs]) if events else None)
    delay_rng = np.random.default_rng([seed, 0xA881])  # the delivery-delay model's own stream
    pending: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None  # rows not yet due

    def write_rows(ids: np.ndarray, times: np.ndarray, arrival: np.ndarray | None, codes: np.ndarray) -> None:
        cols: list[Any] = [ids, _format_times(times, time_format)]
        if arrival is not None:
            cols.append(np.round(arrival, 3) if time_format == "epoch"
                        else _format_times(np.floor(arrival).astype(np.int64), time_format))
        for j, a in enumerate(attrs):
            c = codes[:, j]
            cols.append(c if a["kind"] == "numeric" else (c, [str(v) for v in a["values"]]))
        sink.write(cols)  # type: ignore[union-attr]
    counts_path = out_dir / "counts.csv" if counts else None
    counts_fh = open(counts_path, "wb") if counts_path else None  # noqa: SIM115
    rows = 0
    persons = np.zeros(0, dtype=np.int64)  # everyone who appears (--budgets)
    try:
        if counts_fh:
            _write_counts_header(counts_fh, bins)
        for chunk in chunks:
            n = chunk.ids.size
            if budgets is not None:
                persons = np.union1d(persons, chunk.ids)
            if counts_fh:
                flat = np.ravel_multi_index(tuple(chunk.codes.T), shape)
                hist = np.bincount(flat, minlength=bins)
                counts_fh.write((f"{chunk.timestep}," + ",".join(map(str, hist.tolist())) + "\n").encode())
            if sink is not None and with_arrival:
                # arrival order: rows due before the next timestep's first possible arrival are
                # written now (sorted), the rest wait for the next chunk
                times = t0 + chunk.timestep * step_s + jitter.integers(0, step_s, n)
                arrival = times + delay_rng.lognormal(math.log(arrival_delay), 1.0, n)  # type: ignore[arg-type]
                rows_ = (chunk.ids, times, arrival, chunk.codes)
                if pending is not None:
                    rows_ = tuple(np.concatenate([a, b]) for a, b in zip(pending, rows_, strict=True))  # type: ignore[assignment]
                order = np.argsort(rows_[2], kind="stable")
                rows_ = tuple(a[order] for a in rows_)  # type: ignore[assignment]
                cut = int(np.searchsorted(rows_[2], t0 + (chunk.timestep + 1) * step_s, side="left"))
                for lo in range(0, cut, chunk_rows):
                    hi = min(cut, lo + chunk_rows)
                    write_rows(*(a[lo:hi] for a in rows_))
                pending = tuple(a[cut:] for a in rows_)  # type: ignore[assignment]
            for lo in range(0, n if sink is not None and not with_arrival else 0, chunk_rows):
                hi = min(n, lo + chunk_rows)
                times = t0 + chunk.timestep * step_s + jitter.integers(0, step_s, hi - lo)
                write_rows(chunk.ids[lo:hi], times, None, chunk.codes[lo:hi])
            rows += n
            if progress:
                progress(1)
        if sink is not None and pending is not None and pending[0].size:
            write_rows(*pending)
    finally:
        if sink is not None:
            sink.close()
        if counts_fh:
            counts_fh.close()
    config_path = out_dir / "config.yaml"
    if budgets is not None:
        config["privacy"]["personal"] = _write_consent(out_dir, persons, budgets, seed, budget_grid)
        _validate_config(config)
    if is_family:
        header = _family_comment(kind, timesteps, bins, seed, family)
    elif kind == "highdim":
        header = (f"# dpstream generate highdim: {timesteps} timesteps, population {population}, "
                  f"{highdim.attributes} attributes x {highdim.levels} levels = {bins:,} cells, "
                  f"drift {highdim.drift:g}"
                  + ("" if highdim.jump is None else f", dependence jump at timestep {highdim.jump_timestep(timesteps)}")
                  + f", seed {seed}.\n"
                  "# Synthetic correlated, drifting population (stream/lab/highdim.py); evaluate it with "
                  "'dpstream evaluate --mechanisms lpa,psd,copula,marginals'.\n")
    else:
        header = _config_comment(kind, timesteps, population, seed, rate, grid)
    write_config(config_path, config, header=header)
    return GenerateReport(
        kind, events_path if events else None, config_path, counts_path, timesteps, population, rows, bins, info
    )


def build_config(
    kind: str,
    attributes: list[dict[str, Any]],
    *,
    timesteps: int,
    population: int,
    step_seconds: int,
    start: datetime,
    epsilon: float = 1.0,
    threshold: float = 0.025,
    w: int | None = None,
    cutoff: int | None = None,
) -> dict[str, Any]:
    """The ``config.yaml`` contents for a generated dataset (a plain dict)."""
    privacy: dict[str, Any] = {"epsilon": epsilon, "population": population}
    if kind == "census":
        c = cutoff if cutoff is not None else default_cutoff(timesteps)
        privacy.update(unit="user-level", horizon=timesteps, cutoff=min(c, timesteps))
    else:
        per_day = max(1, 86400 // step_seconds)
        window = w if w is not None else min(timesteps, per_day)
        c = cutoff if cutoff is not None else default_cutoff(timesteps, window)
        privacy.update(unit="w-event", w=window, cutoff=min(c, window))
    step = timedelta(seconds=step_seconds)
    return {
        "stream": {
            "id": kind,
            "timestep": _duration(step),
            "allowed_lateness": "0s",
            "max_future": _duration(max(timedelta(days=1), 2 * step)),
            "start": start.isoformat(),
        },
        "schema": {
            "user_id": "person_id",
            "event_time": "event_time",
            "out_of_domain": "reject",
            "attributes": attributes,
        },
        "privacy": privacy,
        "release": {
            "decision": "dsat",
            "mechanism": "lpa",
            "threshold": threshold,
            "pid": {"theta_p": 1.0, "theta_i": 0.0, "theta_d": 0.0, "theta": 0.5, "delta": 0.05},
        },
    }


def _validate_config(config: dict[str, Any]) -> None:
    """Refuse (before writing anything) a config that ``load_settings`` would refuse."""
    from pydantic import ValidationError

    from stream.config import ConfigError, Settings, format_errors

    try:
        Settings(**config).validate_all()
    except ValidationError as exc:
        raise ValueError(
            format_errors(exc).replace("invalid configuration", "the generated configuration would be invalid", 1)
        ) from None
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    except ValueError as exc:
        raise ValueError(f"the generated configuration would be invalid: {exc}") from None


def _duration(td: timedelta) -> str:
    seconds = int(td.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _config_comment(kind: str, timesteps: int, population: int, seed: int, rate: float, grid: int) -> str:
    what = f"rate {rate}" if kind == "census" else f"grid {grid}x{grid}"
    return (
        f"# dpstream generate {kind}: {timesteps} timesteps, population {population}, {what}, seed {seed}.\n"
        "# Synthetic data; thesis Table 4.2 defaults (epsilon 1, C = ceil(0.01 N), delta 0.05, theta 0.5).\n"
    )


def _family_comment(kind: str, timesteps: int, bins: int, seed: int, params: Any) -> str:
    return (
        f"# dpstream generate {kind}: {timesteps} timesteps, {bins} bin(s), scale {params.scale:g}, seed {seed}.\n"
        "# Synthetic family stream shaped like the w-event benchmark's (Schaler et al. 2023); "
        "privacy.population is the declared scale x bins.\n"
    )


def write_config(path: Path, config: dict[str, Any], header: str = "") -> None:
    import yaml

    text = header + yaml.safe_dump(config, sort_keys=False, default_flow_style=False, width=120)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
