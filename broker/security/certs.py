"""Development certificates: a CA, a broker certificate naming the hosts clients reach it
by, and client certificates for mTLS, in PEM and PKCS12 (``eosbroker certs``).

For local clusters and tests only: the keys are written unencrypted in PEM (PKCS8, as
Kafka's ``ssl.keystore.type=PEM`` reads them) and the PKCS12 stores share one password.

Files written in the directory (each client NAME likewise):
  ca.crt, ca.key              the CA (PEM); ca.key signs more certificates later
  truststore.p12              the CA as a Java PKCS12 truststore (trusted certificate entry)
  broker.crt, broker.key      the broker's certificate (chain: itself then the CA) and key
  broker.p12                  the same as a PKCS12 keystore
  NAME.crt, NAME.key, NAME.p12
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_HOSTS = ("localhost", "127.0.0.1")
DEFAULT_CLIENTS = ("alice", "bob")
DEFAULT_PASSWORD = "eosbroker"
ORGANIZATION = "eosbroker development"


@dataclass(frozen=True)
class Certificates:
    """What ``write_certificates`` wrote: the paths, the password of the PKCS12 files and
    each client's subject (what the broker's default principal builder names it)."""

    directory: Path
    password: str
    hosts: tuple[str, ...]
    clients: tuple[str, ...]
    subjects: dict[str, str] = field(default_factory=dict)  # client name -> RFC 2253 subject

    @property
    def ca(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def truststore(self) -> Path:
        return self.directory / "truststore.p12"

    def cert(self, name: str = "broker") -> Path:
        return self.directory / f"{name}.crt"

    def key(self, name: str = "broker") -> Path:
        return self.directory / f"{name}.key"

    def p12(self, name: str = "broker") -> Path:
        return self.directory / f"{name}.p12"

    def broker_settings(self, listener: str = "SSL", keystore: str = "PKCS12",
                        client_auth: str = "required") -> dict[str, str]:
        """Broker settings serving ``listener`` (a name whose protocol is SSL or SASL_SSL) with these files."""
        prefix = f"listener.name.{listener.lower()}."
        out = {}
        if keystore == "PEM":  # broker.pem holds the key, then the chain
            out.update({prefix + "ssl.keystore.type": "PEM",
                        prefix + "ssl.keystore.location": str(self.directory / "broker.pem"),
                        prefix + "ssl.truststore.type": "PEM",
                        prefix + "ssl.truststore.location": str(self.ca)})
        else:
            out.update({prefix + "ssl.keystore.type": "PKCS12",
                        prefix + "ssl.keystore.location": str(self.p12()),
                        prefix + "ssl.keystore.password": self.password,
                        prefix + "ssl.key.password": self.password,
                        prefix + "ssl.truststore.type": "PKCS12",
                        prefix + "ssl.truststore.location": str(self.truststore),
                        prefix + "ssl.truststore.password": self.password})
        out[prefix + "ssl.client.auth"] = client_auth
        return out

    def confluent_kafka(self, client: str | None = None, protocol: str = "SSL") -> dict[str, str]:
        out = {"security.protocol": protocol, "ssl.ca.location": str(self.ca)}
        if client:
            out.update({"ssl.certificate.location": str(self.cert(client)),
                        "ssl.key.location": str(self.key(client))})
        return out

    def kafka_python(self, client: str | None = None, protocol: str = "SSL") -> dict[str, object]:
        out: dict[str, object] = {"security_protocol": protocol, "ssl_cafile": str(self.ca)}
        if client:
            out.update({"ssl_certfile": str(self.cert(client)), "ssl_keyfile": str(self.key(client))})
        return out

    def aiokafka(self, client: str | None = None, protocol: str = "SSL") -> dict[str, object]:
        """aiokafka's keywords: security_protocol and an ssl_context made here."""
        import ssl

        context = ssl.create_default_context(cafile=str(self.ca))
        if client:
            context.load_cert_chain(str(self.cert(client)), str(self.key(client)))
        return {"security_protocol": protocol, "ssl_context": context}

    def java(self, client: str | None = None, protocol: str = "SSL") -> dict[str, str]:
        out = {"security.protocol": protocol, "ssl.truststore.type": "PKCS12",
               "ssl.truststore.location": str(self.truststore), "ssl.truststore.password": self.password}
        if client:
            out.update({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(self.p12(client)),
                        "ssl.keystore.password": self.password, "ssl.key.password": self.password})
        return out


def subject_of(name: str) -> str:
    """The RFC 2253 subject (as Kafka's principal builder writes it) of a client certificate."""
    return f"CN={name},OU=clients,O={ORGANIZATION}"


def write_certificates(directory: str | Path, hosts=DEFAULT_HOSTS, clients=DEFAULT_CLIENTS,
                       password: str = DEFAULT_PASSWORD, days: int = 825) -> Certificates:
    """Writes a CA, a broker certificate for ``hosts`` (DNS names or IP addresses;
    localhost and 127.0.0.1 always) and one client certificate per name in ``clients``
    into ``directory`` (made if missing; files there are replaced)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    hosts = tuple(dict.fromkeys([*hosts, *DEFAULT_HOSTS]))
    clients = tuple(dict.fromkeys(clients))
    for name in clients:
        if not name or name in ("ca", "broker", "truststore") or not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"client name {name!r}: letters, digits, '-' and '_' only, not ca/broker/truststore")
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    until = now + datetime.timedelta(days=days)

    def new_key():
        return ec.generate_private_key(ec.SECP256R1())

    def name_of(common: str, unit: str | None = None) -> x509.Name:
        parts = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION)]
        if unit:
            parts.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
        parts.append(x509.NameAttribute(NameOID.COMMON_NAME, common))
        return x509.Name(parts)

    def pem_key(key) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    def write(path: str, data: bytes, private: bool = False) -> None:
        target = out / path
        target.write_bytes(data)
        if private:
            target.chmod(0o600)

    ca_key = new_key()
    ca_name = name_of("eosbroker development CA")
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now).not_valid_after(until)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                            content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False,
                                            encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
               .sign(ca_key, hashes.SHA256()))

    def issue(subject: x509.Name, key, usage, alt_names=None):
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now).not_valid_after(until)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                                  critical=False))
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        return builder.sign(ca_key, hashes.SHA256())

    def pem(*certs) -> bytes:
        return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)

    encryption = serialization.BestAvailableEncryption(password.encode())

    def keystore(alias: str, key, cert) -> bytes:
        return pkcs12.serialize_key_and_certificates(alias.encode(), key, cert, [ca_cert], encryption)

    write("ca.crt", pem(ca_cert))
    write("ca.key", pem_key(ca_key), private=True)
    write("truststore.p12", pkcs12.serialize_java_truststore(
        [pkcs12.PKCS12Certificate(ca_cert, b"ca")], encryption))

    alt = []
    for host in hosts:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt.append(x509.DNSName(host))
    broker_key = new_key()
    broker_cert = issue(name_of(hosts[0], "broker"), broker_key,
                        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH], alt)
    write("broker.crt", pem(broker_cert, ca_cert))
    write("broker.key", pem_key(broker_key), private=True)
    write("broker.pem", pem_key(broker_key) + pem(broker_cert, ca_cert), private=True)
    write("broker.p12", keystore("broker", broker_key, broker_cert), private=True)

    subjects = {}
    for client in clients:
        key = new_key()
        cert = issue(name_of(client, "clients"), key, [ExtendedKeyUsageOID.CLIENT_AUTH])
        write(f"{client}.crt", pem(cert, ca_cert))
        write(f"{client}.key", pem_key(key), private=True)
        write(f"{client}.p12", keystore(client, key, cert), private=True)
        subjects[client] = subject_of(client)
    return Certificates(out, password, hosts, clients, subjects)


def client_settings_text(certs: Certificates, protocol: str = "SSL") -> str:
    """The settings clients and the broker need with these files, as ``eosbroker certs`` prints them."""
    lines = [f"# Certificates in {certs.directory} (PKCS12 password: {certs.password})",
             f"# broker certificate for: {', '.join(certs.hosts)}",
             "", "# Broker (server.properties), a listener named SSL:",
             "listeners=SSL://127.0.0.1:9093",
             "listener.security.protocol.map=SSL:SSL"]
    lines += [f"{k}={v}" for k, v in certs.broker_settings().items()]
    for client in (*certs.clients, None):
        who = f"client {client}: {certs.subjects[client]} (mTLS)" if client else "a client without a certificate"
        lines += ["", f"# ---- {who}", "# confluent-kafka / librdkafka:"]
        lines += [f"{k}={v}" for k, v in certs.confluent_kafka(client, protocol).items()]
        lines += ["# kafka-python (keyword arguments):"]
        lines += [f"{k}={v!r}" for k, v in certs.kafka_python(client, protocol).items()]
        lines += ["# aiokafka (keyword arguments):", f"security_protocol={protocol!r}",
                  f"ssl_context=aiokafka.helpers.create_ssl_context(cafile={str(certs.ca)!r}"
                  + (f", certfile={str(certs.cert(client))!r}, keyfile={str(certs.key(client))!r})" if client else ")")]
        lines += ["# Java client (.properties):"]
        lines += [f"{k}={v}" for k, v in certs.java(client, protocol).items()]
    return "\n".join(lines) + "\n"
