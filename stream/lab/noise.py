"""Where the lab's runs draw their noise: exact discrete Laplace for R runs at once.

Both sources implement :class:`histogram.noise.RunsNoise`, the interface every policy's runs-axis
rule draws through (the service's one run draws through :class:`histogram.noise.DrawerNoise` over
its timestep's drawer). Choosing one is choosing a noise source, not a code path:

* :class:`PooledNoise` (the lab default): values of the exact sampler drawn in blocks, one seeded
  drawer per noise scale; the runs have the engine's distribution, not its values.
* :class:`EngineNoise` (``dpstream evaluate --replayable``): each run draws from the very drawers the
  engine uses, so run ``r`` publishes what ``dpstream replay --seed seed+r`` publishes.

Evaluation only: the service never draws from these.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from histogram.noise import _EXACT_LIMIT, GeneratorDrawer, Randomness

__all__ = ["PooledNoise", "EngineNoise"]


class _Block:
    """Values of one kind handed out in order from a seeded drawer, refilled in growing blocks."""

    __slots__ = ("fill", "buf", "pos", "chunk")

    def __init__(self, fill: Callable[[int], np.ndarray]) -> None:
        self.fill = fill
        self.buf = np.zeros(0, dtype=np.int64)
        self.pos = 0
        self.chunk = 256

    def take(self, n: int) -> np.ndarray:
        if self.pos + n > self.buf.size:
            while self.chunk < 4 * n:
                self.chunk *= 2
            self.buf = np.concatenate([self.buf[self.pos:], self.fill(self.chunk)])
            self.pos = 0
            self.chunk = min(self.chunk * 2, 1 << 20)
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out


class PooledNoise:
    """Exact discrete Laplace values drawn in blocks (the lab default).

    A scale ``t/s`` asked for a third time gets a block of its own: values of
    :meth:`histogram.noise.GeneratorDrawer.discrete_laplace` from a drawer keyed by (seed, stream,
    method, scale), handed out in order. Rarer scales (BD's releases, whose ε is rarely the same
    twice) are assembled from blocks that do not depend on ``s``: ``X`` with ``P(X = x) ∝ e^{−x/t}``
    (:meth:`~histogram.noise.GeneratorDrawer.discrete_exponential`, one block per ``t``) and fair
    signs; ``⌊X/s⌋`` with its sign, ``(−, 0)`` rejected and redrawn, is ``DLap(t/s)`` exactly (CKS
    Algorithm 2's last step). Either way the values depend on the seed and the method's decisions
    only. Same law as the engine's draws, other values.
    """

    POOL_AFTER = 3

    def __init__(self, seed: int, stream: str, name: str) -> None:
        self._rnd = Randomness.seeded(seed)
        self._stream = stream
        self._name = name
        self._blocks: dict[tuple[str, int, int], _Block] = {}
        self._seen: dict[tuple[int, int], int] = {}
        self._fixed: dict[int, tuple[Fraction, _Block]] = {}

    def begin(self, t: int) -> None:
        return None

    def _block(self, kind: str, a: int, b: int) -> _Block:
        key = (kind, a, b)
        block = self._blocks.get(key)
        if block is None:
            drawer = self._rnd.drawer(self._stream, 0, f"lab-vector:{self._name}:{kind}:{a}/{b}")
            if kind == "dlap":
                scale = Fraction(a, b)
                block = _Block(lambda n: drawer.discrete_laplace(scale, n))  # type: ignore[misc]
            elif kind == "x":
                block = _Block(lambda n: drawer.discrete_exponential(a, n))
            else:
                block = _Block(lambda n: drawer.fair_bits(n).astype(np.int64))
            self._blocks[key] = block
        return block

    def laplace(self, runs: np.ndarray, scale: Fraction, size: int | None) -> np.ndarray:
        """A scale every timestep asks for (decision noise): straight from its block."""
        k = int(runs.size)
        hit = self._fixed.get(id(scale))  # the policies pass the same scale objects every timestep
        if hit is None or hit[0] is not scale:
            sc = Fraction(scale)
            hit = self._fixed[id(scale)] = (scale, self._block("dlap", sc.numerator, sc.denominator))
        block = hit[1]
        z = block.take(k * (1 if size is None else size))
        return z if size is None else z.reshape(k, size)

    def laplace_each(self, runs: np.ndarray, num: np.ndarray, den: np.ndarray, size: int) -> np.ndarray:
        k = int(runs.size)
        nl, dl = num.tolist(), den.tolist()
        if k and nl.count(nl[0]) == k and dl.count(dl[0]) == k:
            # every row at one scale (all methods but BD's releases): one group, no fancy indexing
            a, b = nl[0], dl[0]
            g = math.gcd(a, b)
            key = (a // g, b // g)
            seen = self._seen[key] = self._seen.get(key, 0) + 1
            if seen >= self.POOL_AFTER or key[0] >= _EXACT_LIMIT or key[1] >= _EXACT_LIMIT:
                return self._block("dlap", *key).take(k * size).reshape(k, size)
            n = k * size
            return self._assembled(np.full(n, key[0], dtype=np.int64), np.full(n, key[1], dtype=np.int64)).reshape(-1, size)
        keys = []
        for a, b in zip(nl, dl, strict=True):
            g = math.gcd(a, b)
            keys.append((a // g, b // g))
        groups: dict[tuple[int, int], list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(key, []).append(i)
        out = np.empty((k, size), dtype=np.int64)
        rare: list[int] = []
        for key, idx in groups.items():
            seen = self._seen[key] = self._seen.get(key, 0) + 1
            if seen >= self.POOL_AFTER or key[0] >= _EXACT_LIMIT or key[1] >= _EXACT_LIMIT:
                out[idx] = self._block("dlap", *key).take(len(idx) * size).reshape(len(idx), size)
            else:
                rare.extend(idx)
        if rare:
            t = np.repeat(np.array([keys[i][0] for i in rare], dtype=np.int64), size)
            s = np.repeat(np.array([keys[i][1] for i in rare], dtype=np.int64), size)
            out[rare] = self._assembled(t, s).reshape(-1, size)
        return out

    def _assembled(self, t: np.ndarray, s: np.ndarray) -> np.ndarray:
        """One ``DLap(t_i/s_i)`` per entry from the ``X`` blocks of each ``t`` and the sign block."""
        out = np.empty(t.size, dtype=np.int64)
        todo = np.arange(t.size)
        while todo.size:
            tt = t[todo]
            if todo.size <= 64:  # few entries (one bin): group them in Python, in np.unique's order
                where: dict[int, list[int]] = {}
                for i, tv in enumerate(tt.tolist()):
                    where.setdefault(tv, []).append(i)
                if len(where) == 1:
                    x = self._block("x", next(iter(where)), 1).take(todo.size)
                else:
                    x = np.empty(todo.size, dtype=np.int64)
                    for tv in sorted(where):
                        x[where[tv]] = self._block("x", tv, 1).take(len(where[tv]))
            else:
                x = np.empty(todo.size, dtype=np.int64)
                for tv in sorted(set(tt.tolist())):
                    sel = np.flatnonzero(tt == tv)
                    x[sel] = self._block("x", tv, 1).take(sel.size)
            y = x // s[todo]
            negative = self._block("sign", 0, 1).take(todo.size).astype(bool)
            ok = ~(negative & (y == 0))
            out[todo[ok]] = np.where(negative, -y, y)[ok]
            todo = todo[~ok]
        return out


class EngineNoise:
    """The engine's own draws: run ``r`` at timestep ``t`` draws from
    ``Randomness.seeded(seed + r).drawer(stream, t, "release")``, in the engine's call order.

    With it the runner publishes exactly what ``dpstream replay --seed seed+r`` publishes (slow: one
    drawer and one-value draws per run and timestep; the tests use it to check the runner against the engine).
    """

    def __init__(self, seed: int, stream: str) -> None:
        self._seed = seed
        self._stream = stream
        self._t = -1
        self._drawers: dict[int, GeneratorDrawer] = {}

    def begin(self, t: int) -> None:
        self._t = t
        self._drawers = {}

    def laplace(self, runs: np.ndarray, scale: Fraction, size: int | None) -> np.ndarray:
        out = []
        for r in runs.tolist():
            d = self._drawers.get(r)
            if d is None:
                d = self._drawers[r] = Randomness.seeded(self._seed + r).drawer(self._stream, self._t, "release")
            out.append(d.discrete_laplace(scale, size))
        if size is None:
            return np.asarray(out, dtype=np.int64).reshape(len(out))
        return np.asarray(out, dtype=np.int64).reshape(len(out), size)

    def laplace_each(self, runs: np.ndarray, num: np.ndarray, den: np.ndarray, size: int) -> np.ndarray:
        return np.vstack([self.laplace(runs[i:i + 1], Fraction(int(a), int(b)), size)
                          for i, (a, b) in enumerate(zip(num.tolist(), den.tolist(), strict=True))])
