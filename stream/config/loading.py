"""Loading settings and saying what is wrong: the YAML file read strictly, the sources merged
(overrides > environment > file > defaults), pydantic's errors rewritten one line per problem
(the setting's dotted path, the value unless secret, what to do), and the files settings name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_settings import SettingsConfigDict

from controller.errors import ConfigurationError
from stream.config.errors import ENV_PREFIX, SECRET_SETTINGS, ConfigError
from stream.config.settings import Settings

__all__ = ["FILE_SETTINGS", "error_lines", "format_errors", "load_settings", "missing_files"]


_FIXES = {
    "int_parsing": "set a whole number",
    "int_type": "set a whole number",
    "int_from_float": "set a whole number",
    "float_parsing": "set a number",
    "float_type": "set a number",
    "bool_parsing": "set true or false",
    "bool_type": "set true or false",
    "string_type": "set a text value (quote it in YAML)",
    "list_type": "set a list, e.g. [a, b]",
    "dict_type": "set a mapping of settings (key: value lines)",
    "model_type": "set a mapping of settings (key: value lines)",
    "model_attributes_type": "set a mapping of settings (key: value lines)",
    "greater_than_equal": "set a larger value",
    "greater_than": "set a larger value",
    "less_than_equal": "set a smaller value",
    "less_than": "set a smaller value",
    "string_pattern_mismatch": "use letters, digits, '.', '_' and '-' only",
    "literal_error": "use one of the values listed",
}


def _section_fields(loc: tuple[str, ...]) -> list[str]:
    """The setting names valid at ``loc`` (a dotted path's parent), for 'did you mean'."""
    model: Any = Settings
    for part in loc:
        field = getattr(model, "model_fields", {}).get(part) or getattr(model, "model_fields", {}).get(
            part + "_")
        if field is None:
            return []
        annotation = field.annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if model is None:
            return []
    return [f.alias or name for name, f in model.model_fields.items()]


def _shown(value: object) -> str | None:
    """A short rendering of a scalar input for an error line (None for mappings and lists)."""
    if value is None or isinstance(value, bool | int | float | str):
        text = repr(value) if isinstance(value, str) else str(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return None


def _error_line(err: Any) -> str:
    parts = [str(p) for p in err.get("loc", ())]
    parts = ["schema" if p == "schema_" else p for p in parts]
    where = ".".join(parts) or "(top level)"
    kind = err.get("type", "")
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        import difflib

        valid = _section_fields(tuple(err.get("loc", ()))[:-1])
        close = difflib.get_close_matches(parts[-1], valid, n=1) if parts else []
        parent = ".".join(parts[:-1])
        hint = (f"did you mean {parent + '.' if parent else ''}{close[0]}?" if close
                else f"valid here: {', '.join(valid)}" if valid else "check the spelling")
        return f"{where}: unknown setting; {hint} (see README 'Configuration')"
    if kind == "missing":
        env = ENV_PREFIX + "__".join(p.upper() for p in parts)
        return f"{where}: required but not set; add it to the file (or set {env})"
    shown = None if where in SECRET_SETTINGS or "password" in where else _shown(err.get("input"))
    fix = _FIXES.get(kind)
    msg = msg.replace("Input should be", "must be")
    if kind.startswith(("greater", "less")):
        fix = None
    if shown is not None and shown not in msg:
        msg = f"{msg} (got {shown})"
    return f"{where}: {msg}" + (f"; {fix}" if fix and fix not in msg else "")


def error_lines(exc: ValidationError) -> list[str]:
    """One line per pydantic error: dotted setting path, the value (never a secret's), what to do."""
    return [_error_line(err) for err in exc.errors()]


def format_errors(exc: ValidationError) -> str:
    """``invalid configuration: <the line>``, or that header with :func:`error_lines` below it."""
    lines = error_lines(exc)
    if len(lines) == 1:
        return f"invalid configuration: {lines[0]}"
    return "invalid configuration:\n" + "\n".join(lines)


def _read_yaml(path: Path) -> None:
    """Parse the file once up front so a syntax error is reported with its line, not a traceback."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a UTF-8 text file ({exc.reason}); save the configuration as UTF-8 YAML") \
            from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration file ({exc.strerror or exc}); "
                          "check the path and its permissions") from None
    class _StrictLoader(yaml.SafeLoader):
        """SafeLoader that refuses a key given twice in one mapping (YAML keeps the last one silently)."""

    def _mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if not isinstance(key, str | int | float | bool) or key is None:
                continue  # SafeLoader itself reports an unhashable key
            if key in seen:
                raise ConfigError(
                    f"{path}:{key_node.start_mark.line + 1}: the key {key!r} is given twice in one section (the "
                    f"first, on line {seen[key] + 1}, would be ignored); merge the two into one")
            seen[key] = key_node.start_mark.line
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    _StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: YAML syntax error: {problem}; fix the indentation, quotes or brackets "
                          "there") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{path}: the file holds a {type(data).__name__}, not settings; write sections like "
                          "'privacy:' at the top level (see README 'Configuration')")


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Read, merge and validate settings (a plain function: starts nothing, creates no file).

    Args:
        path: YAML file (optional: everything can come from the environment).
        overrides: highest-precedence values, as nested dicts by section.

    Raises:
        ConfigError: with one line per problem, each naming the setting, the value and the fix.
            Files the settings point at (TLS certificates) are not checked here: see
            :func:`missing_files`.
    """
    if path is not None:
        if not Path(path).exists():
            raise ConfigError(f"configuration file {path} does not exist; check the path (--config)")
        if not Path(path).is_file():
            raise ConfigError(f"configuration file {path} is not a file; give the path of a YAML file")
        _read_yaml(Path(path))

    class _FromFile(Settings):
        model_config = SettingsConfigDict(**{**Settings.model_config, "yaml_file": str(path) if path else None})

    try:
        settings = _FromFile(**overrides)
    except ValidationError as exc:
        raise ConfigError(*error_lines(exc)) from None
    except (ConfigurationError, ValueError) as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None
    return settings.validate_all()


#: Settings naming files that must exist on the machine the service runs on.
FILE_SETTINGS: tuple[str, ...] = ("kafka.ssl_cafile", "kafka.ssl_certfile", "kafka.ssl_keyfile")


def missing_files(settings: Settings) -> list[str]:
    """One error line per file setting (:data:`FILE_SETTINGS`) whose file does not exist or is unreadable.

    Separate from :func:`load_settings` because a configuration is often checked on another machine
    than the one it runs on (a container's mounted CA); ``dpstream run`` always checks.
    """
    import os

    lines = []
    named = [(dotted, getattr(getattr(settings, dotted.split(".")[0]), dotted.split(".")[1]))
             for dotted in FILE_SETTINGS]
    reg = settings.input.schema_registry
    if reg is not None:  # input.schema_registry.ssl_*: TLS to the schema registry
        named += [(f"input.schema_registry.{n}", getattr(reg, n)) for n in ("ssl_cafile", "ssl_certfile", "ssl_keyfile")]
    named += [(f"input.schemas.{sid}", path) for sid, path in settings.input.schemas.items()]
    for dotted, value in named:
        if value is None:
            continue
        if not Path(value).is_file():
            lines.append(f"{dotted}: no such file {value!r}; mount or copy it there, or correct the path")
        elif not os.access(value, os.R_OK):
            lines.append(f"{dotted}: {value!r} is not readable by this user; fix its permissions")
    return lines


# ---------------------------------------------------------------------------
