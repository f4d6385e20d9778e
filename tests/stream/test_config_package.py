"""``stream.config`` is a package with one job per module (issue 29), and stays one import path.

* Every public name of the former single module ``stream/config.py`` still imports from
  ``stream.config``, and is the object its owning module defines (no copies).
* The map at the top of ``stream/config/__init__.py`` names every module of the package, so a
  newcomer looking for where a setting is validated finds each file there.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import stream.config

#: the public names of ``stream/config.py`` before the split (its top-level definitions)
FORMER_NAMES = (
    "ENV_PREFIX", "ConfigError", "SECRET_SETTINGS", "parse_duration", "format_duration", "Duration", "Instant",
    "Exact", "StreamSection", "AttributeSpec", "SchemaSection", "PIDSection", "SharedPopulation",
    "PERSONAL_MECHANISMS", "DEFAULT_TIER", "PersonalSection", "PrivacySection", "MODEL_MECHANISMS",
    "MAX_SYNTHETIC", "CopulaSection", "MarginalsSection", "PlannerSection", "ReleaseSection",
    "RandomnessSection", "SchemaRegistrySection", "InputSection", "KafkaSection", "ServiceSection", "Settings",
    "error_lines", "load_settings", "FILE_SETTINGS", "missing_files", "PersonalDeclaration",
)
PACKAGE = Path(stream.config.__file__).parent


def test_every_former_name_still_imports_from_stream_config():
    missing = [name for name in FORMER_NAMES if not hasattr(stream.config, name)]
    assert missing == []
    assert set(FORMER_NAMES) <= set(stream.config.__all__)


def test_reexports_are_the_owning_modules_objects():
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        module = importlib.import_module("stream.config." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts))
        for name in getattr(module, "__all__", ()):
            if hasattr(stream.config, name):
                assert getattr(stream.config, name) is getattr(module, name), (module.__name__, name)


def test_the_map_names_every_module_of_the_package():
    doc = stream.config.__doc__ or ""
    mapped = set(re.findall(r"^``([a-z_]+)/?``  ", doc, flags=re.MULTILINE))
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    modules |= {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert mapped == modules, f"map lists {sorted(mapped)}, package has {sorted(modules)}"
