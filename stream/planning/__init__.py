"""Planning from public information only: what ``dpstream run`` needs at start-up, shared with the lab.

* :mod:`stream.planning.planner`: ``release.decision: auto`` (the choice of method, parameters
  and post-processing from the configuration and a declared-public history) and the
  configuration warnings every command prints;
* :mod:`stream.planning.diagnostics`: the threshold-below-noise-floor diagnosis;
* :mod:`stream.planning.families`: the synthetic public stream shapes the planner simulates on
  (and ``dpstream generate`` writes).

Nothing here reads the private input. A shared layer like :mod:`stream.config`: it imports
neither ``stream.service``, ``stream.lab`` nor ``stream.commands`` (``tests/test_architecture.py``);
the service's start-up (``stream.commands``) and the lab both import it.
"""
