"""Security set-ups for tests: what a listener serves (PLAINTEXT, SSL, mTLS, SASL_PLAINTEXT
or SASL_SSL with a mechanism), the broker settings that serve it (Kafka's names, so Apache
Kafka takes them too) and ready client settings for confluent-kafka, kafka-python,
aiokafka, the Java client and the Spark data source, for the users alice, bob and admin.

    security = Security.of("SASL_SSL", "SCRAM-SHA-512", certs_dir=tmp_path / "certs")
    Producer({"bootstrap.servers": broker.bootstrap_servers, **security.confluent_kafka("alice")})
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from broker.testing.helpers import HOST, free_port_block
from broker.testing.process import BrokerProcess
from protocol.sasl_client import unsecured_token

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
# Client certificates' subjects (CN=alice,OU=clients,O=...) map to their common name.
PRINCIPAL_MAPPING = "RULE:^CN=([^,]*),OU=clients,.*$/$1/,DEFAULT"
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sasl_listener_settings(listener: str, mechanisms=MECHANISMS, users=USERS) -> dict[str, str]:
    """A SASL listener's broker settings: the mechanisms enabled, PLAIN's users in its JAAS
    text, SCRAM's and OAUTHBEARER's (unsecured validator) login modules. SCRAM users are
    made at start (``scram_users``)."""
    prefix = f"listener.name.{listener.lower()}."
    out = {prefix + "sasl.enabled.mechanisms": ",".join(mechanisms)}
    for mechanism in mechanisms:
        options = ""
        if mechanism == "PLAIN":
            options = " ".join(f"user_{u}={_quote(p)}" for u, p in users.items())
            options = f'username="admin" password={_quote(users["admin"])} {options}'
        elif mechanism == "OAUTHBEARER":
            options = 'unsecuredLoginStringClaim_sub="admin"'
        out[f"{prefix}{mechanism.lower()}.sasl.jaas.config"] = f"{LOGIN_MODULES[mechanism]} required {options};"
    return out


def scram_users(mechanisms=MECHANISMS, users=USERS) -> list[str]:
    """``--scram`` / ``kafka-storage format --add-scram`` entries for every SCRAM mechanism."""
    return [f"{m}=[name={u},password={p}]" for m in mechanisms if m.startswith("SCRAM") for u, p in users.items()]


@dataclass(frozen=True)
class Security:
    """One listener's security: ``protocol``, the SASL ``mechanism`` (SASL_* only),
    ``client_auth`` (SSL: client certificates required, the principal their mapped CN)
    and ``certs`` (broker.security.certs.Certificates, for the TLS protocols)."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    client_auth: bool = False
    certs: object = None
    users: dict[str, str] = field(default_factory=lambda: dict(USERS))

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"security protocol {self.protocol!r}: one of {', '.join(PROTOCOLS)}")
        if self.sasl != (self.mechanism is not None):
            raise ValueError(f"{self.protocol} {'needs' if self.sasl else 'takes no'} SASL mechanism")
        if self.mechanism is not None and self.mechanism not in MECHANISMS:
            raise ValueError(f"SASL mechanism {self.mechanism!r}: one of {', '.join(MECHANISMS)}")
        if self.client_auth and self.protocol != "SSL":
            raise ValueError("client certificates (mTLS) go with the SSL protocol")
        if self.tls and self.certs is None:
            raise ValueError(f"{self.protocol} needs certificates (broker.security.certs.write_certificates)")

    @classmethod
    def of(cls, spec: str, mechanism: str | None = None, certs_dir: Path | None = None) -> "Security":
        """``spec``: PLAINTEXT, SSL, MTLS, SASL_PLAINTEXT or SASL_SSL (any case); certificates
        for alice, bob and admin are written into ``certs_dir`` for the TLS ones."""
        protocol = spec.upper()
        client_auth = protocol == "MTLS"
        protocol = "SSL" if client_auth else protocol
        certs = None
        if protocol in ("SSL", "SASL_SSL"):
            if certs_dir is None:
                raise ValueError(f"{spec} needs a directory for its certificates")
            from broker.security.certs import write_certificates

            certs = write_certificates(certs_dir, clients=tuple(USERS))
        return cls(protocol, mechanism and mechanism.upper(), client_auth, certs)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL")

    @property
    def name(self) -> str:
        """The listener's name: its protocol, or MTLS."""
        return "MTLS" if self.client_auth else self.protocol

    # -- the broker side ----------------------------------------------------------

    def broker_settings(self, listener: str | None = None) -> dict[str, str]:
        """Settings serving this security on ``listener`` (default: ``name``); the listener
        itself and its protocol in listener.security.protocol.map are the caller's."""
        listener = listener or self.name
        out: dict[str, str] = {}
        if self.tls:
            out.update(self.certs.broker_settings(listener, "PKCS12", "required" if self.client_auth else "none"))
            out["ssl.principal.mapping.rules"] = PRINCIPAL_MAPPING
        if self.sasl:
            out.update(sasl_listener_settings(listener, (self.mechanism,), self.users))
        return out

    def scram_users(self) -> list[str]:
        return scram_users((self.mechanism,), self.users) if self.sasl else []

    # -- the clients ----------------------------------------------------------------

    def _check_user(self, user: str | None) -> None:
        if (self.sasl or self.client_auth) and user not in self.users:
            raise ValueError(f"{self.name} logs in as one of {', '.join(self.users)}, not {user!r}")

    def confluent_kafka(self, user: str | None = "alice") -> dict[str, object]:
        self._check_user(user)
        out: dict[str, object] = {"security.protocol": self.protocol}
        if self.tls:
            out.update(self.certs.confluent_kafka(user if self.client_auth else None, self.protocol))
        if self.mechanism == "OAUTHBEARER":
            out.update({"sasl.mechanism": self.mechanism, "enable.sasl.oauthbearer.unsecure.jwt": True,
                        "sasl.oauthbearer.config": f"principal={user}"})
        elif self.sasl:
            out.update({"sasl.mechanism": self.mechanism, "sasl.username": user, "sasl.password": self.users[user]})
        return out

    def kafka_python(self, user: str | None = "alice") -> dict[str, object]:
        self._check_user(user)
        out: dict[str, object] = {"security_protocol": self.protocol}
        if self.tls:
            out.update(self.certs.kafka_python(user if self.client_auth else None, self.protocol))
        if self.mechanism == "OAUTHBEARER":
            out.update({"sasl_mechanism": self.mechanism, "sasl_oauth_token_provider": _kafka_python_tokens(user)})
        elif self.sasl:
            out.update({"sasl_mechanism": self.mechanism, "sasl_plain_username": user,
                        "sasl_plain_password": self.users[user]})
        return out

    def aiokafka(self, user: str | None = "alice") -> dict[str, object]:
        self._check_user(user)
        out: dict[str, object] = {"security_protocol": self.protocol}
        if self.tls:
            out.update(self.certs.aiokafka(user if self.client_auth else None, self.protocol))
        if self.mechanism == "OAUTHBEARER":
            out.update({"sasl_mechanism": self.mechanism, "sasl_oauth_token_provider": _aiokafka_tokens(user)})
        elif self.sasl:
            out.update({"sasl_mechanism": self.mechanism, "sasl_plain_username": user,
                        "sasl_plain_password": self.users[user]})
        return out

    def jaas_config(self, user: str) -> str:
        if self.mechanism == "OAUTHBEARER":
            return f'{LOGIN_MODULES[self.mechanism]} required unsecuredLoginStringClaim_sub={_quote(user)};'
        return f"{LOGIN_MODULES[self.mechanism]} required username={_quote(user)} password={_quote(self.users[user])};"

    def java(self, user: str | None = "alice") -> dict[str, str]:
        """The Java client's settings (Kafka's names)."""
        self._check_user(user)
        out = {"security.protocol": self.protocol}
        if self.tls:
            out.update(self.certs.java(user if self.client_auth else None, self.protocol))
        if self.sasl:
            out.update({"sasl.mechanism": self.mechanism, "sasl.jaas.config": self.jaas_config(user)})
        return out

    def spark_options(self, user: str | None = "alice") -> dict[str, str]:
        """The eosbroker Spark data source's options (Spark's Kafka connector names)."""
        return {f"kafka.{k}": v for k, v in self.java(user).items()}


def _kafka_python_tokens(user: str):
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Tokens(AbstractTokenProvider):
        def token(self) -> str:
            return unsecured_token(user)

    return Tokens()


def _aiokafka_tokens(user: str):
    from aiokafka.abc import AbstractTokenProvider

    class Tokens(AbstractTokenProvider):
        async def token(self) -> str:
            return unsecured_token(user)

    return Tokens()


class SecuredBroker(BrokerProcess):
    """``eosbroker serve`` whose clients' listener serves ``security`` (named after it:
    SASL_SSL, MTLS, ...; N nodes on consecutive ports), beside an INTERNAL plaintext
    listener between its nodes. ``bootstrap_servers`` is the secured listener; the
    handle's helpers (create_topic, read_committed, ...) log in there as admin; the
    client settings are ``confluent_kafka(user)``, ``kafka_python(user)``,
    ``aiokafka(user)``, ``java(user)`` and ``spark_options(user)``."""

    def __init__(self, data_dir: Path, security: Security, settings: dict[str, object] | None = None,
                 nodes: int = 1, admin: bool = False) -> None:
        self.security = security
        first = free_port_block(2 * nodes)
        name = security.name
        overrides = {
            "listeners": f"{name}://{HOST}:{first},INTERNAL://{HOST}:{first + nodes}",
            "listener.security.protocol.map": f"{name}:{security.protocol},INTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            **security.broker_settings(),
            **(settings or {}),
        }
        super().__init__(data_dir, overrides, nodes=nodes, admin=admin,
                         extra_args=[arg for entry in security.scram_users() for arg in ("--scram", entry)])
        self.internal_port = first + nodes
        if security.protocol != "PLAINTEXT":
            from spark_client.security import ClientSecurity

            self.helper_security = ClientSecurity.parse(security.spark_options("admin"))

    def confluent_kafka(self, user: str | None = "alice") -> dict[str, object]:
        return {"bootstrap.servers": self.bootstrap_servers, **self.security.confluent_kafka(user)}

    def kafka_python(self, user: str | None = "alice") -> dict[str, object]:
        return {"bootstrap_servers": self.bootstrap_servers, **self.security.kafka_python(user)}

    def aiokafka(self, user: str | None = "alice") -> dict[str, object]:
        return {"bootstrap_servers": self.bootstrap_servers, **self.security.aiokafka(user)}

    def java(self, user: str | None = "alice") -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap_servers, **self.security.java(user)}

    def spark_options(self, user: str | None = "alice") -> dict[str, str]:
        return {"kafka.bootstrap.servers": self.bootstrap_servers, **self.security.spark_options(user)}
