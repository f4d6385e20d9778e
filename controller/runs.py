"""One run of an engine over a finite stream: the step loop every offline caller shares.

The service steps :class:`controller.step.Engine` once per sealed timestep, with its journal and
its broker in between. Offline callers — the lab's runs (:func:`stream.lab.runs.run_method`), the
planner's simulations and its configuration diagnostics (:mod:`stream.planning`) — step an engine
over a whole stream they already hold. :func:`step_run` is that loop, once: the engine's initial
state, then for each timestep ``engine.step(state, input, drawer)`` with the state threaded through.
What each caller does with the releases (post-processing, error figures, reading an ε) is its own.

Privacy: nothing here draws or charges by itself; every charge and draw is the engine's, against its
own accountant, from the drawer the caller gives for each timestep (seeded drawers in the lab and the
planner, whose outputs are never published).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from histogram.noise import NoiseDrawer

__all__ = ["step_run"]


def step_run(
    engine: Any,
    inputs: Sequence[Any] | Callable[[int, Any], Any],
    drawer: Callable[[int], NoiseDrawer],
    *,
    timesteps: int | None = None,
) -> Iterator[tuple[int, Any, Any]]:
    """Step ``engine`` (an :class:`~controller.step.Engine` or a personalized engine) from its
    initial state over timesteps ``0 .. T-1``; yields ``(t, release, state)`` after each step.

    ``inputs``: what timestep ``t`` steps on — ``inputs[t]`` (a sequence of histograms or record
    tables; ``T = len(inputs)``), or ``inputs(t, state)`` with the state before the step (for
    engines whose input depends on it) and ``timesteps`` given. ``drawer(t)``: timestep ``t``'s
    noise drawer (e.g. ``randomness.drawer(stream_id, t, "release")``, as the service keys it).
    """
    if callable(inputs):
        if timesteps is None:
            raise ValueError("step_run: give timesteps when inputs is a function of (t, state)")
        at = inputs
    else:
        seq = inputs
        timesteps = len(seq) if timesteps is None else timesteps
        def at(t: int, _state: Any) -> Any:
            return seq[t]
    state = engine.initial_state()
    for t in range(timesteps):
        release, state = engine.step(state, at(t, state), drawer(t))
        yield t, release, state
