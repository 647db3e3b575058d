"""The client halves of the SASL mechanisms (protocol/sasl_client.py)."""

from __future__ import annotations

import base64
import json

import pytest

from protocol.sasl_client import OAuthBearerClient, PlainClient, SaslClientError, ScramClient, unsecured_token


def test_plain_message():
    assert PlainClient("alice", "s3cret").first() == b"\0alice\0s3cret"


def test_scram_sha_256_against_rfc_7677s_example():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.next(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    assert client.next(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None


def test_scram_refuses_a_server_that_does_not_know_the_password_or_another_nonce():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    client.next(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    with pytest.raises(SaslClientError, match="signature is wrong"):
        client.next(b"v=" + base64.b64encode(b"x" * 32))
    with pytest.raises(SaslClientError, match="nonce"):
        ScramClient("SCRAM-SHA-512", "u", "p", nonce="abc").next(b"r=xyz,s=AAAA,i=4096")
    with pytest.raises(SaslClientError, match="malformed"):
        ScramClient("SCRAM-SHA-512", "u", "p").next(b"garbage")


def test_user_names_escaped_as_rfc_5802_says():
    assert ScramClient("SCRAM-SHA-512", "a=b,c", "p", nonce="n").first() == b"n,,n=a=3Db=2Cc,r=n"


def test_oauthbearer_message_and_unsecured_token():
    token = unsecured_token("alice", lifetime_s=60, now=1000.0)
    header, claims, signature = token.split(".")
    pad = lambda s: s + "=" * (-len(s) % 4)  # noqa: E731
    assert json.loads(base64.urlsafe_b64decode(pad(header))) == {"alg": "none"}
    assert json.loads(base64.urlsafe_b64decode(pad(claims))) == {"sub": "alice", "iat": 1000, "exp": 1060.0}
    assert signature == ""
    client = OAuthBearerClient(token)
    assert client.first() == f"n,,\x01auth=Bearer {token}\x01\x01".encode()
    assert client.next(b"") is None
    assert client.next(b'{"status":"invalid_token"}') == b"\x01"  # RFC 7628: the client's dummy answer
