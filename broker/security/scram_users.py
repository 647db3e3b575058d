"""SCRAM users created at start, written as Kafka's ``kafka-storage format --add-scram``
takes them:

    SCRAM-SHA-256=[name=alice,password=alice-secret]
    SCRAM-SHA-512=[name=bob,iterations=8192,salt="MWx...",saltedpassword="mT0..."]

(salt and saltedpassword in base64; iterations default to 4096, the salt to a random one).
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets

from broker.security.scram_credentials import MAX_ITERATIONS, MIN_ITERATIONS
from broker.security.scram import MECHANISMS, salted_password

_ENTRY = re.compile(r"\s*(?P<mechanism>[A-Z0-9-]+)=\[(?P<fields>.*)\]\s*", re.S)


class ScramUserError(ValueError):
    pass


def parse_scram_user(text: str) -> tuple[str, int, int, bytes, bytes]:
    """(user, mechanism id, iterations, salt, salted password), as AlterUserScramCredentials
    upserts them; ScramUserError for text kafka-storage would refuse."""
    match = _ENTRY.fullmatch(text)
    if match is None:
        raise ScramUserError(f"--scram {text!r}: expected MECHANISM=[name=...,password=...]")
    mechanism = match["mechanism"]
    if mechanism not in MECHANISMS:
        raise ScramUserError(f"--scram {text!r}: the mechanism must be one of {', '.join(MECHANISMS)}")
    fields: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in match["fields"].split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ScramUserError(f"--scram {text!r}: {item!r} is not key=value")
        fields[key.strip().lower()] = value.strip().strip('"')
    name = fields.get("name")
    if not name:
        raise ScramUserError(f"--scram {text!r}: you must supply 'name' to add-scram")
    try:
        iterations = int(fields.get("iterations", MIN_ITERATIONS))
        salt = base64.b64decode(fields["salt"], validate=True) if "salt" in fields else secrets.token_bytes(32)
        if "saltedpassword" in fields:
            if "salt" not in fields:
                raise ScramUserError(f"--scram {text!r}: you must supply 'salt' with 'saltedpassword' to add-scram")
            salted = base64.b64decode(fields["saltedpassword"], validate=True)
        elif "password" in fields:
            salted = salted_password(mechanism, fields["password"], salt, iterations)
        else:
            raise ScramUserError(f"--scram {text!r}: you must supply one of 'password' or 'saltedpassword' "
                                 "to add-scram")
    except (ValueError, binascii.Error) as e:
        if isinstance(e, ScramUserError):
            raise
        raise ScramUserError(f"--scram {text!r}: {e}") from None
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ScramUserError(f"--scram {text!r}: iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
    return name, MECHANISMS[mechanism][0], iterations, salt, salted
