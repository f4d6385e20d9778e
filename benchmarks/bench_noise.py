"""Speed of the exact discrete Laplace sampler (docs/privacy.md §2.2), printed as JSON.

Targets (issue 11): at most 2 ms for 10⁴ bins and 150 ms for 10⁶ bins, with
the production randomness (AES-CTR keyed from the OS CSPRNG, a fresh drawer
per release as the service uses it). Each figure is the median of
``--repeats`` runs. The same run also times a reference on the same
generator: numpy's float exponential-difference sampler, the inexact one
dpstream used before, so the cost of exactness is a ratio measured on this
machine now. Run with ``OMP_NUM_THREADS=1`` on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from fractions import Fraction

import numpy as np

from histogram.noise import Randomness

SCALES = {"10": Fraction(10), "39225/1516": Fraction(39225, 1516), "1/3": Fraction(1, 3)}


def _median_ms(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1000, 3)


def _float_reference(drawer, scale: Fraction, n: int) -> np.ndarray:
    """floor(b·E1) − floor(b·E2) on the drawer's own generator (inexact; for the ratio only)."""
    e = drawer._gen.standard_exponential(2 * n)
    e *= float(scale)
    g = np.floor(e, out=e).astype(np.int64)
    return g[:n] - g[n:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    rnd = Randomness.secure()
    results = {}
    for bins in (10_000, 1_000_000):
        for name, scale in SCALES.items():
            exact = _median_ms(
                lambda s=scale, n=bins: rnd.drawer("bench", 0).discrete_laplace(s, n), args.repeats
            )
            ref = _median_ms(lambda s=scale, n=bins: _float_reference(rnd.drawer("bench", 0), s, n), args.repeats)
            results[f"{bins}_bins_scale_{name}"] = {
                "exact_ms": exact,
                "float_reference_ms": ref,
                "ratio": round(exact / ref, 2),
            }
    print(
        json.dumps(
            {
                "machine": {
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "load_average": os.getloadavg()[0],
                    "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                },
                "targets_ms": {"10000_bins": 2, "1000000_bins": 150},
                "repeats": args.repeats,
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
