"""The TLS side of SSL (and SASL_SSL) listeners: a server context per listener from
Kafka's ``ssl.*`` settings, each also under ``listener.name.<listener>.``, and the
principal a client certificate names.

Keystores: PKCS12 (with ``ssl.keystore.password``, ``ssl.key.password``) and PEM
(``ssl.keystore.type=PEM``: ``ssl.keystore.location`` a file holding the key and the
chain, or ``ssl.keystore.key`` and ``ssl.keystore.certificate.chain`` as values). Truststores
likewise, PEM or PKCS12. Java's JKS format is refused, naming the conversion to PKCS12.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from broker.security.principal_mapping import PrincipalMapper, PrincipalMappingError

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
ANONYMOUS = "User:ANONYMOUS"
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_JKS_MAGIC = b"\xfe\xed\xfe\xed"
# TLS 1.3 suites: Python's ssl module cannot narrow them, only turn TLS 1.3 off
_TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"})


class TlsConfigError(ValueError):
    """TLS settings that cannot serve a listener; the message names the setting."""


@dataclass(frozen=True)
class TlsListener:
    """A TLS listener's server context, whether it asks for client certificates, and how
    their subjects become principals."""

    name: str
    context: ssl.SSLContext
    client_auth: str
    mapper: PrincipalMapper
    names_principal: bool = True  # SSL: the certificate names the client; SASL_SSL: the SASL exchange does

    def principal(self, ssl_object) -> str:
        """The principal of a connection whose handshake completed: ``User:`` and the
        mapped subject of its client certificate, or User:ANONYMOUS without one (or on
        SASL_SSL, until SASL names it). PrincipalMappingError when no mapping rule
        applies (Kafka closes the connection)."""
        der = ssl_object.getpeercert(binary_form=True) if self.names_principal else None
        if not der:
            return ANONYMOUS
        from cryptography import x509

        subject = x509.load_der_x509_certificate(der).subject.rfc4514_string()
        return "User:" + self.mapper.name(subject)


def listener_settings(values: dict[str, str], listener: str) -> dict[str, str]:
    """The ``ssl.*`` settings a listener sees: ``listener.name.<listener>.ssl.x`` over ``ssl.x``."""
    prefix = f"listener.name.{listener.lower()}."
    out = {k: v for k, v in values.items() if k.startswith("ssl.")}
    out.update({k[len(prefix):]: v for k, v in values.items() if k.startswith(prefix + "ssl.")})
    return out


def tls_listeners(values: dict[str, str], plan) -> dict[str, TlsListener]:
    """A TlsListener for each served listener whose protocol is SSL or SASL_SSL, from the
    Kafka settings ``values`` (text by name); TlsConfigError naming what is wrong."""
    mapper_text = values.get("ssl.principal.mapping.rules", "DEFAULT")
    try:
        mapper = PrincipalMapper.from_setting(mapper_text)
    except PrincipalMappingError as e:
        raise TlsConfigError(f"Invalid value {mapper_text} for configuration ssl.principal.mapping.rules: {e}") from None
    out = {}
    for e in plan.served:
        if e.protocol not in TLS_PROTOCOLS:
            continue
        settings = listener_settings(values, e.name)
        if e.protocol == "SASL_SSL":  # KIP-684: only a listener-prefixed ssl.client.auth applies to SASL_SSL
            settings["ssl.client.auth"] = values.get(f"listener.name.{e.name.lower()}.ssl.client.auth", "none")
        out[e.name] = replace(server_listener(e.name, settings, mapper), names_principal=e.protocol == "SSL")
    return out


def server_listener(name: str, settings: dict[str, str], mapper: PrincipalMapper) -> TlsListener:
    def refuse(text: str) -> TlsConfigError:
        return TlsConfigError(f"listener {name}: {text}")

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = [v.strip() for v in settings.get("ssl.enabled.protocols", "TLSv1.2,TLSv1.3").split(",") if v.strip()]
    unknown = [v for v in versions if v not in _VERSIONS]
    if unknown or not versions:
        raise refuse(f"ssl.enabled.protocols={','.join(versions)}: eosbroker serves TLSv1.2 and TLSv1.3 "
                     f"(not {', '.join(unknown) or 'none'})")
    chosen = sorted(_VERSIONS[v] for v in versions)
    context.minimum_version, context.maximum_version = chosen[0], chosen[-1]
    suites = [s.strip() for s in settings.get("ssl.cipher.suites", "").split(",") if s.strip()]
    if suites:
        _restrict_cipher_suites(context, suites, refuse)

    try:
        _load_keystore(context, settings, refuse)
        _load_truststore(context, settings, refuse)
    except ssl.SSLError as e:
        raise refuse(f"the key store or trust store cannot be used: {e}") from None
    client_auth = settings.get("ssl.client.auth", "none").strip().lower()
    if client_auth not in _CLIENT_AUTH:
        raise refuse(f"Invalid value {client_auth} for configuration ssl.client.auth: "
                     "String must be one of: required, requested, none")
    context.verify_mode = _CLIENT_AUTH[client_auth]
    return TlsListener(name, context, client_auth, mapper)


def _restrict_cipher_suites(context: ssl.SSLContext, suites: list[str], refuse) -> None:
    """``ssl.cipher.suites`` in Kafka's (IANA) names, or OpenSSL's. TLS 1.3 is served only if
    the list names a TLS 1.3 suite (Python cannot narrow TLS 1.3's suites further)."""
    tls12 = [s for s in suites if s not in _TLS13_SUITES]
    available = {c["name"] for c in ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).get_ciphers()}
    wanted = []
    for suite in tls12:
        openssl = _openssl_cipher_name(suite)
        if openssl not in available:
            raise refuse(f"ssl.cipher.suites: {suite} is not a cipher suite this TLS library offers")
        wanted.append(openssl)
    if tls12:
        context.set_ciphers(":".join(wanted))
    elif context.minimum_version < ssl.TLSVersion.TLSv1_3:
        context.minimum_version = ssl.TLSVersion.TLSv1_3  # TLS 1.3 suites only
    if not any(s in _TLS13_SUITES for s in suites):
        if context.minimum_version >= ssl.TLSVersion.TLSv1_3:
            raise refuse("ssl.cipher.suites names no TLS 1.3 suite, and ssl.enabled.protocols only TLSv1.3")
        context.maximum_version = ssl.TLSVersion.TLSv1_2
    elif set(suites) & _TLS13_SUITES != _TLS13_SUITES:
        raise refuse("ssl.cipher.suites: eosbroker cannot serve only some TLS 1.3 suites; name all of "
                     f"{', '.join(sorted(_TLS13_SUITES))} or none")


def _openssl_cipher_name(suite: str) -> str:
    """TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 -> ECDHE-RSA-AES128-GCM-SHA256 (names not in
    IANA form are taken as OpenSSL's)."""
    if not suite.startswith("TLS_") or "_WITH_" not in suite:
        return suite
    exchange, cipher = suite[4:].split("_WITH_", 1)
    exchange = "" if exchange == "RSA" else exchange.replace("_", "-") + "-"
    for iana, openssl in (("AES_128_", "AES128-"), ("AES_256_", "AES256-"), ("CHACHA20_POLY1305_SHA256", "CHACHA20-POLY1305")):
        cipher = cipher.replace(iana, openssl)
    if cipher.endswith("CBC_SHA"):
        cipher = cipher[:-len("CBC_SHA")] + "SHA"
    cipher = cipher.replace("CBC_", "").replace("_", "-")
    return exchange + cipher


def _read(settings: dict[str, str], key: str, refuse) -> bytes:
    path = settings[key]
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise refuse(f"{key}={path}: {e.strerror or e}") from None


def _store_type(settings: dict[str, str], kind: str, data: bytes, refuse) -> str:
    """PEM or PKCS12. Kafka's default type is JKS, whose Java loader also reads PKCS12
    files: a PKCS12 file is read under it too. A JKS (or JCEKS) file is refused."""
    key = f"ssl.{kind}.type"
    given = settings.get(key, "JKS").strip().upper()
    if data.startswith(_JKS_MAGIC) or data.startswith(b"\xce\xce\xce\xce"):
        location = settings[f"ssl.{kind}.location"]
        raise refuse(f"ssl.{kind}.location={location} is a Java JKS store: eosbroker reads PKCS12 and PEM stores; "
                     f"convert it with keytool -importkeystore -srckeystore {location} -destkeystore "
                     f"{Path(location).with_suffix('.p12')} -deststoretype PKCS12 (or make new ones with eosbroker certs)")
    if given in ("JKS", "PKCS12"):
        return "PKCS12"
    if given != "PEM":
        raise refuse(f"{key}={given}: eosbroker reads PKCS12 and PEM stores")
    return given


def _load_keystore(context: ssl.SSLContext, settings: dict[str, str], refuse) -> None:
    chain_value = settings.get("ssl.keystore.certificate.chain")
    key_value = settings.get("ssl.keystore.key")
    location = settings.get("ssl.keystore.location")
    key_password = settings.get("ssl.key.password")
    if chain_value or key_value:
        if settings.get("ssl.keystore.type", "").strip().upper() != "PEM":
            raise refuse("ssl.keystore.certificate.chain and ssl.keystore.key are values of ssl.keystore.type=PEM; "
                         "set it")
        if not (chain_value and key_value):
            raise refuse("ssl.keystore.certificate.chain and ssl.keystore.key go together: set both")
        if location:
            raise refuse("set either ssl.keystore.location or ssl.keystore.key/ssl.keystore.certificate.chain")
        _load_pem_pair(context, _pem_text(key_value) + _pem_text(chain_value), key_password, refuse)
        return
    if not location:
        raise refuse("an SSL listener needs a key store: ssl.keystore.location (PKCS12 or PEM), or "
                     "ssl.keystore.type=PEM with ssl.keystore.key and ssl.keystore.certificate.chain")
    data = _read(settings, "ssl.keystore.location", refuse)
    if _store_type(settings, "keystore", data, refuse) == "PEM":
        if settings.get("ssl.keystore.password"):
            raise refuse("SSL key store password cannot be specified with PEM format, only key password may be specified")
        _load_pem_pair(context, data, key_password, refuse)
        return
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    password = settings.get("ssl.keystore.password")
    try:
        key, cert, chain = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as e:
        raise refuse(f"ssl.keystore.location={location}: cannot open the PKCS12 key store "
                     f"(wrong ssl.keystore.password?): {e}") from None
    if key is None or cert is None:
        raise refuse(f"ssl.keystore.location={location}: the key store holds no private key with its certificate")
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    pem += b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [cert, *chain])
    _load_pem_pair(context, pem, None, refuse)


def _pem_text(value: str) -> bytes:
    """A PEM value given in a setting: Kafka's properties may put it on one line (the
    blocks' line breaks as spaces); OpenSSL wants the base64 on its own lines."""
    import re

    text = value.strip()
    blocks = re.findall(r"(-----BEGIN [A-Z ]+-----)(.*?)(-----END [A-Z ]+-----)", text, re.S)
    return b"".join(f"{begin}\n{''.join(body.split())}\n{end}\n".encode() for begin, body, end in blocks)


def _load_pem_pair(context: ssl.SSLContext, pem: bytes, key_password: str | None, refuse) -> None:
    """load_cert_chain reads files only: the key and chain go through a private temporary
    file, removed at once."""
    fd, path = tempfile.mkstemp(prefix="eosbroker-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        try:
            context.load_cert_chain(path, password=key_password)
        except ssl.SSLError as e:
            raise refuse(f"the key store's key and certificate chain cannot be used"
                         f"{' (ssl.key.password?)' if 'PRIVATE KEY' in pem.decode('ascii', 'replace') else ''}: "
                         f"{e.reason or e}") from None
    finally:
        os.unlink(path)


def _load_truststore(context: ssl.SSLContext, settings: dict[str, str], refuse) -> None:
    """The CAs client certificates are checked against; without a truststore, the system's."""
    if settings.get("ssl.truststore.certificates"):
        if settings.get("ssl.truststore.type", "").strip().upper() != "PEM":
            raise refuse("ssl.truststore.certificates is a value of ssl.truststore.type=PEM; set it")
        context.load_verify_locations(cadata=_pem_text(settings["ssl.truststore.certificates"]).decode())
        return
    location = settings.get("ssl.truststore.location")
    if not location:
        if settings.get("ssl.client.auth", "none").strip().lower() != "none":
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        return
    data = _read(settings, "ssl.truststore.location", refuse)
    if _store_type(settings, "truststore", data, refuse) == "PEM":
        context.load_verify_locations(cadata=data.decode("ascii", "replace"))
        return
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    password = settings.get("ssl.truststore.password")
    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError as e:
        raise refuse(f"ssl.truststore.location={location}: cannot open the PKCS12 trust store "
                     f"(wrong ssl.truststore.password?): {e}") from None
    certs = [c.certificate for c in store.additional_certs] + ([store.cert.certificate] if store.cert else [])
    if not certs:
        raise refuse(f"ssl.truststore.location={location}: the trust store holds no certificate")
    context.load_verify_locations(cadata="".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs))


# A TLS 1.2 record holding a fatal internal_error alert: what Kafka's SSL engine answers
# to bytes that are not TLS (a plaintext client, garbage).
INTERNAL_ERROR_ALERT = bytes([21, 3, 3, 0, 2, 2, 80])

# How long a client has to complete its TLS handshake (Kafka bounds it by
# connections.max.idle.ms; asyncio's default is 60 s).
HANDSHAKE_TIMEOUT_S = 60.0


# Buffers every TLS connection's reads go through, one read at a time (the event loop's
# thread), each copied out before the next read: what uvloop receives, what TLS decrypts.
_RECEIVED = (lambda b: (b, memoryview(b)))(bytearray(256 * 1024))
_DECRYPTED = memoryview(bytearray(256 * 1024))
_RECORD_PAYLOAD = 16384  # the most a TLS record carries


def server_protocol(loop, app_protocol, tls: TlsListener, accepted, handshake_ended):
    """asyncio's TLS protocol around ``app_protocol`` (whose connection_made comes after
    the handshake). ``accepted(transport)`` sees the TCP connection first (False: it was
    closed, no handshake); ``handshake_ended(peer, exception or None)`` is called when the
    handshake ends, succeeded, failed, or cut short by the client (asyncio itself logs a
    failure only in debug mode, Kafka logs every one).

    asyncio's SSLProtocol rather than uvloop's own TLS (``create_server(ssl=...)``): on a
    failed handshake uvloop closes at once, dropping the alert OpenSSL wrote, in methods a
    subclass cannot reach, and its server hands over a connection only after the handshake,
    too late to count it toward max.connections.per.ip; measured, it was no cheaper."""
    from asyncio import sslproto

    class _ServerTls(sslproto.SSLProtocol):
        peer = "?"

        def connection_made(self, transport) -> None:
            address = transport.get_extra_info("peername")
            self.peer = f"{address[0]}:{address[1]}" if address else "?"
            if accepted(transport):
                super().connection_made(transport)

        def _on_handshake_complete(self, handshake_exc) -> None:
            if handshake_exc is not None and self._transport is not None:
                # the alert OpenSSL wrote (bad certificate, protocol version...) goes out
                # before the close, as Kafka's does: asyncio would drop it. OpenSSL writes
                # none for bytes that are not TLS at all; Kafka's engine answers those too
                alert_written = self._outgoing.pending > 0
                self._process_outgoing()
                if not alert_written and isinstance(handshake_exc, ssl.SSLError):
                    self._transport.write(INTERNAL_ERROR_ALERT)
            super()._on_handshake_complete(handshake_exc)

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            # the buffer uvloop receives into is copied into the TLS object at once: one
            # serves every connection (asyncio gives each its own 256 kB)
            self._ssl_buffer, self._ssl_buffer_view = _RECEIVED

        def _write_appdata(self, list_of_data) -> None:
            """Responses written in one turn (the server's pipelined answers) go into one TLS
            record when small, encrypted and handed to the socket at once; anything
            unusual (a backlog, a handshake or shutdown under way, an error) takes
            asyncio's path."""
            if (self._state is not _WRAPPED or self._write_backlog or self._ssl_writing_paused
                    or list_of_data.__class__ not in (list, tuple)):
                return super()._write_appdata(list_of_data)
            if len(list_of_data) == 1:
                data = list_of_data[0]
            elif sum(map(len, list_of_data)) <= _RECORD_PAYLOAD:
                data = b"".join(list_of_data)
            else:
                return super()._write_appdata(list_of_data)
            try:
                self._sslobj.write(data)  # whole or not at all (no partial writes on a memory BIO)
            except Exception:
                return super()._write_appdata((data,))
            self._process_outgoing()

        def _do_read__copied(self) -> None:
            """The records received, decrypted into one shared buffer and handed over as one
            copy. asyncio's own reads allocate 256 kB per record and end each turn on a
            raised SSLWantReadError; this stops when nothing is left to decrypt."""
            sslobj, incoming, view = self._sslobj, self._incoming, _DECRYPTED
            room = len(view)
            pieces = []
            filled = 0
            count = 1
            try:
                while incoming.pending or sslobj.pending():
                    count = sslobj.read(room - filled, view[filled:])
                    if not count:  # close_notify
                        break
                    filled += count
                    if filled == room:
                        pieces.append(bytes(view))
                        filled = 0
            except sslproto.SSLAgainErrors:  # a record not wholly received yet
                pass
            if filled:
                pieces.append(bytes(view[:filled]))
            if pieces:
                self._app_protocol.data_received(pieces[0] if len(pieces) == 1 else b"".join(pieces))
            if not count:
                self._call_eof_received()
                self._start_shutdown()

    _WRAPPED = sslproto.SSLProtocolState.WRAPPED
    waiter = loop.create_future()
    protocol = _ServerTls(loop, app_protocol, tls.context, waiter, server_side=True,
                          ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)

    def done(future) -> None:
        if not future.cancelled():
            handshake_ended(protocol.peer, future.exception())

    waiter.add_done_callback(done)
    return protocol


def handshake_failure_reason(error: BaseException) -> str:
    """What a failed handshake's exception says, shortly (OpenSSL's reason, when it gave one)."""
    reason = getattr(error, "reason", None)
    if isinstance(error, ssl.SSLError) and reason:
        return reason.lower().replace("_", " ")
    return str(error) or type(error).__name__
