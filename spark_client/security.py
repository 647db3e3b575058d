"""TLS and SASL for the data source, under Spark's Kafka connector option names:

    kafka.security.protocol                  PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    kafka.sasl.mechanism                     PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER
    kafka.sasl.jaas.config                   the login module: username and password (PLAIN,
                                             SCRAM), unsecuredLoginStringClaim_sub (OAUTHBEARER)
    kafka.ssl.truststore.location/type/password, kafka.ssl.truststore.certificates
    kafka.ssl.keystore.location/type/password, kafka.ssl.key.password,
    kafka.ssl.keystore.certificate.chain, kafka.ssl.keystore.key   (mTLS)
    kafka.ssl.endpoint.identification.algorithm   https (the default) or empty

Stores are PEM or PKCS12; a JKS store is refused with the keytool command that converts it.
Parsed and checked on the driver (``ClientSecurity.parse``, files read and passwords tried)
before any task starts; the executors, which get the parsed value, build the same TLS
context from the same paths.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
STORE_TYPES = ("PEM", "PKCS12")
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}
SECURITY_OPTIONS = (
    "kafka.security.protocol", "kafka.sasl.mechanism", "kafka.sasl.jaas.config",
    "kafka.ssl.truststore.location", "kafka.ssl.truststore.type", "kafka.ssl.truststore.password",
    "kafka.ssl.truststore.certificates",
    "kafka.ssl.keystore.location", "kafka.ssl.keystore.type", "kafka.ssl.keystore.password",
    "kafka.ssl.key.password", "kafka.ssl.keystore.certificate.chain", "kafka.ssl.keystore.key",
    "kafka.ssl.endpoint.identification.algorithm",
)
_JKS_MAGIC = b"\xfe\xed\xfe\xed"


class SecurityOptionError(ValueError):
    """A security option the data source cannot use, said before anything runs."""


def _get(options: Mapping[str, str], name: str) -> str | None:
    for key, value in options.items():
        if key.lower() == name:
            return value
    return None


@dataclass(frozen=True, slots=True)
class Store:
    """A trust or key store: a file (``location``) or PEM text given as the option's value."""

    kind: str  # PEM or PKCS12
    location: str | None = None
    password: str | None = None
    key_password: str | None = None
    pem_certificates: str | None = None  # PEM given as values
    pem_key: str | None = None


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    oauth_subject: str | None = None
    truststore: Store | None = None
    keystore: Store | None = None
    check_hostname: bool = True

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL")

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "ClientSecurity":
        protocol = (_get(options, "kafka.security.protocol") or "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise SecurityOptionError(f"kafka.security.protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
        tls_given = [n for n in SECURITY_OPTIONS if n.startswith("kafka.ssl.") and _get(options, n) is not None]
        sasl_given = [n for n in ("kafka.sasl.mechanism", "kafka.sasl.jaas.config") if _get(options, n) is not None]
        if tls_given and protocol not in ("SSL", "SASL_SSL"):
            raise SecurityOptionError(f"{', '.join(tls_given)} given with kafka.security.protocol={protocol}, which "
                                      f"does not use TLS: set kafka.security.protocol to SSL or SASL_SSL")
        if sasl_given and not protocol.startswith("SASL"):
            raise SecurityOptionError(f"{', '.join(sasl_given)} given with kafka.security.protocol={protocol}, which "
                                      f"does not use SASL: set kafka.security.protocol to SASL_SSL or SASL_PLAINTEXT")
        fields: dict = {"protocol": protocol}
        if protocol.startswith("SASL"):
            fields.update(_parse_sasl(options))
        if protocol in ("SSL", "SASL_SSL"):
            fields.update(_parse_tls(options))
        security = cls(**fields)
        if security.tls:
            security.ssl_context()  # files read, passwords tried: a mistake fails here, on the driver
        return security

    def ssl_context(self) -> ssl.SSLContext:
        """The truststore's certificates only when one is given (as Kafka's clients trust
        it alone), else the system's (a cloud cluster's public certificate)."""
        if self.truststore is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            _load_trust(context, self.truststore)
        else:
            context = ssl.create_default_context()
        context.check_hostname = self.check_hostname
        if self.keystore is not None:
            _load_keys(context, self.keystore)
        return context


def _parse_sasl(options: Mapping[str, str]) -> dict:
    from broker.security.jaas import JaasError, parse_jaas

    mechanism = _get(options, "kafka.sasl.mechanism")
    if mechanism is None:
        raise SecurityOptionError("kafka.sasl.mechanism is not set, and Kafka's default, GSSAPI (Kerberos), is not "
                                  f"spoken by the eosbroker data source: set one of {', '.join(MECHANISMS)}")
    mechanism = mechanism.upper()
    if mechanism not in MECHANISMS:
        raise SecurityOptionError(f"kafka.sasl.mechanism must be one of {', '.join(MECHANISMS)}, not {mechanism!r}")
    jaas = _get(options, "kafka.sasl.jaas.config")
    if not jaas:
        raise SecurityOptionError(f"kafka.sasl.mechanism={mechanism} needs kafka.sasl.jaas.config, e.g. "
                                  f'{LOGIN_MODULES[mechanism]} required username="..." password="...";')
    try:
        module = parse_jaas(jaas, "kafka.sasl.jaas.config")
    except JaasError as e:
        raise SecurityOptionError(str(e)) from None
    if module.name != LOGIN_MODULES[mechanism]:
        raise SecurityOptionError(f"kafka.sasl.mechanism={mechanism} logs in with {LOGIN_MODULES[mechanism]}, "
                                  f"but kafka.sasl.jaas.config names {module.name}")
    if mechanism == "OAUTHBEARER":
        subject = module.options.get("unsecuredLoginStringClaim_sub")
        if not subject:
            raise SecurityOptionError(
                "OAUTHBEARER: the eosbroker data source logs in with Kafka's unsecured tokens only; "
                "kafka.sasl.jaas.config needs unsecuredLoginStringClaim_sub=\"<principal>\" "
                "(token endpoints and login callback handlers are not supported)")
        return {"mechanism": mechanism, "oauth_subject": subject}
    missing = [k for k in ("username", "password") if not module.options.get(k)]
    if missing:
        raise SecurityOptionError(f"kafka.sasl.jaas.config for {mechanism} needs {' and '.join(missing)}")
    return {"mechanism": mechanism, "username": module.options["username"], "password": module.options["password"]}


def _store_kind(option: str, given: str | None, location: str | None) -> str:
    """PEM or PKCS12, from the type option or, without it, from the file's first bytes."""
    head = b""
    if location is not None:
        try:
            with open(location, "rb") as f:
                head = f.read(4)
        except OSError as e:
            raise SecurityOptionError(f"{option}.location={location!r} cannot be read: {e.strerror}") from None
    kind = (given or "").upper()
    if kind == "JKS" or head == _JKS_MAGIC:
        target = (location or "store.jks").rsplit(".", 1)[0] + ".p12"
        raise SecurityOptionError(
            f"{option}: JKS stores are not supported by the eosbroker data source (Python reads PEM and PKCS12); "
            f"convert it with: keytool -importkeystore -srckeystore {location or 'STORE.jks'} -destkeystore {target} "
            f"-deststoretype PKCS12, then set {option}.location={target} and {option}.type=PKCS12")
    if kind:
        if kind not in STORE_TYPES:
            raise SecurityOptionError(f"{option}.type must be PEM or PKCS12, not {given!r}")
        return kind
    return "PEM" if head.startswith(b"----") or location is None else "PKCS12"


def _parse_tls(options: Mapping[str, str]) -> dict:
    out: dict = {}
    algorithm = _get(options, "kafka.ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        if algorithm.strip().lower() not in ("", "https"):
            raise SecurityOptionError("kafka.ssl.endpoint.identification.algorithm must be https or empty "
                                      f"(no host name check), not {algorithm!r}")
        out["check_hostname"] = algorithm.strip().lower() == "https"
    trust_location = _get(options, "kafka.ssl.truststore.location")
    trust_pem = _get(options, "kafka.ssl.truststore.certificates")
    if trust_location or trust_pem:
        if trust_location and trust_pem:
            raise SecurityOptionError("give kafka.ssl.truststore.location or kafka.ssl.truststore.certificates, not both")
        kind = _store_kind("kafka.ssl.truststore", _get(options, "kafka.ssl.truststore.type"), trust_location)
        if trust_pem and kind != "PEM":
            raise SecurityOptionError("kafka.ssl.truststore.certificates is PEM text: kafka.ssl.truststore.type=PEM")
        out["truststore"] = Store(kind, trust_location, _get(options, "kafka.ssl.truststore.password"),
                                  pem_certificates=trust_pem)
    key_location = _get(options, "kafka.ssl.keystore.location")
    chain = _get(options, "kafka.ssl.keystore.certificate.chain")
    key = _get(options, "kafka.ssl.keystore.key")
    if key_location or chain or key:
        if key_location and (chain or key):
            raise SecurityOptionError("give kafka.ssl.keystore.location or kafka.ssl.keystore.certificate.chain and "
                                      "kafka.ssl.keystore.key, not both")
        if not key_location and not (chain and key):
            raise SecurityOptionError("kafka.ssl.keystore.certificate.chain and kafka.ssl.keystore.key go together")
        kind = _store_kind("kafka.ssl.keystore", _get(options, "kafka.ssl.keystore.type"), key_location)
        if chain and kind != "PEM":
            raise SecurityOptionError("kafka.ssl.keystore.certificate.chain and .key are PEM text: "
                                      "kafka.ssl.keystore.type=PEM")
        out["keystore"] = Store(kind, key_location, _get(options, "kafka.ssl.keystore.password"),
                                _get(options, "kafka.ssl.key.password"), chain, key)
    elif _get(options, "kafka.ssl.keystore.password") or _get(options, "kafka.ssl.key.password"):
        raise SecurityOptionError("kafka.ssl.keystore.password given without kafka.ssl.keystore.location")
    return out


def _pkcs12(store: Store, option: str):
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        with open(store.location, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SecurityOptionError(f"{option}.location={store.location!r} cannot be read: {e.strerror}") from None
    password = store.password.encode() if store.password else None
    try:
        return pkcs12.load_pkcs12(data, password)
    except ValueError:
        raise SecurityOptionError(f"{option}.location={store.location!r}: not a PKCS12 store, or "
                                  f"{option}.password is wrong") from None


def _pem(obj) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return obj.public_bytes(serialization.Encoding.PEM)


def _load_trust(context: ssl.SSLContext, store: Store) -> None:
    option = "kafka.ssl.truststore"
    try:
        if store.kind == "PKCS12":
            loaded = _pkcs12(store, option)
            certificates = [c.certificate for c in loaded.additional_certs]
            if loaded.cert is not None:
                certificates.append(loaded.cert.certificate)
            if not certificates:
                raise SecurityOptionError(f"{option}.location={store.location!r} holds no certificate")
            context.load_verify_locations(cadata="".join(_pem(c).decode() for c in certificates))
        elif store.pem_certificates is not None:
            context.load_verify_locations(cadata=store.pem_certificates)
        else:
            context.load_verify_locations(cafile=store.location)
    except ssl.SSLError as e:
        raise SecurityOptionError(f"{option}: no usable PEM certificates ({e.reason or e})") from None


def _load_keys(context: ssl.SSLContext, store: Store) -> None:
    """Python's ssl reads a client certificate and key from files only: a PKCS12 store or
    PEM values go through a private temporary file, removed at once."""
    from cryptography.hazmat.primitives import serialization

    option = "kafka.ssl.keystore"
    if store.kind == "PEM" and store.location is not None:
        pem, password = None, store.key_password or store.password
    elif store.kind == "PEM":
        pem, password = (store.pem_key.strip() + "\n" + store.pem_certificates.strip() + "\n").encode(), store.key_password
    else:
        loaded = _pkcs12(store, option)
        if loaded.key is None or loaded.cert is None:
            raise SecurityOptionError(f"{option}.location={store.location!r} holds no private key with its certificate")
        pem = loaded.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())
        pem += _pem(loaded.cert.certificate) + b"".join(_pem(c.certificate) for c in loaded.additional_certs)
        password = None
    try:
        if pem is None:
            context.load_cert_chain(store.location, password=password)
            return
        fd, path = tempfile.mkstemp(prefix="eosbroker-spark-key-", suffix=".pem")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(pem)
            context.load_cert_chain(path, password=password)
        finally:
            os.unlink(path)
    except ssl.SSLError as e:
        raise SecurityOptionError(f"{option}: the key and certificate cannot be used ({e.reason or e}); "
                                  f"is kafka.ssl.key.password right?") from None
