"""Hyperparameter schemas, declared once on an algorithm's config dataclass.

A config field made with `param(...)` carries its help text and bounds; `schema(config_class)` turns
the dataclass into `Param`s that the web form, the command line and the Python API all validate with.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any


class ConfigError(ValueError):
    """Bad hyperparameters or environment: `errors` maps a field name (or "env_id") to a message."""

    def __init__(self, errors: dict[str, str]):
        self.errors = dict(errors)
        super().__init__("; ".join(f"{name}: {message}" for name, message in self.errors.items()))


def param(default, help: str, *, low=None, high=None, low_inclusive=True, high_inclusive=True, choices=None):
    """A config field with its schema: `low`/`high` bound numbers, `choices` lists allowed strings."""
    metadata = dict(help=help, low=low, high=high, low_inclusive=low_inclusive, high_inclusive=high_inclusive,
                    choices=tuple(choices) if choices else None)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Param:
    name: str
    type: type  # int, float, bool or str
    default: Any
    help: str
    low: float | None = None
    high: float | None = None
    low_inclusive: bool = True
    high_inclusive: bool = True
    choices: tuple | None = None

    def parse(self, raw: Any) -> Any:
        """Convert `raw` (a string from a form or command line, or a Python value) and check its bounds."""
        value = self._convert(raw)
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"must be one of {', '.join(map(str, self.choices))}")
        if self.type in (int, float):
            if self.low is not None and (value < self.low or (value == self.low and not self.low_inclusive)):
                raise ValueError(f"must be {'at least' if self.low_inclusive else 'greater than'} {self.low}")
            if self.high is not None and (value > self.high or (value == self.high and not self.high_inclusive)):
                raise ValueError(f"must be {'at most' if self.high_inclusive else 'less than'} {self.high}")
        return value

    def _convert(self, raw: Any) -> Any:
        if self.type is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("true", "1", "yes", "on"):
                return True
            if text in ("false", "0", "no", "off", ""):
                return False
            raise ValueError("must be true or false")
        if self.type is int:
            if isinstance(raw, bool):
                raise ValueError("must be a whole number")
            if isinstance(raw, int):
                return raw
            if isinstance(raw, float):
                if raw.is_integer():
                    return int(raw)
                raise ValueError("must be a whole number")
            try:
                return int(str(raw).strip())
            except ValueError:
                try:
                    number = float(str(raw).strip())
                except ValueError:
                    raise ValueError("must be a whole number") from None
                if math.isfinite(number) and number.is_integer():
                    return int(number)
                raise ValueError("must be a whole number") from None
        if self.type is float:
            if isinstance(raw, bool):
                raise ValueError("must be a number")
            try:
                value = float(str(raw).strip()) if not isinstance(raw, (int, float)) else float(raw)
            except ValueError:
                raise ValueError("must be a number") from None
            if not math.isfinite(value):
                raise ValueError("must be a finite number")
            return value
        return str(raw)

    def describe(self) -> dict:
        """The schema as plain JSON, for the web form's help text and the API."""
        return dict(name=self.name, type=self.type.__name__, default=self.default, help=self.help, low=self.low,
                    high=self.high, low_inclusive=self.low_inclusive, high_inclusive=self.high_inclusive,
                    choices=list(self.choices) if self.choices else None)


def schema(config_class) -> list[Param]:
    """The `Param`s of a config dataclass, in declaration order."""
    hints = typing.get_type_hints(config_class)
    params = []
    for field in dataclasses.fields(config_class):
        meta = field.metadata
        params.append(Param(name=field.name, type=hints[field.name], default=field.default, help=meta.get("help", ""),
                            low=meta.get("low"), high=meta.get("high"),
                            low_inclusive=meta.get("low_inclusive", True),
                            high_inclusive=meta.get("high_inclusive", True), choices=meta.get("choices")))
    return params


def build_config(config_class, values: dict[str, Any]):
    """Parse `values` against the schema, apply defaults, run the config's own cross-field checks.

    Raises ConfigError listing every bad field, so a form can show each message next to its field.
    """
    params = {p.name: p for p in schema(config_class)}
    errors: dict[str, str] = {}
    unknown = sorted(set(values) - set(params))
    for name in unknown:
        errors[name] = f"unknown hyperparameter (known: {', '.join(params)})"
    parsed = {}
    for name, value in values.items():
        if name in params:
            try:
                parsed[name] = params[name].parse(value)
            except ValueError as error:
                errors[name] = str(error)
    if errors:
        raise ConfigError(errors)
    config = config_class(**parsed)
    check = getattr(config, "check", None)
    if check is not None:
        errors = check()
        if errors:
            raise ConfigError(errors)
    return config
