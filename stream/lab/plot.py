"""Plots of evaluation results (optional: needs matplotlib, ``pip install 'dpstream[plot]'``).

Two kinds:

* :func:`plot_methods` — one ``dpstream evaluate`` result: per method, bars of
  the range-query absolute error, the per-bin MAE and the number of fresh
  releases, each with its confidence interval;
* :func:`plot_sweep` — a figure of the thesis: one metric against a swept
  parameter (k, T, ε, r, …), one line per method, with confidence bands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["PlotUnavailableError", "plot_methods", "plot_sweep", "matplotlib_available"]

MISSING = "plotting needs matplotlib, which is not installed: pip install 'dpstream[plot]' (or pip install matplotlib)"

# one colour per method, stable across figures
COLOURS = {
    "dsat": "#d62728",
    "dsft": "#ff7f0e",
    "uniform": "#7f7f7f",
    "fixed": "#1f77b4",
    "bd": "#2ca02c",
    "ba": "#9467bd",
    "dsat-true": "#f4a6a6",
    "fixed-true": "#9ec9ea",
}


class PlotUnavailableError(RuntimeError):
    """matplotlib is not installed."""


def matplotlib_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise PlotUnavailableError(MISSING) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _err(value: float | None, ci: Sequence[float] | None) -> tuple[float, float]:
    if value is None or ci is None:
        return (0.0, 0.0)
    return (max(0.0, value - ci[0]), max(0.0, ci[1] - value))


def plot_methods(result: Mapping[str, Any], path: str | Path, *, title: str | None = None) -> Path:
    """Bar charts comparing the methods of one evaluation result; returns the file written."""
    plt = _pyplot()
    methods = result["methods"]
    names = list(methods)
    panels = [
        ("query_abs_error", "range-query absolute error"),
        ("mae", "mean absolute error per bin"),
        ("query_rel_error", "range-query relative error"),
        ("fresh_releases", "fresh releases"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8))
    for ax, (key, label) in zip(axes, panels, strict=True):
        vals = [methods[n].get(key) for n in names]
        shown = [v if v is not None else 0.0 for v in vals]
        errs = [_err(methods[n].get(key), methods[n].get(f"{key}_ci")) for n in names]
        bars = ax.bar(
            range(len(names)),
            shown,
            yerr=[[e[0] for e in errs], [e[1] for e in errs]],
            color=[COLOURS.get(n, "#17becf") for n in names],
            capsize=3,
        )
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
        ax.set_title(label, fontsize=10)
        refs = result.get("references", {})
        # the axis fits the methods' bars (and their intervals), not the references: a zero-release
        # line far above them would squash every bar to the floor; an off-scale reference is named
        # in the corner with its value instead
        top = max((v + e[1] for v, e in zip(shown, errs, strict=True)), default=0.0) * 1.45
        if top > 0:
            ax.set_ylim(0, top)  # headroom for the bar labels and the off-scale note
        off_scale = []
        for ref, style in (("zero-release", "-"), ("previous-true", ":")):
            value = refs.get(ref, {}).get(key) if key != "fresh_releases" else None
            name = ref + ("" if refs.get(ref, {}).get("private") else " (non-private)")
            if value is not None and value > 0 and top > 0 and value > top:
                off_scale.append(f"{name}: {value:.3g} (above the axis)")
            elif value is not None and value > 0:  # a line per reference: bars above "zero-release" lose to nothing
                ax.axhline(value, color="#444444", linestyle=style, linewidth=1, label=name)
        if off_scale:  # under the panel's title, so it never covers a bar or the legend
            ax.set_title(f"{label}\n{'; '.join(off_scale)}", fontsize=9)
        if key == "mae" and ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left")
        positive = [v for v in shown if v > 0]
        # a log axis as soon as the bars differ by more than 3x (with the zero-release line on a linear
        # axis the methods' bars are often too short to tell apart), and every bar labelled with its value
        if key != "fresh_releases" and positive and max(positive) / min(positive) > 3:
            ax.set_yscale("log")
            ax.set_ylim(min(positive) / 2, max(top, max(positive)) * 2)
        ax.bar_label(bars, labels=[f"{v:.3g}" if v else "" for v in shown], fontsize=7)
    sub = f"{result.get('timesteps')} timesteps, {result.get('bins')} bins, {result.get('runs')} runs"
    fig.suptitle(f"{title} ({sub})" if title else sub, fontsize=11)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_sweep(
    xs: Sequence[float],
    series: Mapping[str, Sequence[Mapping[str, Any]]],
    path: str | Path,
    *,
    metric: str = "query_abs_error",
    xlabel: str,
    ylabel: str | None = None,
    title: str,
    logx: bool = False,
    logy: bool = True,
    extra_metric: tuple[str, str] | None = None,
) -> Path:
    """Lines of ``metric`` against ``xs``; ``series[method][i]`` is that method's summary at ``xs[i]``.

    ``extra_metric = (key, label)`` adds a second panel (e.g. the relative error).
    """
    plt = _pyplot()
    panels = [(metric, ylabel or metric.replace("_", " "))]
    if extra_metric:
        panels.append(extra_metric)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 4.0), squeeze=False)
    for ax, (key, label) in zip(axes[0], panels, strict=True):
        for name, points in series.items():
            ys = [p.get(key) for p in points]
            if all(y is None for y in ys):
                continue
            ys_f = [float("nan") if y is None else y for y in ys]
            dashed = name.endswith("-true")
            ax.plot(
                xs, ys_f, marker="o", ms=4, label=name, color=COLOURS.get(name),
                linestyle="--" if dashed else "-",
            )
            cis = [p.get(f"{key}_ci") for p in points]
            if all(c is not None for c in cis):
                ax.fill_between(xs, [c[0] for c in cis], [c[1] for c in cis], alpha=0.15, color=COLOURS.get(name))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(label)
        if logx:
            ax.set_xscale("log")
        if logy:
            ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
