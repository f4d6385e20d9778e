"""A structural state-space filter of released counts (``release.postprocess: model``).

Post-processing (Dwork & Roth Prop. 2.1): every value here is a function of earlier releases
(their counts, their published half-widths, whether they were fresh) and public constants; no
event, true count or noise value is read. ``docs/privacy.md`` §2.3.1 has the argument.

The model, per bin ``j`` and timestep ``t``::

    x[t, j] = m[t] · ℓ[t, j]          (what is estimated and published)
    ℓ[t, j] = ℓ[t−1, j] + N(0, Q)     (a level that wanders: trends, random walks)
    z[t, j] = x[t, j] + e[t, j],  Var e = R[t, j]   (a fresh release; republished ones add nothing)

* ``R`` is each fresh release's own noise variance, from its published interval
  (:func:`histogram.postprocess.noise_variance`), so a release at a small ε counts for less.
* ``m`` is a seasonal multiplier (mean 1 over a period). Its period is found from the
  releases: the released totals over the last :data:`HISTORY` timesteps are divided by their
  moving average over a candidate period, the ratios averaged per phase, and the variance of
  those phase means beyond what the releases' noise explains is the period's signal; the
  smallest period with at least :data:`PERIOD_TOLERANCE` of the best signal wins, if that signal
  is significant (more than :data:`SIGNIFICANCE` times the noise's share), else there is no
  season (``m = 1``). Each phase mean is shrunk towards 1 by its signal-to-noise ratio.
  ``shared`` (step ``model``): one shape for all bins, estimated from the released totals
  (a rank-one model of the released matrix: every bin follows the same daily cycle, so a quiet
  bin borrows the busy bins' shape); step ``model-perbin``: each bin's own shape.
* ``Q`` is unknown, and so is whether the season found is real: a bank of filters with
  ``Q = c · R₀`` for each ``c`` in :data:`RATIOS`, each with the multiplier and without it
  (``R₀``: the first fresh release's mean noise variance) runs side by side, and the published
  level is their average weighted by each one's likelihood of the releases, discounted by
  :data:`FORGET` per fresh release (so a regime change shifts the weight within a few releases).
* Level shifts: when a fresh release lies more than :data:`CHANGE_Z` predictive sds from the
  weighted prediction, and the next :data:`CHANGE_RUN` − 1 fresh releases lie that far on the same
  side of the level predicted *before* the first of them (:func:`_change_run`: the bank's fast
  filters have followed the first release by then, so the current prediction would not flag
  them), the bin's level restarts from the last release (variance ``R``) and the bank's weights
  reset. So a jump of more than about ``CHANGE_Z`` noise sds is followed within ``CHANGE_RUN``
  fresh releases (``tests/histogram/test_statespace.py`` measures it).
* ``delay`` (``release.delay: k``): a fixed-lag smoother: the value published for ``t`` is the
  Rauch–Tung–Striebel smoothed level using the releases up to ``t + k``. A level shift cuts the
  smoother: the timesteps before it in the lag buffer get no information from the shift on, so
  their smoothed values are fixed at the shift, weighted by the bank's weights *before* it (the
  reset weights carry none), and published as fixed (``lag_fixed``).
* ``trend`` (step ``model-trend``): the bank also holds local-linear-trend filters (level and
  slope, no season), ``ℓ[t] = ℓ[t−1] + v[t−1] + N(0, Q)``, ``v[t] = v[t−1] + N(0, Q_v)``, one per
  pair of :data:`RATIOS` and :data:`SLOPE_RATIOS`, weighted by the same discounted likelihood
  as the others: between sparse fresh releases (Sample, fixed sampling) a trend is followed
  instead of the last level being repeated; on streams without one the likelihood keeps their
  weight low. A level shift restarts their level at the release and their slope at 0.

All state is float64 arrays (:class:`ModelState`), journaled exactly with the engine state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

__all__ = ["ModelFilter", "ModelState", "RATIOS", "SLOPE_RATIOS", "HISTORY", "PERIOD_MAX"]

#: Candidate process-to-noise variance ratios ``Q / R₀`` of the filter bank.
RATIOS: tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)
#: Discount of each filter's log-likelihood per fresh release.
FORGET = 0.95
#: Standardized innovation beyond which a release counts towards a level shift.
CHANGE_Z = 3.5
#: Fresh releases in a row beyond :data:`CHANGE_Z` (same sign) that restart a bin's level.
CHANGE_RUN = 2
#: Longest seasonal period looked for, in timesteps.
PERIOD_MAX = 48
#: Released timesteps kept for the seasonal shape (six of the longest periods).
HISTORY = 6 * PERIOD_MAX
#: A period is chosen when its signal is this share of the best one (prefers the fundamental).
PERIOD_TOLERANCE = 0.8
#: The best period's signal variance must exceed this multiple of its phase means' noise variance.
SIGNIFICANCE = 1.0
#: The period is re-chosen every this many timesteps (it is kept in the state in between).
PERIOD_EVERY = 8
#: Slope process variances ``Q_v / R₀`` of the trend filters (step ``model-trend``).
SLOPE_RATIOS: tuple[float, ...] = (1e-7,)
#: The trend filters' prior slope variance at the first release (and after a level shift), ``· R``.
SLOPE_PRIOR = 1e-2

_FIELDS = ("t", "r0", "period", "x", "p", "loglik", "run", "ref", "ref_v", "hist", "hist_r", "lag_x", "lag_p",
           "lag_m", "lag_fixed")
#: The trend filters' arrays (step ``model-trend`` only): level, slope, their covariance
#: (``pp``, ``pv``, ``vv``), log-likelihood, and the fixed-lag buffers of each.
_TREND_FIELDS = ("tx", "tv", "tpp", "tpv", "tvv", "tloglik", "tlag_x", "tlag_v", "tlag_pp", "tlag_pv", "tlag_vv")


@dataclass(frozen=True, eq=False)
class ModelState:
    """The filter's arrays (functions of releases and public constants only).

    Shapes with ``N`` rows (runs; 1 in the service), ``B`` bins, ``M = 2·len(RATIOS)`` filters
    (each ratio with the seasonal multiplier, then each without it),
    ``S`` shape series (1 shared, else ``B``), ``H = HISTORY`` and ``K = delay``:
    ``t`` (N,) timesteps since the first fresh release; ``r0`` (N,) its mean noise variance;
    ``period`` (N,) the chosen period (0: none); ``x``, ``p``, ``loglik`` (N, B, M) each
    filter's level, its variance and its discounted log-likelihood; ``run`` (N, B) the signed
    count of large innovations in a row, ``ref``, ``ref_v`` (N, B) the deseasonalised level
    predicted before the run's first one and its variance; ``hist``, ``hist_r`` (N, S, H) the
    released series and its noise variance (NaN where not fresh); ``lag_x``, ``lag_p``, ``lag_m`` (N, B, M, K+1)
    the last ``K + 1`` filtered levels, variances and multipliers (fixed-lag smoothing),
    ``lag_fixed`` (N, B, K+1) the published values of buffer positions a level shift cut off from
    later releases (NaN elsewhere). With
    ``trend``, ``T = len(RATIOS) · len(SLOPE_RATIOS)`` trend filters more: ``tx``, ``tv``, ``tpp``,
    ``tpv``, ``tvv``, ``tloglik`` (N, B, T) and their buffers ``tlag_*`` (N, B, T, K+1).
    """

    arrays: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __getitem__(self, key: str) -> np.ndarray:
        return self.arrays[key]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ModelState):
            return NotImplemented
        a, b = self.arrays, other.arrays
        return a.keys() == b.keys() and all(a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes()
                                            for k in a)

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class ModelFilter:
    """The filter with its public settings.

    Attributes:
        shared: one seasonal shape for all bins (from the released totals) or one per bin.
        delay: ``k`` of the fixed-lag smoother (0: publish the filtered value at once).
        trend: also the local-linear-trend filters (step ``model-trend``).
    """

    shared: bool = True
    delay: int = 0
    trend: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.delay, int) and 0 <= self.delay <= 64):
            raise ValueError(f"release.delay must be a whole number of timesteps in 0..64, got {self.delay!r}")

    def start(self, z: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, ModelState]:
        """The state after the first fresh release ``z`` (N, B) with noise variance ``r``."""
        n, b = z.shape
        m, s, k = 2 * len(RATIOS), (1 if self.shared else b), self.delay
        hist = np.full((n, s, HISTORY), np.nan)
        hist_r = np.full((n, s, HISTORY), np.nan)
        hist[:, :, -1] = z.sum(axis=1, keepdims=True) if self.shared else z
        hist_r[:, :, -1] = r.sum(axis=1, keepdims=True) if self.shared else r
        x = np.repeat(z[:, :, None], m, axis=2)
        p = np.repeat(r[:, :, None], m, axis=2)
        arrays = {
            "t": np.zeros(n), "r0": r.mean(axis=1), "period": np.zeros(n),
            "x": x, "p": p, "loglik": np.zeros((n, b, m)), "run": np.zeros((n, b)),
            "ref": np.zeros((n, b)), "ref_v": np.zeros((n, b)),
            "hist": hist, "hist_r": hist_r,
            "lag_x": np.repeat(x[..., None], k + 1, axis=3), "lag_p": np.repeat(p[..., None], k + 1, axis=3),
            "lag_m": np.ones((n, b, m, k + 1)), "lag_fixed": np.full((n, b, k + 1), np.nan),
        }
        if self.trend:
            nt = len(RATIOS) * len(SLOPE_RATIOS)
            tx, tpp = np.repeat(z[:, :, None], nt, axis=2), np.repeat(r[:, :, None], nt, axis=2)
            zero = np.zeros((n, b, nt))
            tvv = SLOPE_PRIOR * tpp
            arrays.update({"tx": tx, "tv": zero, "tpp": tpp, "tpv": zero, "tvv": tvv, "tloglik": zero})
            for name, v in (("tlag_x", tx), ("tlag_v", zero), ("tlag_pp", tpp), ("tlag_pv", zero), ("tlag_vv", tvv)):
                arrays[name] = np.repeat(v[..., None], k + 1, axis=3)
        return z.copy(), ModelState(arrays)

    def step(self, state: ModelState, z: np.ndarray, r: np.ndarray, fresh: bool) -> tuple[np.ndarray, ModelState]:
        """One timestep: ``z``/``r`` (N, B) the release and its noise variance (ignored unless
        ``fresh``). Returns the published estimate (of ``t − delay`` with a delay) and the new state."""
        if self.trend:
            return self._step_trend(state, z, r, fresh)
        a, mm = self._advance(state, z.shape)
        q = _bank_q(a["r0"])  # (N, 1, 2M)
        x, p = a["x"], a["p"] + q  # predict
        if fresh:
            w = _weights(a["loglik"])
            s = mm * mm * p + r[:, :, None]
            nu = z[:, :, None] - mm * x
            mean_pred = (w * mm * x).sum(axis=2)
            var_pred = (w * (s + (mm * x - mean_pred[:, :, None]) ** 2)).sum(axis=2)
            run = _change_run(a, z, r, mean_pred, var_pred, (w * mm).sum(axis=2))
            a["loglik"] = FORGET * a["loglik"] - 0.5 * (np.log(s) + nu * nu / s)
            gain = p * mm / s
            x = x + gain * nu
            p = (1.0 - gain * mm) * p
            shift = np.abs(run) >= CHANGE_RUN
            if shift.any():
                if self.delay:  # before the weights reset: what the buffer before the shift will publish
                    self._fix_before_shift(a, shift, _smoothed(a["lag_x"], a["lag_p"], a["lag_m"], q, w))
                safe = np.where(np.abs(mm) > 1e-9, mm, 1.0)
                x = np.where(shift[:, :, None], z[:, :, None] / safe, x)
                p = np.where(shift[:, :, None], r[:, :, None] / safe ** 2, p)
                a["loglik"] = np.where(shift[:, :, None], 0.0, a["loglik"])
                # the smoother must not carry the new level back across the shift
                a["lag_p"][..., -1] = np.where(shift[:, :, None], 0.0, a["lag_p"][..., -1])
                run = np.where(shift, 0.0, run)
            a["run"] = run
        self._remember(a, z, r, fresh)
        a["x"], a["p"] = x, p
        w = _weights(a["loglik"])
        k = self.delay
        if k == 0:
            return (w * mm * x).sum(axis=2), ModelState(a)
        # fixed lag: RTS backwards from t over the last k filtered levels of each filter
        a["lag_x"] = np.concatenate([a["lag_x"][..., 1:], x[..., None]], axis=3)
        a["lag_p"] = np.concatenate([a["lag_p"][..., 1:], p[..., None]], axis=3)
        a["lag_m"] = np.concatenate([a["lag_m"][..., 1:], mm[..., None]], axis=3)
        self._rotate_fixed(a)
        return _published(_smoothed(a["lag_x"], a["lag_p"], a["lag_m"], q, w), a["lag_fixed"])[..., 0], ModelState(a)

    @staticmethod
    def _fix_before_shift(a: dict[str, np.ndarray], shift: np.ndarray, before: np.ndarray) -> None:
        """At a level shift (``shift`` (N, B)), fix the buffer's values before it: ``before`` (N, B, K+1)
        is the buffer smoothed with the weights before the reset (positions ``t−K−1 … t−1``); after
        the rotation of this step they sit at ``0 … K−1``. Positions fixed by an earlier shift keep
        their values (nothing after that shift reached them either)."""
        fixed = a["lag_fixed"]
        a["lag_fixed"] = np.where(np.isnan(fixed) & shift[..., None], before, fixed)  # a new array

    @staticmethod
    def _rotate_fixed(a: dict[str, np.ndarray]) -> None:
        """Advance ``lag_fixed`` with the lag buffers: the oldest position leaves, the newest is open."""
        fixed = a["lag_fixed"]
        a["lag_fixed"] = np.concatenate([fixed[..., 1:], np.full(fixed.shape[:-1] + (1,), np.nan)], axis=-1)

    def _advance(self, state: ModelState, shape: tuple[int, int]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The next timestep's arrays (a new dict; the arrays a level shift writes into in place are
        copies, so ``state`` itself never changes), with ``t`` advanced and the period re-chosen
        every :data:`PERIOD_EVERY` timesteps, and the level-only bank's multipliers ``mm`` (N, B, 2M):
        each ratio with the seasonal multiplier, then without it (m = 1): the releases' likelihood
        decides whether the season found is worth following."""
        a = dict(state.arrays)
        for f in ("lag_p", "tlag_pp", "tlag_pv", "tlag_vv"):
            if f in a:
                a[f] = a[f].copy()
        n, b = shape
        t = a["t"] + 1.0
        a["t"] = t
        if int(t[0]) % PERIOD_EVERY == 0:
            a["period"] = _choose_period(a["hist"].sum(axis=1), a["hist_r"].sum(axis=1), t - 1)
        m = _multiplier(a["hist"], a["hist_r"], t, a["period"])  # (N, S)
        m = np.broadcast_to(m, (n, b)) if m.shape[1] == b else np.repeat(m, b, axis=1)
        mm = np.concatenate([np.repeat(m[:, :, None], len(RATIOS), axis=2), np.ones((n, b, len(RATIOS)))], axis=2)
        return a, mm

    def _remember(self, a: dict[str, np.ndarray], z: np.ndarray, r: np.ndarray, fresh: bool) -> None:
        """Append this timestep to the released history the season is estimated from (the totals
        with ``shared``; NaN where the timestep is not fresh: a republished value is no release)."""
        if fresh:
            new = z.sum(axis=1, keepdims=True) if self.shared else z
            new_r = r.sum(axis=1, keepdims=True) if self.shared else r
        else:
            new = new_r = np.full(a["hist"].shape[:2], np.nan)
        a["hist"] = np.concatenate([a["hist"][:, :, 1:], new[:, :, None]], axis=2)
        a["hist_r"] = np.concatenate([a["hist_r"][:, :, 1:], new_r[:, :, None]], axis=2)

    def pending(self, state: ModelState) -> np.ndarray:
        """With a delay ``k``: the estimates (N, B, k) of the last ``k`` timesteps stepped, not yet
        published, each smoothed with the releases there are (the end of a finite stream)."""
        if self.trend:
            return _published(self._trend_smoothed(state.arrays), state["lag_fixed"])[..., 1:]
        out = _smoothed(state["lag_x"], state["lag_p"], state["lag_m"], _bank_q(state["r0"]), _weights(state["loglik"]))
        return _published(out, state["lag_fixed"])[..., 1:]

    # -- the trend filters (step model-trend) -------------------------------------------------
    def _step_trend(self, state: ModelState, z: np.ndarray, r: np.ndarray, fresh: bool
                    ) -> tuple[np.ndarray, ModelState]:
        """:meth:`step` with the trend filters in the bank (the level-only filters as in :meth:`step`)."""
        a, mm = self._advance(state, z.shape)
        q = _bank_q(a["r0"])
        ql, qv = _trend_q(a["r0"])  # (N, 1, T) each
        x, p = a["x"], a["p"] + q  # the level-only filters: predict
        tx = a["tx"] + a["tv"]  # the trend filters: predict
        tpp = a["tpp"] + 2.0 * a["tpv"] + a["tvv"] + ql
        tpv = a["tpv"] + a["tvv"]
        tvv = a["tvv"] + qv
        tv = a["tv"]
        split = a["loglik"].shape[2]
        if fresh:
            w = _weights(np.concatenate([a["loglik"], a["tloglik"]], axis=2))
            wl, wt = w[..., :split], w[..., split:]
            s = mm * mm * p + r[:, :, None]
            nu = z[:, :, None] - mm * x
            ts = tpp + r[:, :, None]
            tnu = z[:, :, None] - tx
            mean_pred = (wl * mm * x).sum(axis=2) + (wt * tx).sum(axis=2)
            var_pred = ((wl * (s + (mm * x - mean_pred[:, :, None]) ** 2)).sum(axis=2)
                        + (wt * (ts + (tx - mean_pred[:, :, None]) ** 2)).sum(axis=2))
            run = _change_run(a, z, r, mean_pred, var_pred, (wl * mm).sum(axis=2) + wt.sum(axis=2))
            a["loglik"] = FORGET * a["loglik"] - 0.5 * (np.log(s) + nu * nu / s)
            a["tloglik"] = FORGET * a["tloglik"] - 0.5 * (np.log(ts) + tnu * tnu / ts)
            gain = p * mm / s
            x = x + gain * nu
            p = (1.0 - gain * mm) * p
            kx, kv = tpp / ts, tpv / ts
            tx, tv = tx + kx * tnu, tv + kv * tnu
            tpp, tpv, tvv = tpp - kx * tpp, tpv - kx * tpv, tvv - kv * tpv
            shift = np.abs(run) >= CHANGE_RUN
            if shift.any():
                if self.delay:  # before the weights reset: what the buffer before the shift will publish
                    self._fix_before_shift(a, shift, self._trend_smoothed(a, w))
                safe = np.where(np.abs(mm) > 1e-9, mm, 1.0)
                sh = shift[:, :, None]
                x = np.where(sh, z[:, :, None] / safe, x)
                p = np.where(sh, r[:, :, None] / safe ** 2, p)
                a["loglik"] = np.where(sh, 0.0, a["loglik"])
                a["lag_p"][..., -1] = np.where(sh, 0.0, a["lag_p"][..., -1])
                rr = np.broadcast_to(r[:, :, None], tx.shape)
                tx, tv = np.where(sh, z[:, :, None], tx), np.where(sh, 0.0, tv)
                tpp, tpv, tvv = np.where(sh, rr, tpp), np.where(sh, 0.0, tpv), np.where(sh, SLOPE_PRIOR * rr, tvv)
                a["tloglik"] = np.where(sh, 0.0, a["tloglik"])
                for f in ("tlag_pp", "tlag_pv", "tlag_vv"):  # no smoothing back across the shift
                    a[f][..., -1] = np.where(sh, 0.0, a[f][..., -1])
                run = np.where(shift, 0.0, run)
            a["run"] = run
        self._remember(a, z, r, fresh)
        a["x"], a["p"] = x, p
        a["tx"], a["tv"], a["tpp"], a["tpv"], a["tvv"] = tx, tv, tpp, tpv, tvv
        w = _weights(np.concatenate([a["loglik"], a["tloglik"]], axis=2))
        k = self.delay
        if k == 0:
            return (w[..., :split] * mm * x).sum(axis=2) + (w[..., split:] * tx).sum(axis=2), ModelState(a)
        a["lag_x"] = np.concatenate([a["lag_x"][..., 1:], x[..., None]], axis=3)
        a["lag_p"] = np.concatenate([a["lag_p"][..., 1:], p[..., None]], axis=3)
        a["lag_m"] = np.concatenate([a["lag_m"][..., 1:], mm[..., None]], axis=3)
        for f, v in (("tlag_x", tx), ("tlag_v", tv), ("tlag_pp", tpp), ("tlag_pv", tpv), ("tlag_vv", tvv)):
            a[f] = np.concatenate([a[f][..., 1:], v[..., None]], axis=3)
        self._rotate_fixed(a)
        return _published(self._trend_smoothed(a), a["lag_fixed"])[..., 0], ModelState(a)

    def _trend_smoothed(self, a: Mapping[str, np.ndarray], w: np.ndarray | None = None) -> np.ndarray:
        """The fixed-lag estimates (N, B, k+1) of the whole bank: the level-only filters through
        :func:`_smoothed`'s rule, the trend filters through the two-state Rauch–Tung–Striebel rule;
        weighted by ``w`` (N, B, M+T; default the bank's current weights)."""
        if w is None:
            w = _weights(np.concatenate([a["loglik"], a["tloglik"]], axis=2))
        split = a["loglik"].shape[2]
        # the level-only filters, each weighted by its share of the whole bank
        level = _smoothed(a["lag_x"], a["lag_p"], a["lag_m"], _bank_q(a["r0"]), w[..., :split])
        ql, qv = _trend_q(a["r0"])
        k1 = a["tlag_x"].shape[-1]
        out = np.empty_like(level)
        wt = w[..., split:]
        xs, vs = a["tlag_x"][..., k1 - 1], a["tlag_v"][..., k1 - 1]
        out[..., k1 - 1] = (wt * xs).sum(axis=2)
        for i in range(k1 - 2, -1, -1):
            x, v = a["tlag_x"][..., i], a["tlag_v"][..., i]
            pp, pv, vv = a["tlag_pp"][..., i], a["tlag_pv"][..., i], a["tlag_vv"][..., i]
            # prediction of i + 1 from i: F = [[1, 1], [0, 1]]
            a11, a12, a22 = pp + 2.0 * pv + vv + ql, pv + vv, vv + qv
            det = np.maximum(a11 * a22 - a12 * a12, 1e-300)
            c11, c12, c21, c22 = pp + pv, pv, pv + vv, vv  # P_i Fᵀ
            j11, j12 = (c11 * a22 - c12 * a12) / det, (c12 * a11 - c11 * a12) / det
            j21, j22 = (c21 * a22 - c22 * a12) / det, (c22 * a11 - c21 * a12) / det
            dx, dv = xs - (x + v), vs - v
            xs, vs = x + j11 * dx + j12 * dv, v + j21 * dx + j22 * dv
            out[..., i] = (wt * xs).sum(axis=2)
        return level + out


def _change_run(a: dict[str, np.ndarray], z: np.ndarray, r: np.ndarray, mean_pred: np.ndarray,
                var_pred: np.ndarray, season: np.ndarray) -> np.ndarray:
    """The signed count of fresh releases in a row that lie beyond :data:`CHANGE_Z` predictive sds
    of the level *before* the first of them (N, B); updates ``a["ref"]``/``a["ref_v"]`` in place.

    The first such release starts a run and stores the bank's prediction then (deseasonalised by
    the bank's weighted multiplier ``season``, so the next release is compared with it at its own
    phase) and the prediction's variance less that release's noise. Each later release continues the
    run when it is beyond :data:`CHANGE_Z` sds of that stored level (same side), whatever the bank
    has learnt from the run's first release: the bank's fast filters follow a jump at once, so a
    test against the current prediction would not see the second release as a change."""
    run = a["run"]
    safe = np.where(np.abs(season) > 1e-9, season, 1.0)
    ref_score = (z - a["ref"] * safe) / np.sqrt(np.maximum(a["ref_v"] * safe * safe + r, 1e-12))
    score = (z - mean_pred) / np.sqrt(np.maximum(var_pred, 1e-12))
    cont = (run != 0) & (np.abs(ref_score) > CHANGE_Z) & (np.sign(ref_score) == np.sign(run))
    new = np.where(np.abs(score) > CHANGE_Z, np.sign(score), 0.0)
    start = ~cont & (new != 0)
    a["ref"] = np.where(start, mean_pred / safe, a["ref"])
    a["ref_v"] = np.where(start, np.maximum(var_pred - r, 0.0) / (safe * safe), a["ref_v"])
    return np.where(cont, run + np.sign(run), new)


def _smoothed(lag_x: np.ndarray, lag_p: np.ndarray, lag_m: np.ndarray, q: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Rauch–Tung–Striebel over the lag buffer (random-walk levels: the prediction of ``i + 1`` is
    level ``i`` with variance ``P_i + Q``): the smoothed estimates (N, B, k+1), weighted over the bank."""
    k1 = lag_x.shape[-1]
    out = np.empty(lag_x.shape[:2] + (k1,))
    xs = lag_x[..., k1 - 1]
    out[..., k1 - 1] = (w * lag_m[..., k1 - 1] * xs).sum(axis=2)
    for i in range(k1 - 2, -1, -1):
        pf = lag_p[..., i]
        xs = lag_x[..., i] + pf / (pf + q) * (xs - lag_x[..., i])
        out[..., i] = (w * lag_m[..., i] * xs).sum(axis=2)
    return out


def _published(smoothed: np.ndarray, fixed: np.ndarray) -> np.ndarray:
    """The fixed-lag values to publish (N, B, K+1): a position a level shift fixed (``fixed`` not
    NaN) keeps that value, the others are the smoother's."""
    return np.where(np.isnan(fixed), smoothed, fixed)


def _bank_q(r0: np.ndarray) -> np.ndarray:
    """The bank's process variances (N, 1, 2M): each ratio of :data:`RATIOS` times ``R₀``, twice
    (seasonal filters first, then the flat ones)."""
    return np.tile(np.asarray(RATIOS), 2)[None, None, :] * r0[:, None, None]


def _trend_q(r0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The trend filters' level and slope process variances (N, 1, T): every pair of a level
    ratio (:data:`RATIOS`) and a slope ratio (:data:`SLOPE_RATIOS`), times ``R₀``."""
    level, slope = np.meshgrid(np.asarray(RATIOS), np.asarray(SLOPE_RATIOS), indexing="ij")
    return level.ravel()[None, None, :] * r0[:, None, None], slope.ravel()[None, None, :] * r0[:, None, None]


def _weights(loglik: np.ndarray) -> np.ndarray:
    top = loglik.max(axis=-1, keepdims=True)
    e = np.exp(loglik - top)
    return e / e.sum(axis=-1, keepdims=True)


def _cumulative(y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where ``y`` is finite, and its NaN-aware running sums and counts along the last axis (with a
    leading 0): what :func:`_moving_average` needs for every period (computed once per series)."""
    ok = np.isfinite(y)
    v = np.where(ok, y, 0.0)
    cs = np.concatenate([np.zeros(y.shape[:-1] + (1,)), np.cumsum(v, axis=-1)], axis=-1)
    cn = np.concatenate([np.zeros(y.shape[:-1] + (1,)), np.cumsum(ok, axis=-1)], axis=-1)
    return ok, cs, cn


def _moving_average(y: np.ndarray, period: int, cumulative: tuple[np.ndarray, ...] | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """NaN-aware trailing mean over ``period`` slots (last axis) and how many values it had
    (``cumulative``: :func:`_cumulative` of ``y``, when already computed)."""
    _, cs, cn = _cumulative(y) if cumulative is None else cumulative
    total = cs[..., period:] - cs[..., :-period]
    count = cn[..., period:] - cn[..., :-period]
    return total / np.maximum(count, 1), count


def _phase_stats(y: np.ndarray, ry: np.ndarray, t: np.ndarray, period: int,  # type: ignore[no-untyped-def]
                 cumulative: tuple[np.ndarray, ...] | None = None):
    """Per phase: the mean ratio of the released series to its centred moving average over one
    period, the noise variance of that mean, and the number of ratios (``y``: (N, S, H);
    ``cumulative``: :func:`_cumulative` of ``y``, shared by the candidate periods)."""
    h = y.shape[-1]
    if cumulative is None:
        cumulative = _cumulative(y)
    avg, count = _moving_average(y, period, cumulative)  # slot i covers slots i..i+period-1
    half = period // 2
    centre = np.full(y.shape, np.nan)
    centre[..., half: half + avg.shape[-1]] = np.where(count >= max(2, period // 2), avg, np.nan)
    good = cumulative[0] & np.isfinite(centre) & (centre > 0)
    ratio = np.where(good, y / np.where(good, centre, 1.0), 0.0)
    noise = np.where(good, ry / np.where(good, centre, 1.0) ** 2, 0.0)
    # absolute phase of each slot: slot h-1 is the latest timestep t
    offset = (t - (h - 1)).astype(np.int64) % period  # (N,): the phase of slot 0
    n, total, total_noise = _phase_sums(np.stack([good.astype(np.float64), ratio, noise]), offset, period)
    mean = total / np.maximum(n, 1)
    var = total_noise / np.maximum(n, 1) ** 2
    return mean, var, n


def _phase_sums(v: np.ndarray, offset: np.ndarray, period: int) -> np.ndarray:
    """Per phase, the sum of ``v`` (..., N, S, H) over the slots of that phase: slot ``h`` of row
    ``n`` has phase ``(offset[n] + h) % period``. Returns (..., N, S, P).

    Each sum adds its terms one at a time in slot order, starting from 0.0, so it is the same
    float as a one-hot contraction over the slots (``einsum("nsh,nhp->nsp", v, onehot)``: the
    lab's filter before, ``tests/histogram/test_statespace.py`` holds them equal bit for bit):
    each row is laid out from position ``offset[n]`` of a zero-filled line a whole number of
    periods long, so position ``j`` has phase ``j % period``, and the periods are added one after
    another (the added zeros leave every partial sum unchanged). O(H) per row, not O(H · P)."""
    h = v.shape[-1]
    rows = v.shape[-3]
    laps = -(-(h + period - 1) // period)
    line = np.zeros(v.shape[:-1] + (laps * period,))
    first = int(offset[0])
    if np.all(offset == first):  # the runs of one schedule: one timestep, one offset
        line[..., first:first + h] = v
    else:
        at = offset.reshape(rows, 1) + np.arange(h)  # (N, H)
        np.put_along_axis(line, np.broadcast_to(at[:, None, :], v.shape), v, axis=-1)
    return np.add.reduce(line.reshape(v.shape[:-1] + (laps, period)), axis=-2, initial=0.0)


def _seasonal_signal(y: np.ndarray, ry: np.ndarray, t: np.ndarray, period: int,
                     cumulative: tuple[np.ndarray, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Signal variance of the phase means beyond their noise, and their mean noise variance (N, S)."""
    mean, var, n = _phase_stats(y, ry, t, period, cumulative)
    seen = n >= 2
    full = seen.all(axis=-1)
    cnt = np.maximum(seen.sum(axis=-1), 1)
    mu = np.where(seen, mean, 0.0).sum(axis=-1) / cnt
    spread = np.where(seen, (mean - mu[..., None]) ** 2, 0.0).sum(axis=-1) / cnt
    noise = np.where(seen, var, 0.0).sum(axis=-1) / cnt
    signal = np.where(full, spread - noise, -np.inf)
    return signal, noise


def _choose_period(total: np.ndarray, total_r: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The period (N,) of the released totals (N, H), 0 for none."""
    y, ry = total[:, None, :], total_r[:, None, :]
    cands = list(range(2, PERIOD_MAX + 1))
    sig = np.full((y.shape[0], len(cands)), -np.inf)
    noi = np.zeros_like(sig)
    cumulative = _cumulative(y)
    for i, per in enumerate(cands):
        s, nz = _seasonal_signal(y, ry, t, per, cumulative)
        sig[:, i], noi[:, i] = s[:, 0], nz[:, 0]
    best = sig.max(axis=1)
    ok = np.isfinite(best) & (best > 0)
    pick = np.argmax(sig >= PERIOD_TOLERANCE * best[:, None], axis=1)
    chosen = np.asarray(cands, dtype=np.float64)[pick]
    significant = ok & (sig[np.arange(len(pick)), pick] > SIGNIFICANCE * noi[np.arange(len(pick)), pick])
    return np.where(significant, chosen, 0.0)


def _multiplier(hist: np.ndarray, hist_r: np.ndarray, t: np.ndarray, period: np.ndarray) -> np.ndarray:
    """The seasonal multiplier (N, S) of timestep ``t`` (1 where there is no period)."""
    out = np.ones(hist.shape[:2])
    for per in np.unique(period[period > 0]).astype(int).tolist():
        rows = period == per
        y, ry = hist[rows], hist_r[rows]
        # the history ends at t-1 here: phases are those of timesteps t-H..t-1
        mean, var, n = _phase_stats(y, ry, t[rows] - 1, per)
        seen = n >= 2
        cnt = np.maximum(seen.sum(axis=-1, keepdims=True), 1)
        mu = np.where(seen, mean, 0.0).sum(axis=-1, keepdims=True) / cnt
        mean = np.where(seen, mean / np.where(mu > 0, mu, 1.0), 1.0)
        var = var / np.where(mu > 0, mu, 1.0) ** 2
        spread = np.where(seen, (mean - 1.0) ** 2, 0.0).sum(axis=-1, keepdims=True) / cnt
        noise = np.where(seen, var, 0.0).sum(axis=-1, keepdims=True) / cnt
        signal = np.maximum(spread - noise, 0.0)
        shrink = np.where(seen, signal / np.maximum(signal + var, 1e-300), 0.0)
        phase = (t[rows].astype(np.int64) % per)
        m_all = 1.0 + shrink * (mean - 1.0)  # (n, S, P)
        out[rows] = np.take_along_axis(m_all, phase[:, None, None].repeat(m_all.shape[1], axis=1), axis=2)[..., 0]
    return np.maximum(out, 0.0)


def state_arrays(state: ModelState) -> dict[str, np.ndarray]:
    """The arrays of ``state`` by name (for journaling)."""
    fields = _FIELDS + _TREND_FIELDS if "tx" in state.arrays else _FIELDS
    return {k: state.arrays[k] for k in fields}


def state_from_arrays(arrays: Mapping[str, np.ndarray]) -> ModelState:
    """Rebuild a state from :func:`state_arrays`.

    Raises:
        ValueError: a missing or extra array, or rows that do not agree.
    """
    fields = _FIELDS + _TREND_FIELDS if "tx" in arrays else _FIELDS
    other_version = ("it was written by another version of the filter: continue the stream with the version "
                     "that wrote it, or start it afresh under a new stream.id")
    if "lag_fixed" not in arrays and "lag_x" in arrays:
        # a journal from before level shifts fixed the smoother's earlier positions: none is fixed
        lag = np.shape(arrays["lag_x"])
        arrays = {**arrays, "lag_fixed": np.full(lag[:2] + lag[3:], np.nan)}
    if set(arrays) != set(fields):
        raise ValueError(f"model filter state needs the arrays {', '.join(fields)}; {other_version}")
    bank = {"x": 2 * len(RATIOS), "tx": len(RATIOS) * len(SLOPE_RATIOS)}
    for k, size in ((k, v) for k, v in bank.items() if k in arrays):
        held = np.shape(arrays[k])[2] if np.ndim(arrays[k]) == 3 else None
        if held != size:
            raise ValueError(f"model filter state holds {held} filters in {k!r}, this dpstream's bank has {size}; "
                             f"{other_version}")
    rows = {np.shape(arrays[k])[0] for k in fields}
    if len(rows) != 1 or not all(math.isfinite(float(np.nansum(arrays[k]))) or k in ("loglik", "tloglik")
                                 for k in fields):
        raise ValueError("model filter state's arrays do not agree")
    return ModelState({k: np.asarray(arrays[k], dtype=np.float64) for k in fields})
