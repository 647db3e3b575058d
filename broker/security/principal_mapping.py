"""``ssl.principal.mapping.rules``: how a client certificate's subject becomes a user name,
with Kafka's rule syntax and semantics (its SslPrincipalMapper).

    DEFAULT                          the subject as it is (RFC 2253: CN=alice,OU=...,O=...)
    RULE:pattern/replacement/[L|U]   when the pattern matches the whole subject, the subject
                                     with the pattern replaced (Java's replaceAll: $1 for a
                                     group, backslash escapes), lower or upper cased by L/U

Rules are separated by commas (a pattern may contain commas) and tried in order; the
first that matches names the user. None matching is an error (the connection is closed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Kafka's rule grammar: DEFAULT, or RULE:pattern/replacement/flags, or anything else
# (which then fails to parse as a whole)
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_PARSER = re.compile(_RULE)


class PrincipalMappingError(ValueError):
    """A rule that does not parse (at start), or a subject no rule applies to."""


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str = ""
    lower: bool = False
    upper: bool = False

    def apply(self, subject: str) -> str | None:
        if self.pattern is None:
            return subject
        match = self.pattern.fullmatch(subject)
        if match is None:
            return None
        groups = self.pattern.groups
        result = self.pattern.sub(lambda m: _java_replacement(self.replacement, m, groups), subject)
        if self.lower:
            return result.lower()
        if self.upper:
            return result.upper()
        return result

    def text(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        return f"RULE:{self.pattern.pattern}/{self.replacement}/{'L' if self.lower else 'U' if self.upper else ''}"


def _java_replacement(replacement: str, match: re.Match, group_count: int) -> str:
    """What Java's Matcher.appendReplacement makes of ``replacement`` (Kafka first escapes
    a ``$n`` naming no group, so it stays literal)."""
    out = []
    i = 0
    while i < len(replacement):
        ch = replacement[i]
        if ch == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
        elif ch == "$" and i + 1 < len(replacement) and replacement[i + 1] == "{":
            end = replacement.find("}", i + 2)
            if end < 0:
                raise PrincipalMappingError(f"named capturing group is missing trailing '}}' in {replacement!r}")
            out.append(match.group(replacement[i + 2:end]) or "")
            i = end + 1
        elif ch == "\\" or (ch == "$" and i + 1 == len(replacement)):
            raise PrincipalMappingError(f"Illegal replacement {replacement!r}: "
                                        + ("character to be escaped is missing" if ch == "\\"
                                           else "group index is missing"))
        elif ch == "$" and not replacement[i + 1].isdigit():
            raise PrincipalMappingError(f"Illegal group reference in {replacement!r}")
        elif ch == "$" and group_count == 0 and replacement[i + 1] != "0":
            raise PrincipalMappingError(f"No group {replacement[i + 1]} in the pattern for {replacement!r}")
        elif ch == "$" and int(replacement[i + 1]) <= group_count:
            number = int(replacement[i + 1])
            i += 2
            # more digits while they still name a group, as Java reads them
            while i < len(replacement) and replacement[i].isdigit() and number * 10 + int(replacement[i]) <= group_count:
                number = number * 10 + int(replacement[i])
                i += 1
            out.append(match.group(number) or "")
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def parse_rules(text: str) -> list[Rule]:
    """The rules of an ``ssl.principal.mapping.rules`` value; PrincipalMappingError with
    Kafka's message for one that does not parse."""
    rules = []
    for found in _SPLITTER.finditer(text.strip()):
        rule = found.group(1)
        parsed = _PARSER.match(rule)
        if parsed.end() != len(rule):
            raise PrincipalMappingError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[parsed.end():]}`")
        if parsed.group(1) is not None:
            rules.append(Rule(None))
        elif parsed.group(2) is not None:
            try:
                pattern = re.compile(parsed.group(2))
            except re.error as e:
                raise PrincipalMappingError(f"Invalid rule: `{rule}`: {e}") from None
            flag = parsed.group(6)
            rules.append(Rule(pattern, parsed.group(4), flag == "L", flag == "U"))
    return rules


@dataclass(frozen=True)
class PrincipalMapper:
    rules: tuple[Rule, ...]

    @classmethod
    def from_setting(cls, text: str = "DEFAULT") -> "PrincipalMapper":
        return cls(tuple(parse_rules(text)))

    def name(self, subject: str) -> str:
        """The user name for a certificate subject (RFC 2253)."""
        for rule in self.rules:
            name = rule.apply(subject)
            if name is not None:
                return name
        raise PrincipalMappingError(f"No rules apply to {subject}, rules [{', '.join(r.text() for r in self.rules)}]")
