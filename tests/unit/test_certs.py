"""eosbroker certs: the files a TLS set-up needs, checked with the ssl module (what the
broker serves with) and the printed settings pointing at them."""

import ssl

from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives.serialization import pkcs12

from broker.commands import main
from broker.security.certs import write_certificates


def test_certificates_chain_to_the_ca_and_name_the_hosts(tmp_path):
    certs = write_certificates(tmp_path, hosts=("kafka.internal", "10.1.2.3"), clients=("alice",))
    broker = x509.load_pem_x509_certificates(certs.cert().read_bytes())
    names = broker[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) == {"kafka.internal", "localhost"}
    assert {str(a) for a in names.get_values_for_type(x509.IPAddress)} == {"10.1.2.3", "127.0.0.1"}
    # a server context loads the broker's pair; a client context verifies it against the CA
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(certs.cert(), certs.key())
    client = ssl.create_default_context(cafile=certs.ca)
    client.load_cert_chain(certs.cert("alice"), certs.key("alice"))
    alice = x509.load_pem_x509_certificates(certs.cert("alice").read_bytes())[0]
    assert alice.subject.rfc4514_string() == certs.subjects["alice"] == "CN=alice,OU=clients,O=eosbroker development"
    alice.verify_directly_issued_by(x509.load_pem_x509_certificate(certs.ca.read_bytes()))


def test_pkcs12_stores_open_with_the_password(tmp_path):
    certs = write_certificates(tmp_path, clients=("bob",), password="s3cret")
    key, cert, chain = pkcs12.load_key_and_certificates(certs.p12("bob").read_bytes(), b"s3cret")
    assert key is not None and "CN=bob" in cert.subject.rfc4514_string() and len(chain) == 1
    trusted = pkcs12.load_pkcs12(certs.truststore.read_bytes(), b"s3cret")
    assert trusted.key is None and len(trusted.additional_certs) == 1


def test_command_prints_the_settings_for_each_client(tmp_path):
    result = CliRunner().invoke(main, ["certs", "--dir", str(tmp_path), "--client", "carol", "--protocol", "SASL_SSL"])
    assert result.exit_code == 0, result.output
    assert f"ssl.certificate.location={tmp_path}/carol.crt" in result.output
    assert "security.protocol=SASL_SSL" in result.output
    assert f"ssl.keystore.location={tmp_path}/carol.p12" in result.output
    assert (tmp_path / "carol.key").exists() and not (tmp_path / "alice.key").exists()


def test_command_refuses_a_name_that_would_overwrite_the_ca(tmp_path):
    result = CliRunner().invoke(main, ["certs", "--dir", str(tmp_path), "--client", "ca"])
    assert result.exit_code != 0 and "client name 'ca'" in result.output
