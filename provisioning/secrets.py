"""A value that must never reach a log line, an error message or a repr;
and how to tell where a YAML file that may hold one is broken."""

from __future__ import annotations

import yaml


class Secret:
    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The only way to the value: grep for `reveal(` to audit every use."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def yaml_mistake(error: yaml.YAMLError) -> str:
    """Where the YAML is broken: line and column only. PyYAML's own message
    quotes the offending line, which in a settings or providers file or a
    kubeconfig may be the one holding a secret (an unclosed quote after
    `client_secret:`)."""
    marks = [f"line {mark.line + 1}, column {mark.column + 1}"
             for mark in (getattr(error, "problem_mark", None), getattr(error, "context_mark", None)) if mark]
    if not marks:
        return "not YAML"
    # The context is where what broke began: an unclosed quote's opening, when the problem is the file's end.
    return "not YAML (" + ", in what begins at ".join(dict.fromkeys(marks)) + ")"
