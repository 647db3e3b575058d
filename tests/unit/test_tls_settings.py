"""SSL listeners' settings (broker.security.tls): key and trust stores in PEM and PKCS12,
ssl.client.auth, protocols and cipher suites, principals from client certificates,
each checked by a TLS handshake in memory between the listener's context and a client's."""

from __future__ import annotations

import ssl

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.security.certs import write_certificates
from broker.security.principal_mapping import PrincipalMapper, PrincipalMappingError
from broker.security.tls import TlsConfigError, server_listener

MAPPING = PrincipalMapper.from_setting("RULE:^CN=([^,]*),OU=clients,.*$/$1/L,DEFAULT")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return write_certificates(tmp_path_factory.mktemp("certs"), clients=("Alice", "bob"))


@pytest.fixture(scope="module")
def stranger(tmp_path_factory):
    """A client certificate from another CA."""
    return write_certificates(tmp_path_factory.mktemp("other"), clients=("mallory",))


def pkcs12_settings(certs, **more):
    return {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(certs.p12()),
            "ssl.keystore.password": certs.password, "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": str(certs.truststore), "ssl.truststore.password": certs.password, **more}


def client_context(certs, client: str | None = None, maximum=None, issued_by=None):
    """A client trusting ``certs``' CA, with ``client``'s certificate (from ``issued_by``'s
    CA when given)."""
    context = ssl.create_default_context(cafile=str(certs.ca))
    if client is not None:
        own = issued_by or certs
        context.load_cert_chain(own.cert(client), own.key(client))
    if maximum is not None:
        context.maximum_version = maximum
    return context


def handshake(listener, client: ssl.SSLContext):
    """Runs a TLS handshake in memory; the server's SSLObject once both sides are done,
    or the ssl.SSLError either side raised. With TLS 1.3 the server checks the client
    certificate after the client finished: one more flight is pumped."""
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server = listener.context.wrap_bio(server_in, server_out, server_side=True)
    peer = client.wrap_bio(client_in, client_out, server_hostname="localhost")
    done = {"server": False, "client": False}
    for _ in range(10):
        for name, side in (("client", peer), ("server", server)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if all(done.values()):
            break
    # the client's next read sees a rejection sent after its own handshake ended
    peer.write(b"x")
    server_in.write(client_out.read())
    server.read(1)
    return server, peer


@pytest.mark.parametrize("client_auth, client, principal", [
    ("required", "Alice", "User:alice"),  # mapped, lower-cased by the rule's L
    ("requested", "bob", "User:bob"),
    ("requested", None, "User:ANONYMOUS"),
    ("none", "bob", "User:ANONYMOUS"),  # not asked for: none presented
])
def test_client_auth_and_principal(certs, client_auth, client, principal):
    listener = server_listener("MTLS", pkcs12_settings(certs, **{"ssl.client.auth": client_auth}), MAPPING)
    server, _ = handshake(listener, client_context(certs, client))
    assert listener.principal(server) == principal


def test_required_refuses_no_certificate_and_one_from_another_ca(certs, stranger):
    listener = server_listener("MTLS", pkcs12_settings(certs, **{"ssl.client.auth": "required"}), MAPPING)
    with pytest.raises(ssl.SSLError, match="PEER_DID_NOT_RETURN_A_CERTIFICATE|peer did not return a certificate"):
        handshake(listener, client_context(certs))
    with pytest.raises(ssl.SSLError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        handshake(listener, client_context(certs, "mallory", issued_by=stranger))


def test_a_subject_no_rule_maps_is_an_error(certs):
    listener = server_listener("MTLS", pkcs12_settings(certs, **{"ssl.client.auth": "required"}),
                               PrincipalMapper.from_setting("RULE:^CN=([^,]*),OU=staff,.*$/$1/"))
    server, _ = handshake(listener, client_context(certs, "bob"))
    with pytest.raises(PrincipalMappingError, match="No rules apply to CN=bob,OU=clients,O=eosbroker development"):
        listener.principal(server)


def test_pem_keystore_as_values_and_as_a_file(certs):
    values = {"ssl.keystore.type": "PEM", "ssl.keystore.key": certs.key().read_text(),
              # as a properties file may give it: one line, the line breaks as spaces
              "ssl.keystore.certificate.chain": certs.cert().read_text().replace("\n", " "),
              "ssl.truststore.type": "PEM", "ssl.truststore.certificates": certs.ca.read_text(),
              "ssl.client.auth": "required"}
    server, _ = handshake(server_listener("A", values, MAPPING), client_context(certs, "bob"))
    assert server.version() == "TLSv1.3"
    as_file = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.directory / "broker.pem"),
               "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca)}
    handshake(server_listener("B", as_file, MAPPING), client_context(certs))


def test_pkcs12_under_kafkas_default_type_jks(certs):
    settings = pkcs12_settings(certs)
    del settings["ssl.keystore.type"], settings["ssl.truststore.type"]  # Kafka's default: JKS, which reads PKCS12
    handshake(server_listener("A", settings, MAPPING), client_context(certs))


def test_enabled_protocols_and_cipher_suites(certs):
    only12 = server_listener("A", pkcs12_settings(certs, **{"ssl.enabled.protocols": "TLSv1.2"}), MAPPING)
    server, _ = handshake(only12, client_context(certs))
    assert server.version() == "TLSv1.2"
    with pytest.raises(ssl.SSLError):
        handshake(server_listener("B", pkcs12_settings(certs, **{"ssl.enabled.protocols": "TLSv1.3"}), MAPPING),
                  client_context(certs, maximum=ssl.TLSVersion.TLSv1_2))
    # Kafka's (IANA) suite names; naming no TLS 1.3 suite serves TLS 1.2 only
    suites = server_listener("C", pkcs12_settings(certs, **{
        "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}), MAPPING)
    server, _ = handshake(suites, client_context(certs))
    assert (server.version(), server.cipher()[0]) == ("TLSv1.2", "ECDHE-ECDSA-AES256-GCM-SHA384")


@pytest.mark.parametrize("settings, message", [
    ({"ssl.keystore.password": "wrong"}, "cannot open the PKCS12 key store (wrong ssl.keystore.password?)"),
    ({"ssl.truststore.password": "wrong"}, "cannot open the PKCS12 trust store (wrong ssl.truststore.password?)"),
    ({"ssl.keystore.location": "/nonexistent/k.p12"}, "ssl.keystore.location=/nonexistent/k.p12: No such file"),
    ({"ssl.client.auth": "sometimes"}, "Invalid value sometimes for configuration ssl.client.auth: String must be "
                                       "one of: required, requested, none"),
    ({"ssl.enabled.protocols": "TLSv1.1"}, "eosbroker serves TLSv1.2 and TLSv1.3 (not TLSv1.1)"),
    ({"ssl.cipher.suites": "TLS_FOO_WITH_BAR"}, "ssl.cipher.suites: TLS_FOO_WITH_BAR is not a cipher suite"),
    ({"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"}, "cannot serve only some TLS 1.3 suites"),
    ({"ssl.keystore.type": "PEM"}, "SSL key store password cannot be specified with PEM format"),
])
def test_unusable_settings_are_refused_naming_the_setting(certs, settings, message):
    with pytest.raises(TlsConfigError, match="^listener L: .*" + __import__("re").escape(message)):
        server_listener("L", pkcs12_settings(certs, **settings), MAPPING)


def test_no_keystore_is_refused(certs):
    with pytest.raises(TlsConfigError, match="an SSL listener needs a key store"):
        server_listener("L", {}, MAPPING)


def test_a_jks_store_is_refused_naming_the_conversion(certs, tmp_path):
    jks = tmp_path / "server.keystore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    with pytest.raises(TlsConfigError, match=r"is a Java JKS store: .* keytool -importkeystore -srckeystore "
                                             rf"{jks} -destkeystore {tmp_path}/server.keystore.p12 "
                                             "-deststoretype PKCS12"):
        server_listener("L", pkcs12_settings(certs, **{"ssl.keystore.location": str(jks), "ssl.keystore.type": "JKS"}),
                        MAPPING)


def test_per_listener_settings_and_refusal_at_start(certs):
    config = BrokerConfig.load(None, [
        "listeners=PLAINTEXT://127.0.0.1:0,SECURE://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SECURE:SSL,MTLS:SSL",
        "inter.broker.listener.name=MTLS",
        *(f"{k}={v}" for k, v in pkcs12_settings(certs).items()),
        "listener.name.mtls.ssl.client.auth=required",
        "ssl.principal.mapping.rules=RULE:^CN=([^,]*),OU=clients,.*$/$1/,DEFAULT"])
    plan = config.listener_plan()
    listeners = config.tls_listeners(plan)
    assert {n: t.client_auth for n, t in listeners.items()} == {"SECURE": "none", "MTLS": "required"}
    assert plan.inter_broker == "MTLS"
    assert config.without_effect() == []  # the ssl settings are read, not merely accepted
    config.set("listener.name.secure.ssl.keystore.password", "wrong")
    with pytest.raises(ConfigError, match="listener SECURE: ssl.keystore.location=.*wrong ssl.keystore.password"):
        config.tls_listeners(plan)
    config.set("ssl.principal.mapping.rules", "RULE:x/y/Q")
    with pytest.raises(ConfigError, match="Invalid value RULE:x/y/Q for configuration ssl.principal.mapping.rules: "
                                          "Invalid rule: `RULE:x/y/Q`, unmatched substring: `Q`"):
        config.tls_listeners(plan)


def test_an_encrypted_pem_key_with_ssl_key_password(certs):
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(certs.key().read_bytes(), None)
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"key-secret")).decode()
    values = {"ssl.keystore.type": "PEM", "ssl.keystore.key": encrypted,
              "ssl.keystore.certificate.chain": certs.cert().read_text()}
    handshake(server_listener("A", {**values, "ssl.key.password": "key-secret"}, MAPPING), client_context(certs))
    with pytest.raises(TlsConfigError, match="cannot be used \\(ssl.key.password\\?\\)"):
        server_listener("A", {**values, "ssl.key.password": "wrong"}, MAPPING)


def test_sasl_ssl_takes_only_a_listener_prefixed_client_auth(certs):
    """KIP-684: the broker-wide ssl.client.auth does not apply to SASL_SSL listeners."""
    config = BrokerConfig.load(None, [
        "listeners=PLAINTEXT://127.0.0.1:0,A://127.0.0.1:0,B://127.0.0.1:0,C://127.0.0.1:0",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,A:SSL,B:SASL_SSL,C:SASL_SSL",
        "security.inter.broker.protocol=PLAINTEXT", *(f"{k}={v}" for k, v in pkcs12_settings(certs).items()),
        "ssl.client.auth=required", "listener.name.c.ssl.client.auth=requested"])
    listeners = config.tls_listeners(config.listener_plan())
    assert {n: t.client_auth for n, t in listeners.items()} == {"A": "required", "B": "none", "C": "requested"}
    assert [n for n, t in listeners.items() if t.names_principal] == ["A"]
