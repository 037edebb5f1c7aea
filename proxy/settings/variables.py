"""How a setting is declared: the variable that sets it lives on its field.

`setting(default, env=..., read=...)` is a dataclass field whose metadata
names its GATEWAY_* variable and the reader of that variable's text. The
field's attribute docstring, just below it, is the one place for its why.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Iterator, TypeVar, overload

T = TypeVar("T")
_METADATA_KEY = "gateway_variable"


class Form(Enum):
    """What a variable's text is."""

    VALUE = "the value itself"
    FILE_TEXT = "the path of a file whose text is the value"
    """Read by the loading side; `load_settings` is given the file's text."""
    FILE = "the path of a file read later"
    """Kept as a path; the loading side checks at start-up that the file is there."""


@dataclass(frozen=True)
class Variable:
    """One GATEWAY_* variable: how its text becomes its field's value."""

    name: str
    read: Callable[[str, str], Any]
    """(variable name, text) -> value, or SettingsError (proxy.settings.readers)."""
    form: Form = Form.VALUE
    in_config_file: bool = True
    """False for GATEWAY_CONFIG alone: the file cannot name itself."""


@overload
def setting(default: T, *, env: str, read: Callable[[str, str], T], form: Form = Form.VALUE,
            in_config_file: bool = True) -> T: ...


@overload
def setting(*, factory: Callable[[], T], env: str, read: Callable[[str, str], T], form: Form = Form.VALUE,
            in_config_file: bool = True) -> T: ...


def setting(default: Any = dataclasses.MISSING, *, factory: Callable[[], Any] | None = None, env: str,
            read: Callable[[str, str], Any], form: Form = Form.VALUE, in_config_file: bool = True) -> Any:
    """A Settings field set by the variable `env`, whose text `read` turns into the value."""
    metadata = {_METADATA_KEY: Variable(env, read, form, in_config_file)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def variable_of(field: dataclasses.Field[Any]) -> Variable:
    """The variable declared on a field. A field without one could never be
    set, so it is refused as soon as the variables are listed (at import)."""
    found = field.metadata.get(_METADATA_KEY)
    if not isinstance(found, Variable):
        raise TypeError(f"{field.name} is declared without setting(): no variable sets it")
    return found


def declared(settings_class: type[Any]) -> Iterator[tuple[str, Variable]]:
    """Each field of a settings dataclass with its variable, in declaration order."""
    for field in dataclasses.fields(settings_class):
        yield field.name, variable_of(field)
