"""The ``QUIRE_*`` variables a process is started with: settings models that
read them (pydantic-settings), a refusal naming the variable when its value
is unusable, and a report of the variables that no Quire process reads (a
misspelt name would otherwise be silently ignored and its default used).

A settings model is a frozen :class:`Settings`: each field is read from one
variable, ``QUIRE_`` (the model's ``env_prefix``) and its name in capitals
unless a :class:`Variable` names another; its default and its docstring are
written once, on the field. ``{SERVICE}`` in a prefix or a name is the
reading service's name (``QUIRE_{SERVICE}_CONCURRENCY``). Constructing a
model from values reads no environment; ``from_env`` reads one, in ``main``.

Each distribution lists the models its processes read (:class:`Reads`) under
the ``quire.settings`` entry points; :func:`known` is every variable they
name, and what each service's command checks its environment against at
start (``quire.runtime.run_service``), together with :data:`NOT_SETTINGS`.
"""

from __future__ import annotations

import difflib
import os
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import entry_points
from typing import Any, Literal, Self, Union, get_args, get_origin

import annotated_types
from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from quire.errors import InvalidSetting

__all__ = [
    "CREDENTIAL_PREFIX",
    "ENTRY_POINTS",
    "NOT_SETTINGS",
    "Expect",
    "Described",
    "Given",
    "Keyed",
    "Reads",
    "Settings",
    "Variable",
    "declared",
    "describe",
    "known",
    "readers",
    "unknown_settings",
]

ENTRY_POINTS = "quire.settings"
"""Each distribution's ``<process> = module:SETTINGS``, a tuple of :class:`Reads`."""

CREDENTIAL_PREFIX = "QUIRE_SOURCE_CREDENTIAL_"
"""Variables holding source systems' credentials (``env:`` references): not
settings, and never reported by name as unknown."""

NOT_SETTINGS: Mapping[str, str] = {
    "QUIRE_TOKEN": "the CLI's tenant token",
    "QUIRE_OPERATOR_TOKEN": "the CLI's operator token",
    "QUIRE_PORT_RANGE": "the loopback ports `quire up` draws from (LOW-HIGH)",
    "QUIRE_CORPUS": "the tests' and benches' corpus of real PDFs",
    "QUIRE_FAULTS": "faults the fault tests inject at start (`quire.faults`)",
}
"""Variables Quire reads that are no process's settings: the CLI's, the
embedded stack's and the tests'. Every other known variable is a field."""


@dataclass(frozen=True)
class Variable:
    """The variable a field is read from, when it is not the model's prefix
    and the field's name; ``{SERVICE}`` is the reading service's name."""

    name: str
    empty_is_a_value: bool = False
    """An empty value is the field's value (an address left empty: not
    served) rather than its default."""


@dataclass(frozen=True)
class Keyed:
    """A mapping field read from one variable per key: ``template`` with the
    ``placeholder`` replaced by the key's part (``QUIRE_STALL_{STATE}_SECONDS``).
    A key whose variable is unset is left out of the mapping."""

    template: str
    parts: Mapping[str, str]
    """Each key of the mapping, and its part of the variable's name."""
    placeholder: str = "KEY"

    def variables(self, names: Mapping[str, str]) -> dict[str, str]:
        """Each key's variable."""
        return {
            key: self.template.format_map({**names, self.placeholder: part})
            for key, part in self.parts.items()
        }


@dataclass(frozen=True)
class Given:
    """A field no variable sets: its reader gives it (the service's name, a
    value worked out from others), or it keeps its default."""


@dataclass(frozen=True)
class Expect:
    """What a refusal says the variable expects, where the field's type and
    bounds do not say it well."""

    text: str


class Settings(BaseSettings):
    """A frozen settings model: made from values, or read from the
    environment with :meth:`read`, where an unusable value is an
    ``InvalidSetting`` naming the variable and what it expects, never the
    value (which may be a secret)."""

    model_config = SettingsConfigDict(
        frozen=True,
        extra="forbid",
        env_prefix="QUIRE_",
        use_attribute_docstrings=True,
        allow_inf_nan=False,
        arbitrary_types_allowed=True,
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Made from values, a model reads no environment: only ``from_env`` does."""
        return (init_settings,)

    @classmethod
    def read(
        cls, env: Mapping[str, str] | None, names: Mapping[str, str] | None = None, **given: Any
    ) -> Self:
        """The model from ``env`` (the process's environment when None),
        ``names`` filling the placeholders of its variables (``{"SERVICE":
        "VALIDATOR"}``), ``given`` the values a variable may override
        (defaults worked out from other settings) and the :class:`Given`
        fields. Each model's ``from_env`` says which of these it needs."""
        names = dict(names or {})
        env = os.environ if env is None else env
        sources = (_Environment(cls, env, names), InitSettingsSource(cls, init_kwargs=given))
        try:
            return cls(_build_sources=(sources, {}))  # type: ignore[call-arg]
        except ValidationError as error:
            raise refusal(cls, error, names) from None

    @classmethod
    def variables(cls, names: Mapping[str, str] | None = None) -> dict[str, str]:
        """Every variable the model and the models it holds read, with the
        field's description (the model's and its nested models' fields)."""
        found: dict[str, str] = {}
        for name, info in cls.model_fields.items():
            nested = _nested(info)
            if nested is not None:
                found |= nested.variables(names)
            found |= dict.fromkeys(_variables_of(cls, name, info, names or {}), _about(info))
        return found


@dataclass(frozen=True)
class Described:
    """One variable as the settings reference shows it."""

    model: type[Settings]
    """The model whose field it is."""
    variable: str
    """Its name, a placeholder still to fill shown as ``<SERVICE>``."""
    kind: str
    default: str
    about: str


class _Shown(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return f"<{key}>"


def describe(
    model: type[Settings], names: Mapping[str, str], given: Mapping[str, object] | None = None
) -> Iterator[Described]:
    """The variables of ``model`` and the models it holds, for the settings
    reference (``tools/docgen.py``); ``given`` the defaults its reader gives."""
    for name, info in model.model_fields.items():
        nested = _nested(info)
        if nested is not None:
            yield from describe(nested, names)
            continue
        if any(isinstance(m, Given) for m in info.metadata):
            continue
        keyed = next((m for m in info.metadata if isinstance(m, Keyed)), None)
        if keyed is not None:
            placeholders = _Shown(names)
            placeholders.pop(keyed.placeholder, None)
            variable = keyed.template.format_map(placeholders)
        else:
            (variable,) = _variables_of(model, name, info, _Shown(names))
        default = (given or {}).get(name, info.get_default(call_default_factory=False))
        shown = "" if info.is_required() else _default_shown(name, info, default)
        yield Described(model, variable, _kind_name(info), shown, _about(info))


def _kind_name(info: FieldInfo) -> str:
    annotation = info.annotation
    origin = get_origin(annotation)
    prefix = ""
    if isinstance(origin, type) and issubclass(origin, Mapping):
        annotation = get_args(annotation)[-1]
    elif origin is tuple:
        annotation, prefix = get_args(annotation)[0], "comma-separated "
    kinds = [k for k in _kinds(annotation) if k is not type(None)]
    if kinds and all(isinstance(k, str) for k in kinds):
        return " or ".join(f"`{k}`" for k in kinds)
    names = {int: "whole number", float: "number", bool: "1 or 0", str: "text"}
    shown = [names.get(k, getattr(k, "__name__", str(k)).lower()) for k in kinds]
    shown = ["path" if k == "path" else "network" if "network" in k else k for k in shown]
    return prefix + " or ".join(dict.fromkeys(shown))


def _default_shown(name: str, info: FieldInfo, default: object) -> str:
    if info.default_factory is not None or default in (None, "", (), {}):
        return ""
    if isinstance(default, bool):
        return "1" if default else "0"
    if isinstance(default, int) and "bytes" in name and default >= 1024 * 1024:
        for unit, size in (("GiB", 1024**3), ("MiB", 1024**2)):
            if default % size == 0:
                return f"{default // size} {unit}"
    if isinstance(default, float):
        return f"{default:g}"
    return str(default)


def _nested(info: FieldInfo) -> type[Settings] | None:
    """The settings model a field holds (read by its own ``from_env``), if any."""
    for candidate in (info.annotation, *get_args(info.annotation)):
        if isinstance(candidate, type) and issubclass(candidate, Settings):
            return candidate
    return None


def _about(info: FieldInfo) -> str:
    return " ".join((info.description or "").split())


def _variables_of(
    model: type[Settings], name: str, info: FieldInfo, names: Mapping[str, str]
) -> list[str]:
    """The variables one field is read from: none, one, or one per key."""
    if _nested(info) is not None or any(isinstance(m, Given) for m in info.metadata):
        return []
    for marker in info.metadata:
        if isinstance(marker, Keyed):
            return list(marker.variables(names).values())
        if isinstance(marker, Variable):
            return [marker.name.format_map(names)]
    prefix = model.model_config.get("env_prefix", "")
    return [(prefix + name.upper()).format_map(names)]


class _Environment(PydanticBaseSettingsSource):
    """The values a model's variables hold in one environment (a mapping, so a
    test gives its own): unset and empty variables leave the field's default."""

    def __init__(
        self, settings_cls: type[Settings], env: Mapping[str, str], names: Mapping[str, str]
    ) -> None:
        super().__init__(settings_cls)
        self._model = settings_cls
        self._env = env
        self._names = names

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        keyed = next((m for m in field.metadata if isinstance(m, Keyed)), None)
        if keyed is not None:
            each = {
                key: self._env.get(name, "") for key, name in keyed.variables(self._names).items()
            }
            return ({key: v for key, v in each.items() if v} or None), field_name, False
        empty_is_a_value = any(
            isinstance(m, Variable) and m.empty_is_a_value for m in field.metadata
        )
        for variable in _variables_of(self._model, field_name, field, self._names):
            value = self._env.get(variable)
            if value or (value == "" and empty_is_a_value):
                return value, field_name, False
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, info in self.settings_cls.model_fields.items():
            value, key, _ = self.get_field_value(info, name)
            if value is not None:
                values[key] = value
        return values


def refusal(
    model: type[Settings], error: ValidationError, names: Mapping[str, str]
) -> InvalidSetting:
    """The first error of a model read from the environment, as the refusal
    that names its variable and what that expects (never the value)."""
    first = error.errors(include_url=False, include_input=False)[0]
    location = first["loc"]
    info = model.model_fields.get(str(location[0])) if location else None
    if info is None:
        return InvalidSetting(model.__name__, _expected_of_error(first))
    variables = _variables_of(model, str(location[0]), info, names)
    variable = variables[0] if variables else str(location[0])
    for marker in info.metadata:
        if isinstance(marker, Keyed) and len(location) > 1:
            variable = marker.variables(names).get(str(location[1]), variable)
    return InvalidSetting(variable, _expected(info, first))


def _expected(info: FieldInfo, error: Any) -> str:
    for marker in info.metadata:
        if isinstance(marker, Expect):
            return marker.text
    if error["type"] in ("value_error", "assertion_error"):
        return _expected_of_error(error)
    annotation = info.annotation
    origin = get_origin(annotation)
    if isinstance(origin, type) and issubclass(origin, Mapping):
        annotation = get_args(annotation)[-1]  # a Keyed field: what one variable holds
    kinds = _kinds(annotation)
    if kinds and all(isinstance(k, str) for k in kinds):
        return " or ".join(str(k) for k in kinds)
    if bool in kinds:
        return "1 or 0"
    kind = "a whole number" if int in kinds else "a number" if float in kinds else ""
    bounds = _bounds(info, annotation)
    if not kind:
        return _expected_of_error(error)
    return f"{kind} {bounds}".strip()


def _kinds(annotation: Any) -> tuple[Any, ...]:
    """The plain types (or literal values) an annotation admits."""
    origin = get_origin(annotation)
    if origin is Literal:
        return get_args(annotation)
    if origin in (Union, types.UnionType):
        return tuple(k for arg in get_args(annotation) for k in _kinds(arg))
    if hasattr(annotation, "__metadata__"):
        return _kinds(get_args(annotation)[0])
    return (annotation,)


def _bounds(info: FieldInfo, annotation: Any) -> str:
    metadata = [*info.metadata, *getattr(annotation, "__metadata__", ())]
    low = next((m.ge for m in metadata if isinstance(m, annotated_types.Ge)), None)
    above = next((m.gt for m in metadata if isinstance(m, annotated_types.Gt)), None)
    high = next((m.le for m in metadata if isinstance(m, annotated_types.Le)), None)
    if low is not None and high is not None:
        return f"from {low:g} to {high:g}"
    if low is not None:
        return f"of at least {low:g}"
    if above is not None:
        return f"above {above:g}"
    return f"of at most {high:g}" if high is not None else ""


def _expected_of_error(error: Any) -> str:
    cause = (error.get("ctx") or {}).get("error")
    return str(cause) if cause is not None else "a usable value"


@dataclass(frozen=True)
class Reads:
    """A settings model a process reads, and the names of its placeholders
    besides ``SERVICE`` (``{"LANE": "QUARANTINE"}``)."""

    model: type[Settings]
    names: Mapping[str, str] = field(default_factory=dict)
    given: Mapping[str, object] = field(default_factory=dict)
    """The defaults its reader gives (the quarantine lane's own)."""

    def variables(self, process: str) -> dict[str, str]:
        return self.model.variables({"SERVICE": process.upper(), **self.names})


def declared() -> Iterator[tuple[str, Reads]]:
    """(process, what it reads) from every installed distribution."""
    for point in sorted(entry_points(group=ENTRY_POINTS), key=lambda p: p.name):
        for reads in point.load():
            yield point.name, reads


@cache
def readers() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every settings variable: its description and the processes that read it."""
    found: dict[str, tuple[str, tuple[str, ...]]] = {}
    for process, reads in declared():
        for variable, about in reads.variables(process).items():
            before = found.get(variable, (about, ()))
            found[variable] = (before[0] or about, tuple(dict.fromkeys((*before[1], process))))
    return found


@cache
def known() -> frozenset[str]:
    """Every ``QUIRE_*`` variable some Quire process reads."""
    return frozenset(readers()) | frozenset(NOT_SETTINGS)


def unknown_settings(env: Mapping[str, str]) -> list[str]:
    """A line for each ``QUIRE_*`` variable in ``env`` that no Quire process
    reads, with the nearest known name when there is one. Names only: a
    value may be a secret."""
    lines = []
    names = known()
    for name in sorted(env):
        if not name.startswith("QUIRE_") or name in names:
            continue
        if name.startswith(CREDENTIAL_PREFIX):
            continue  # a source system's credential, named by its registration
        near = difflib.get_close_matches(name, names, n=1, cutoff=0.8)
        hint = f"; did you mean {near[0]}?" if near else ""
        lines.append(f"{name} is not a Quire setting and is ignored{hint}")
    return lines
