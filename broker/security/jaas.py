"""Kafka's JAAS configuration text (``sasl.jaas.config``), parsed, never evaluated:

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

One login module, a control flag, then ``key=value`` options (a value quoted or a
bare word), ended by a semicolon, as Kafka's JaasConfig reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
# a quoted string (backslash escapes as Java's StreamTokenizer reads them), a word, or one character
_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|\'((?:[^\'\\]|\\.)*)\'|([^\s=;"\']+)|(.))', re.S)


class JaasError(ValueError):
    """A JAAS text Kafka would refuse (its message)."""


@dataclass(frozen=True, slots=True)
class LoginModule:
    name: str  # the login module class, e.g. org.apache.kafka.common.security.plain.PlainLoginModule
    flag: str
    options: dict[str, str]


def _tokens(text: str):
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:  # only white space is left
            return
        pos = match.end()
        quoted, single, word, char = match.groups()
        if quoted is not None or single is not None:
            yield "quoted", re.sub(r"\\(.)", r"\1", quoted if quoted is not None else single)
        elif word is not None:
            yield "word", word
        elif char is not None:
            yield "char", char


def parse_jaas(text: str, setting: str = "sasl.jaas.config") -> LoginModule:
    """The one login module of a ``sasl.jaas.config`` value; JaasError otherwise."""
    modules: list[LoginModule] = []
    tokens = list(_tokens(text))
    i = 0

    def take():
        nonlocal i
        if i >= len(tokens):
            raise JaasError(f"Invalid JAAS config for {setting}: JAAS config entry not terminated by semi-colon")
        i += 1
        return tokens[i - 1]

    while i < len(tokens):
        kind, name = take()
        if kind != "word":
            raise JaasError(f"Invalid JAAS config for {setting}: Login module not specified in JAAS config")
        kind, flag = take()
        if kind != "word" or flag.lower() not in CONTROL_FLAGS:
            raise JaasError(f"Invalid JAAS config for {setting}: Invalid control flag {flag}")
        options: dict[str, str] = {}
        while True:
            kind, key = take()
            if (kind, key) == ("char", ";"):
                break
            if kind != "word":
                raise JaasError(f"Invalid JAAS config for {setting}: Unexpected token {key!r}")
            kind, eq = take()
            if (kind, eq) != ("char", "="):
                raise JaasError(f"Invalid JAAS config for {setting}: Value not specified for key {key}")
            kind, value = take()
            if kind == "char":
                raise JaasError(f"Invalid JAAS config for {setting}: Value not specified for key {key}")
            options[key] = value
        modules.append(LoginModule(name, flag.lower(), options))
    if len(modules) != 1:
        raise JaasError(f"JAAS config property contains {len(modules)} login modules, should be 1 module")
    return modules[0]
