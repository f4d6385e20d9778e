"""``/api/query``: box and marginal queries answered from a committed release (issue 31 item 1).

A dashboard on a 10⁹-cell stream cannot sum cells; it asks the public port:

* ``/api/query?where=age:2-4&where=sex:F`` — the estimated number of records in the box
  (each ``where`` is ``ATTRIBUTE:LOW-HIGH`` in level indexes, inclusive, or ``ATTRIBUTE:LEVEL``
  with a level index or a categorical value; unconstrained attributes span all their levels);
* ``/api/query?marginal=age,sex`` — the table over those attributes (row-major, in the order
  given);
* ``&timestep=N`` — the release of timestep ``N`` (default: the latest retained one).

The answer is computed from the release message alone (:mod:`histogram.model_query`): the
released model for a ``model-release`` message, the released counts for a histogram release.
It is post-processing of what the output topic already carries, so it costs no budget and
reveals nothing new; the answer says which release it came from and how it was computed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from histogram.errors import MechanismError
from histogram.model_query import Answer
from stream.answers import answerer

__all__ = ["QueryError", "answer_query", "answerer"]


class QueryError(ValueError):
    """A query that cannot be answered as asked (the message says what to change); HTTP 400."""


def _attributes(domain: Mapping[str, Any]) -> list[tuple[str, int, list[str] | None]]:
    out = []
    for a in domain["domain"]["attributes"]:
        values = a.get("values")
        out.append((a["name"], int(a["bins"]) if values is None else len(values), values))
    return out


def _level(spec: str, name: str, size: int, values: list[str] | None) -> int:
    if values is not None and spec in values:
        return values.index(spec)
    try:
        level = int(spec)
    except ValueError:
        known = f"one of {', '.join(values)} or " if values is not None else ""
        raise QueryError(f"where={name}:{spec}: a level is {known}a level index 0..{size - 1}") from None
    if not 0 <= level < size:
        raise QueryError(f"where={name}:{spec}: level index out of range 0..{size - 1}")
    return level


def _box(where: Sequence[str], attrs: list[tuple[str, int, list[str] | None]]) -> tuple[np.ndarray, np.ndarray]:
    index = {n: i for i, (n, _, _) in enumerate(attrs)}
    lo = np.zeros(len(attrs), dtype=np.int64)
    hi = np.asarray([size - 1 for _, size, _ in attrs], dtype=np.int64)
    seen = set()
    for w in where:
        name, sep, spec = w.partition(":")
        if not sep or name not in index:
            raise QueryError(f"where={w!r}: write ATTRIBUTE:LOW-HIGH or ATTRIBUTE:LEVEL with an attribute of the "
                             f"domain ({', '.join(index)})")
        if name in seen:
            raise QueryError(f"where names {name} twice: give one range per attribute")
        seen.add(name)
        j = index[name]
        _, size, values = attrs[j]
        low, dash, high = spec.partition("-") if (values is None or spec not in values) else (spec, "", "")
        lo[j] = _level(low, name, size, values)
        hi[j] = _level(high, name, size, values) if dash else lo[j]
        if lo[j] > hi[j]:
            raise QueryError(f"where={w}: the low level is above the high level")
    return lo, hi


def answer_query(query: Mapping[str, list[str]], domain: Mapping[str, Any],
                 release: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON answer of ``/api/query`` for one parsed release message.

    Raises:
        QueryError: a malformed query, or one this release cannot answer (with what to do).
    """
    attrs = _attributes(domain)
    names = [n for n, _, _ in attrs]
    levels = tuple(size for _, size, _ in attrs)
    where, marginal = query.get("where", []), query.get("marginal", [])
    if bool(where) == bool(marginal):
        raise QueryError("ask for one thing: where=ATTRIBUTE:LOW-HIGH (repeatable) for a box count, or "
                         "marginal=ATTRIBUTE[,ATTRIBUTE...] for a table")
    try:
        ans = answerer(release, levels, names)
        if marginal:
            if len(marginal) > 1:
                raise QueryError("give marginal once, with the attributes separated by commas")
            wanted = [a.strip() for a in marginal[0].split(",") if a.strip()]
            unknown = [a for a in wanted if a not in names]
            if unknown or not wanted:
                raise QueryError(f"marginal={marginal[0]!r}: name attributes of the domain ({', '.join(names)})")
            result: Answer = ans.marginal(tuple(names.index(a) for a in wanted))
            asked: dict[str, Any] = {"marginal": wanted,
                                     "shape": [levels[names.index(a)] for a in wanted]}
            value: Any = [round(float(v), 6) + 0.0 for v in np.asarray(result.value, dtype=np.float64).ravel()]
        else:
            lo, hi = _box(where, attrs)
            result = ans.box(lo, hi)
            asked = {"box": {n: [int(a), int(b)] for n, a, b in zip(names, lo, hi, strict=True)
                             if a > 0 or b < levels[names.index(n)] - 1}}
            value = round(float(result.value), 6) + 0.0
    except MechanismError as exc:
        raise QueryError(str(exc)) from None
    return {
        "stream": release["stream"],
        "timestep": release["timestep"]["index"],
        "release_id": release["release_id"],
        "kind": release["kind"],
        "source_timestep": release["accuracy"]["source_timestep"],
        "query": asked,
        "answer": value,
        "computed_from": result.source,
        "note": "post-processing of the release message: no privacy cost",
    }

