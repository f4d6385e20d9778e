"""The stream's fingerprint: the privacy-relevant settings in canonical JSON, hashed.

The service stores :func:`fingerprint_of` with its ledger and refuses to continue a stream whose
fingerprint changed (a restart under another budget, domain, method or declaration). What is in
:func:`privacy_view` is exactly what changes what a release means or costs; everything else
(Kafka, ports, the planner's options, the population declaration) may change across restarts.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from stream.config.sections import MODEL_MECHANISMS, CopulaSection, MarginalsSection
from stream.config.values import format_duration
from stream.config.view import SettingsView

__all__ = ["fingerprint_of", "privacy_view"]


def _privacy_view_exclude(settings: SettingsView) -> dict[str, Any]:
    personal = settings.privacy.personal
    if personal is None:
        return {"shared_population": True, "personal": True}
    return {"shared_population": True, **({"personal": {"weights": True}} if personal.weights is None else {})}


def privacy_view(settings: SettingsView) -> dict[str, Any]:
    """Everything that changes what a release means or costs (JSON-ready)."""
    s = settings.stream
    personal = settings.privacy.personal
    return {
        "stream": {
            "id": s.id,
            "timestep": format_duration(s.timestep),
            "origin": s.origin.isoformat(),
            "start": None if s.start is None else s.start.isoformat(),
        },
        "domain": settings.domain().describe(),
        # the population declaration is deployment accounting, not what a release means or costs;
        # privacy.personal appears only when set, and its weights only when set (so existing streams
        # keep their fingerprint)
        "privacy": settings.privacy.model_dump(mode="json", exclude=_privacy_view_exclude(settings)),
        "release": _release_view(settings),
        "schema_version": 1,
        # who is one person: only when numeric canonicalisation is off (so existing streams keep
        # their fingerprint); switching it under the same stream id changes who shares a bound
        **({"person_keys": "opaque"} if not settings.schema_.numeric_user_ids else {}),
        # the declaration without the consent table's rows: a hash of private rows is never public
        # (docs/privacy.md §12.2); a changed table is caught on restart by the engine snapshot's
        # keyed digest (controller.personal)
        **({"personal_declaration": settings.personal_declaration().budgets.public_fingerprint()}
           if personal is not None else {}),
        # declared queries only when some are (their answers are in every release message)
        **({"queries": [q.model_dump(mode="json") for q in settings.queries]} if settings.queries else {}),
        **({"alerts_private_share": str(settings.alerts.private_share)}
           if any(q.private is not None for q in settings.queries) else {}),
        # with a table, the head counts per budget level the plan is built on (public: the plan's
        # weights are published); declared privacy.personal.persons are in "privacy" already
        **({"personal_head_counts": [[str(e), n] for e, n in zip(
            settings.personal_declaration().levels.epsilons, settings.personal_declaration().levels.counts,
            strict=True)]}
           if personal is not None and personal.table is not None else {}),
    }


def _release_view(settings: SettingsView) -> dict[str, Any]:
    """``release.*`` as JSON; the model mechanisms' sections only when set (unset, they change no
    existing stream's fingerprint)."""
    view = settings.release.model_dump(mode="json", exclude={"planner"})  # how, not what, is chosen
    if view.get("min_per_window") is None:  # unset, it changes no existing stream's fingerprint
        view.pop("min_per_window", None)
    planner = settings.release.planner
    if planner is not None and planner.online is not None:  # re-planning changes what is released
        view["planner_online"] = {**planner.online.model_dump(mode="json"), "runs": planner.runs,
                                  "history": planner.timesteps}
    defaults = {"copula": CopulaSection, "marginals": MarginalsSection}
    for name in MODEL_MECHANISMS:
        if view.get(name) is None:
            view.pop(name, None)
            if settings.release.mechanism == name:  # the effective options, defaults included
                view[name] = defaults[name]().model_dump(mode="json")
    copula = view.get("copula")
    if copula is not None and copula.get("decision_space") == "one-way":
        # the one-way decision is what streams from before the setting ran: they keep their
        # fingerprint by setting it; left unset, the pairwise default is a changed stream (refused)
        del copula["decision_space"]
    return view


def fingerprint_of(settings: SettingsView) -> str:
    """SHA-256 of :func:`privacy_view` in canonical JSON (hex)."""
    canon = json.dumps(privacy_view(settings), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()
