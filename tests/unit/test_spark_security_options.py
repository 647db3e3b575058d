"""spark_client's security options: Spark's Kafka connector names mapped onto the data
source's own client (TLS context, SASL login), and every refusal, on the driver."""

from __future__ import annotations

import pickle

import pytest

from broker.security.certs import write_certificates
from spark_client.options import SinkOptions, SourceOptions
from spark_client.security import ClientSecurity, SecurityOptionError

PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="a s\\"ecret";'
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" password="bob-secret";'
OAUTH_JAAS = 'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="alice";'


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return write_certificates(tmp_path_factory.mktemp("certs"), clients=("alice",))


def parse(**options) -> ClientSecurity:
    return ClientSecurity.parse({f"kafka.{k.replace('_', '.')}": v for k, v in options.items()})


def refused(match: str, **options) -> None:
    with pytest.raises(SecurityOptionError, match=match):
        parse(**options)


def test_plaintext_by_default():
    security = ClientSecurity.parse({})
    assert (security.protocol, security.tls, security.sasl) == ("PLAINTEXT", False, False)


def test_plain_and_scram_logins_from_the_jaas_text():
    plain = ClientSecurity.parse({"kafka.security.protocol": "sasl_plaintext", "kafka.sasl.mechanism": "PLAIN",
                                  "kafka.sasl.jaas.config": PLAIN_JAAS})
    assert (plain.protocol, plain.mechanism, plain.username, plain.password) == ("SASL_PLAINTEXT", "PLAIN", "alice", 'a s"ecret')
    scram = ClientSecurity.parse({"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-512",
                                  "kafka.sasl.jaas.config": SCRAM_JAAS})
    assert (scram.mechanism, scram.username, scram.password) == ("SCRAM-SHA-512", "bob", "bob-secret")


def test_oauthbearer_unsecured_subject():
    security = ClientSecurity.parse({"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "OAUTHBEARER",
                                     "kafka.sasl.jaas.config": OAUTH_JAAS})
    assert (security.mechanism, security.oauth_subject) == ("OAUTHBEARER", "alice")


@pytest.mark.parametrize("options,match", [
    ({"kafka.security.protocol": "SASL_PLAINTEXT"}, "GSSAPI"),
    ({"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "GSSAPI"}, "must be one of PLAIN"),
    ({"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN"}, "needs kafka.sasl.jaas.config"),
    ({"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.jaas.config": SCRAM_JAAS},
     "logs in with org.apache.kafka.common.security.plain.PlainLoginModule"),
    ({"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-256",
      "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="bob";'},
     "needs password"),
    ({"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
      "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="a"'},
     "not terminated by semi-colon"),
    ({"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "OAUTHBEARER",
      "kafka.sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"},
     "unsecured tokens only"),
    ({"kafka.security.protocol": "TLS"}, "must be one of PLAINTEXT"),
    ({"kafka.sasl.mechanism": "PLAIN"}, "does not use SASL"),
    ({"kafka.ssl.truststore.location": "/x"}, "does not use TLS"),
    ({"kafka.security.protocol": "SSL", "kafka.ssl.endpoint.identification.algorithm": "http"}, "https or empty"),
    ({"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/no/such.pem"}, "cannot be read"),
    ({"kafka.security.protocol": "SSL", "kafka.ssl.keystore.key": "x"}, "go together"),
    ({"kafka.security.protocol": "SSL", "kafka.ssl.keystore.password": "x"}, "without kafka.ssl.keystore.location"),
])
def test_refusals(options, match):
    with pytest.raises(SecurityOptionError, match=match):
        ClientSecurity.parse(options)


def test_jks_refused_naming_the_conversion(tmp_path):
    jks = tmp_path / "client.truststore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\0" * 60)
    for options in ({"kafka.ssl.truststore.location": str(jks)},  # known by its content
                    {"kafka.ssl.truststore.location": str(jks), "kafka.ssl.truststore.type": "JKS"}):
        with pytest.raises(SecurityOptionError) as refusal:
            ClientSecurity.parse({"kafka.security.protocol": "SSL", **options})
        assert (f"keytool -importkeystore -srckeystore {jks} -destkeystore {tmp_path / 'client.truststore.p12'} "
                "-deststoretype PKCS12") in str(refusal.value)
    with pytest.raises(SecurityOptionError, match="keystore: JKS stores are not supported"):
        ClientSecurity.parse({"kafka.security.protocol": "SSL", "kafka.ssl.keystore.type": "jks",
                              "kafka.ssl.keystore.location": str(jks)})


def test_pem_truststore_and_hostname_check(certs):
    security = ClientSecurity.parse({"kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "PEM",
                                     "kafka.ssl.truststore.location": str(certs.ca)})
    assert security.truststore.kind == "PEM" and security.check_hostname
    context = security.ssl_context()
    assert context.check_hostname and len(context.get_ca_certs()) == 1
    unchecked = ClientSecurity.parse({"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": str(certs.ca),
                                      "kafka.ssl.endpoint.identification.algorithm": ""})
    assert unchecked.truststore.kind == "PEM" and not unchecked.ssl_context().check_hostname
    as_value = ClientSecurity.parse({"kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "PEM",
                                     "kafka.ssl.truststore.certificates": certs.ca.read_text()})
    assert len(as_value.ssl_context().get_ca_certs()) == 1


def test_pkcs12_stores_and_a_wrong_password(certs):
    options = {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": str(certs.truststore),
               "kafka.ssl.truststore.type": "PKCS12", "kafka.ssl.truststore.password": certs.password,
               "kafka.ssl.keystore.location": str(certs.p12("alice")), "kafka.ssl.keystore.password": certs.password}
    security = ClientSecurity.parse(options)  # keystore type found from the file's content
    assert (security.truststore.kind, security.keystore.kind) == ("PKCS12", "PKCS12")
    assert len(security.ssl_context().get_ca_certs()) == 1
    with pytest.raises(SecurityOptionError, match="password is wrong"):
        ClientSecurity.parse({**options, "kafka.ssl.keystore.password": "wrong"})
    with pytest.raises(SecurityOptionError, match="password is wrong"):
        ClientSecurity.parse({**options, "kafka.ssl.truststore.password": "wrong"})


def test_pem_keystore_from_values_and_from_a_file(certs, tmp_path):
    base = {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": str(certs.ca)}
    values = ClientSecurity.parse({**base, "kafka.ssl.keystore.type": "PEM",
                                   "kafka.ssl.keystore.certificate.chain": certs.cert("alice").read_text(),
                                   "kafka.ssl.keystore.key": certs.key("alice").read_text()})
    assert values.keystore.kind == "PEM"
    combined = tmp_path / "alice.pem"
    combined.write_text(certs.key("alice").read_text() + certs.cert("alice").read_text())
    assert ClientSecurity.parse({**base, "kafka.ssl.keystore.location": str(combined)}).keystore.kind == "PEM"
    with pytest.raises(SecurityOptionError, match="cannot be used"):  # a certificate without its key
        ClientSecurity.parse({**base, "kafka.ssl.keystore.location": str(certs.cert("alice"))})


def test_sink_and_source_options_carry_the_security_to_the_executors(certs):
    options = {"kafka.bootstrap.servers": "127.0.0.1:9093", "topic": "t", "kafka.security.protocol": "SASL_SSL",
               "kafka.sasl.mechanism": "SCRAM-SHA-256", "kafka.sasl.jaas.config": SCRAM_JAAS,
               "kafka.ssl.truststore.location": str(certs.ca)}
    sink = SinkOptions.parse(options)
    assert pickle.loads(pickle.dumps(sink)).security == sink.security
    assert (sink.security.protocol, sink.security.username) == ("SASL_SSL", "bob")
    source = SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                                  **{k: v for k, v in options.items() if k.startswith("kafka.s")}})
    assert source.security == sink.security
    with pytest.raises(ValueError, match="did you mean 'kafka.ssl.truststore.location'"):
        SinkOptions.parse({**options, "kafka.ssl.trustStore.locaton": "x"})
