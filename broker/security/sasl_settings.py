"""What a SASL listener accepts, read from Kafka's settings as Kafka reads them: a setting
under ``listener.name.<listener>.<mechanism>.`` wins over one under
``listener.name.<listener>.``, which wins over the bare name. Checked at start, with
Kafka's messages where Kafka refuses the same thing.

The users come from each mechanism's ``sasl.jaas.config`` (PLAIN: ``user_<name>``
options; OAUTHBEARER: the unsecured validator's options) and, for SCRAM, from the
credentials AlterUserScramCredentials or ``serve --scram`` stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from broker.kafka_settings import KAFKA_BROKER_SETTINGS, LISTENER_PREFIX, parse_value
from broker.security import oauthbearer, plain, scram
from broker.security.jaas import JaasError, parse_jaas

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
DEFAULT_PRINCIPAL_BUILDER = "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"
UNSECURED_VALIDATOR = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                       "OAuthBearerUnsecuredValidatorCallbackHandler")
# Kafka's validator of signed tokens (its 3.x name under .secured too)
JWKS_VALIDATORS = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
                   "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler")
_LOGIN_MODULES = {"PLAIN": plain.LOGIN_MODULE, "SCRAM-SHA-256": scram.LOGIN_MODULE,
                  "SCRAM-SHA-512": scram.LOGIN_MODULE, "OAUTHBEARER": oauthbearer.LOGIN_MODULE}


class SaslConfigError(ValueError):
    """SASL settings that cannot be served (Kafka's message where Kafka refuses them too)."""


def setting(values: dict[str, str], name: str, listener: str | None = None, mechanism: str | None = None,
            only_under_mechanism: bool = False) -> Any:
    """The typed value of Kafka setting ``name`` for a listener and mechanism, as
    Kafka's valuesWithPrefixOverride finds it; Kafka's default when none is given.
    ``only_under_mechanism``: read only ``listener.name.<listener>.<mechanism>.<name>``."""
    by_lower = {key.lower(): value for key, value in values.items()}
    keys = []
    if listener is not None:
        prefix = f"{LISTENER_PREFIX}{listener.lower()}."
        if mechanism is not None:
            keys.append(f"{prefix}{mechanism.lower()}.{name}")
        if not only_under_mechanism:
            keys.append(prefix + name)
    if name != "sasl.jaas.config" and not only_under_mechanism:  # a broker reads JAAS text only under a prefix
        keys.append(name)
    for key in keys:
        if key in by_lower:
            return parse_value(name, by_lower[key])
    default = KAFKA_BROKER_SETTINGS[name].default
    return None if default is None else parse_value(name, default)


@dataclass(slots=True)
class ListenerSasl:
    """One SASL listener's mechanisms and limits."""

    listener: str
    mechanisms: tuple[str, ...]  # enabled, as the handshake answer lists them
    servers: dict[str, Callable[[], Any]] = field(default_factory=dict)  # mechanism -> a new mechanism server
    max_reauth_ms: dict[str, int] = field(default_factory=dict)  # mechanism -> connections.max.reauth.ms
    failed_delay_ms: int = 100  # connection.failed.authentication.delay.ms
    max_receive_size: int = 524288  # sasl.server.max.receive.size: the largest frame before authentication


def check_principal_builder(values: dict[str, str]) -> None:
    name = setting(values, "principal.builder.class")
    if name not in (None, DEFAULT_PRINCIPAL_BUILDER):
        raise SaslConfigError(f"principal.builder.class: eosbroker builds principals as Kafka's "
                              f"{DEFAULT_PRINCIPAL_BUILDER} does and cannot load {name}")


def listener_sasl(values: dict[str, str], listener: str, credentials) -> ListenerSasl:
    """The SASL set-up of ``listener`` from the Kafka settings ``values`` (raw text by
    name); ``credentials`` is the broker's SCRAM store. SaslConfigError if it cannot be served."""
    enabled = [m.strip() for m in setting(values, "sasl.enabled.mechanisms", listener) if m.strip()]
    if not enabled:
        raise SaslConfigError(f"No SASL mechanisms are enabled for listener {listener} (sasl.enabled.mechanisms)")
    unknown = [m for m in enabled if m not in SUPPORTED_MECHANISMS]
    if unknown:
        raise SaslConfigError(
            f"listener {listener}: SASL mechanism {unknown[0]} is not served by eosbroker (sasl.enabled.mechanisms"
            f"{' defaults to GSSAPI' if unknown == ['GSSAPI'] and len(enabled) == 1 else ''}); "
            f"enable some of {', '.join(SUPPORTED_MECHANISMS)}")
    out = ListenerSasl(listener, tuple(dict.fromkeys(enabled)),
                       failed_delay_ms=setting(values, "connection.failed.authentication.delay.ms", listener),
                       max_receive_size=setting(values, "sasl.server.max.receive.size", listener))
    for mechanism in out.mechanisms:
        out.max_reauth_ms[mechanism] = setting(values, "connections.max.reauth.ms", listener, mechanism)
        # Kafka's SaslChannelBuilder looks for it under the mechanism's prefix only: elsewhere it is let be
        handler = setting(values, "sasl.server.callback.handler.class", listener, mechanism, only_under_mechanism=True)
        if handler is not None and not (mechanism == "OAUTHBEARER" and handler in (UNSECURED_VALIDATOR,
                                                                                   *JWKS_VALIDATORS)):
            raise SaslConfigError(f"listener {listener}: sasl.server.callback.handler.class {handler} for "
                                  f"{mechanism}: eosbroker has only Kafka's default callback handlers")
        jaas_text = setting(values, "sasl.jaas.config", listener, mechanism)
        if jaas_text is None:
            raise SaslConfigError(
                f"Could not find a '{listener.lower()}.KafkaServer' or 'KafkaServer' entry in the JAAS configuration "
                f"for SASL mechanism {mechanism}: set listener.name.{listener.lower()}.{mechanism.lower()}"
                ".sasl.jaas.config")
        try:
            module = parse_jaas(jaas_text, f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config")
        except JaasError as e:
            raise SaslConfigError(str(e)) from None
        if module.name != _LOGIN_MODULES[mechanism]:
            raise SaslConfigError(f"listener {listener}: the JAAS login module for {mechanism} is {module.name}; "
                                  f"eosbroker reads {_LOGIN_MODULES[mechanism]}")
        if handler in JWKS_VALIDATORS:
            out.servers[mechanism] = _jwks_server_factory(values, listener)
        else:
            out.servers[mechanism] = _server_factory(mechanism, module.options, credentials)
    return out


_NEEDS_JWKS = ('The OAuth validator for the broker requires "sasl.oauthbearer.jwks.endpoint.url" to be configured '
               'so that JWT signatures can be verified, but it was not set. Set "sasl.oauthbearer.jwks.endpoint.url" '
               "to the OAuth/OIDC provider's JWKS endpoint URL for this listener, or configure a signature-verifying "
               '"sasl.oauthbearer.jwt.validator.class".')
_NEEDS_CLAIM = ('The OAuth validator for the broker requires "{expected}" to be configured so that the '
                'token\'s {claim} claim can be verified, but it was not set. Set "{expected}" to {what}, '
                'or set "{allow}" to true to accept tokens regardless of {regardless}.')


def _jwks_server_factory(values: dict[str, str], listener: str) -> Callable[[], Any]:
    from broker.security.jwks import JwksError, JwksValidator, load_keys

    def read(name: str):
        return setting(values, name, listener, "OAUTHBEARER")

    url = read("sasl.oauthbearer.jwks.endpoint.url")
    if url is None:
        raise SaslConfigError(_NEEDS_JWKS)
    # Kafka 4.4 starts no such listener that would accept any audience or issuer unless told to
    audience = [a.strip() for a in read("sasl.oauthbearer.expected.audience") or [] if a.strip()]
    if not audience and not read("sasl.oauthbearer.allow.unverified.audience"):
        raise SaslConfigError(_NEEDS_CLAIM.format(
            claim='audience ("aud")', expected="sasl.oauthbearer.expected.audience",
            what="the audience(s) that identify this cluster", allow="sasl.oauthbearer.allow.unverified.audience",
            regardless="their audience"))
    issuer = (read("sasl.oauthbearer.expected.issuer") or "").strip() or None
    if issuer is None and not read("sasl.oauthbearer.allow.unverified.issuer"):
        raise SaslConfigError(_NEEDS_CLAIM.format(
            claim='issuer ("iss")', expected="sasl.oauthbearer.expected.issuer",
            what="the issuer URL of the OAuth/OIDC provider that signs the tokens",
            allow="sasl.oauthbearer.allow.unverified.issuer", regardless="their issuer"))
    try:
        keys = load_keys(url)
    except JwksError as e:
        raise SaslConfigError(str(e)) from None
    except ImportError:
        raise SaslConfigError("checking signed OAUTHBEARER tokens needs the cryptography package") from None
    validator = JwksValidator(keys, read("sasl.oauthbearer.sub.claim.name"), read("sasl.oauthbearer.clock.skew.seconds"),
                              audience, issuer, read("sasl.oauthbearer.scope.claim.name"))
    return lambda: oauthbearer.OAuthBearerServer(validator)


def _server_factory(mechanism: str, options: dict[str, str], credentials) -> Callable[[], Any]:
    if mechanism == "PLAIN":
        users = plain.users_of(options)
        return lambda: plain.PlainServer(users)
    if mechanism in scram.MECHANISMS:
        return lambda: scram.ScramServer(mechanism, credentials)
    try:
        validator = oauthbearer.UnsecuredValidator(options)
    except ValueError as e:
        raise SaslConfigError(str(e)) from None
    return lambda: oauthbearer.OAuthBearerServer(validator)
