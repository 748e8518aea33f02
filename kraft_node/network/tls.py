"""TLS for Kafka's ``SSL`` security protocol, configured with Kafka's ``ssl.*`` keys.

Only PEM key material is read (``ssl.keystore.type=PEM``, ``ssl.truststore.type=PEM``):
Python's :mod:`ssl` cannot read Java's JKS, and PKCS12 would need a converter, so
any other type is refused naming the key (see :data:`kraft_node.server.config.UNSUPPORTED`).
A store type left unset is taken as PEM (Kafka's default is JKS: a JKS file then
fails to load with an error naming the key and the file).

Keys (Kafka's meaning):

* ``ssl.keystore.location``: a PEM file holding the private key and the certificate
  chain; or inline ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key``;
  ``ssl.key.password`` if the key is encrypted.  ``ssl.keystore.password`` and
  ``ssl.truststore.password`` are refused with PEM, as Kafka refuses them.
* ``ssl.truststore.location`` (PEM file of CA certificates) or inline
  ``ssl.truststore.certificates``.  Without a truststore the system's CAs are used
  (Kafka: the JVM's default truststore).
* ``ssl.client.auth`` (server side): ``none`` (default), ``requested``, ``required``.
* ``ssl.endpoint.identification.algorithm`` (client side): ``https`` (default:
  the server's certificate must name the host dialled) or empty (chain checked,
  name not).
* ``ssl.protocol`` (``TLSv1.3`` default, ``TLSv1.2``, ``TLS``) and
  ``ssl.enabled.protocols`` (a subset of ``TLSv1.2,TLSv1.3``) bound the versions.

A listener's server side reads ``listener.name.<listener lower-case>.<key>`` first
and falls back to ``<key>`` (Kafka's per-listener overrides); the Raft driver's
outbound connections use the controller listener's settings too, as Kafka's
controller-to-controller client does (``valuesWithPrefixOverride``).

Inline PEM: a properties value loses its line breaks (``\\`` continuations), so the
blocks are re-wrapped before use; inline keys are written to a private (0600)
temporary file for ``load_cert_chain`` and removed at once.
"""
from __future__ import annotations

import os
import re
import ssl
import tempfile

__all__ = ["TlsConfigError", "server_context", "client_context", "listener_prefix", "setting",
           "SSL_KEYS_USED"]


class TlsConfigError(ValueError):
    """An ``ssl.*`` setting is wrong or cannot be loaded; the message names the key."""


#: The ``ssl.*`` keys this module reads (others are refused or reported unused by the config).
SSL_KEYS_USED = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.key.password", "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.certificates",
    "ssl.client.auth", "ssl.endpoint.identification.algorithm", "ssl.protocol", "ssl.enabled.protocols",
})

_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)
_VERSIONS = {"TLSV1.2": ssl.TLSVersion.TLSv1_2, "TLSV1.3": ssl.TLSVersion.TLSv1_3}


def listener_prefix(listener: str) -> str:
    """Kafka's ``ListenerName.configPrefix``: ``listener.name.<name lower-case>.``."""
    return f"listener.name.{listener.lower()}."


def setting(props: dict, key: str, listener: str | None = None) -> tuple[str, str | None]:
    """``(the key actually set, its value)``: the listener-prefixed key wins over the plain one."""
    if listener is not None:
        pk = listener_prefix(listener) + key
        if pk in props:
            return pk, props[pk].strip()
    return key, (props[key].strip() if key in props else None)


def _pem(text: str) -> str:
    """Re-wrap PEM blocks whose line breaks a properties file took away."""
    blocks = _PEM_BLOCK.findall(text)
    out = []
    for label, body in blocks:
        b64 = "".join(body.split())
        out.append(f"-----BEGIN {label}-----\n" + "\n".join(b64[i:i + 64] for i in range(0, len(b64), 64))
                   + f"\n-----END {label}-----\n")
    return "".join(out)


def _versions(ctx: ssl.SSLContext, props: dict, listener: str | None, source: str) -> None:
    pk, proto = setting(props, "ssl.protocol", listener)
    if proto and proto.upper() not in ("TLS", "TLSV1.2", "TLSV1.3"):
        raise TlsConfigError(f"{source}: {pk}={proto!r} is not supported (TLS, TLSv1.2 or TLSv1.3)")
    ek, enabled = setting(props, "ssl.enabled.protocols", listener)
    if enabled:
        names = [v.strip().upper() for v in enabled.split(",") if v.strip()]
        bad = [v for v in names if v not in _VERSIONS]
        if bad or not names:
            raise TlsConfigError(f"{source}: {ek}={enabled!r}: kraft supports TLSv1.2 and TLSv1.3 only")
        versions = sorted(_VERSIONS[v] for v in names)
    else:
        versions = [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3]  # Kafka's default
    ctx.minimum_version = versions[0]
    ctx.maximum_version = versions[-1]


def _check_type(props, key, listener, source):
    k, v = setting(props, key, listener)
    if v and v.upper() != "PEM":
        raise TlsConfigError(f"{source}: {k}={v} is not supported: kraft reads PEM stores only "
                             f"(Python's ssl cannot read {v}); convert it to PEM and set {key}=PEM")


def _load_keystore(ctx: ssl.SSLContext, props: dict, listener: str | None, source: str, required: bool) -> bool:
    _check_type(props, "ssl.keystore.type", listener, source)
    for bad in ("ssl.keystore.password",):
        k, v = setting(props, bad, listener)
        if v:
            raise TlsConfigError(f"{source}: {k} cannot be specified with PEM keystores (Kafka's rule); "
                                 "use ssl.key.password for an encrypted key")
    pwk, password = setting(props, "ssl.key.password", listener)
    lk, location = setting(props, "ssl.keystore.location", listener)
    ck, chain = setting(props, "ssl.keystore.certificate.chain", listener)
    kk, key = setting(props, "ssl.keystore.key", listener)
    if location and (chain or key):
        raise TlsConfigError(f"{source}: set {lk} or {ck} with {kk}, not both")
    if location:
        try:
            ctx.load_cert_chain(location, password=password or None)
        except FileNotFoundError:
            raise TlsConfigError(f"{source}: {lk}: {location}: no such file") from None
        except ssl.SSLError as exc:
            raise TlsConfigError(f"{source}: {lk}: {location} is not a PEM private key with its certificate "
                                 f"chain{' (or ' + pwk + ' is wrong)' if password else ''}: "
                                 f"{exc.reason or exc}") from None
        except OSError as exc:
            raise TlsConfigError(f"{source}: {lk}: {location}: {exc.strerror or exc}") from None
        return True
    if chain or key:
        if not (chain and key):
            raise TlsConfigError(f"{source}: {ck} and {kk} must be set together")
        pem_chain, pem_key = _pem(chain), _pem(key)
        if not pem_chain:
            raise TlsConfigError(f"{source}: {ck} holds no PEM certificate")
        if not pem_key:
            raise TlsConfigError(f"{source}: {kk} holds no PEM private key")
        fd, path = tempfile.mkstemp(prefix="kraft-key-", suffix=".pem")  # mode 0600
        try:
            with os.fdopen(fd, "w") as f:
                f.write(pem_key + pem_chain)
            try:
                ctx.load_cert_chain(path, password=password or None)
            except ssl.SSLError as exc:
                raise TlsConfigError(f"{source}: {ck}/{kk} are not a matching PEM certificate chain and private "
                                     f"key{' (or ' + pwk + ' is wrong)' if password else ''}: "
                                     f"{exc.reason or exc}") from None
        finally:
            os.unlink(path)
        return True
    if required:
        raise TlsConfigError(f"{source}: an SSL listener{' ' + listener if listener else ''} needs a keystore: "
                             "set ssl.keystore.location (PEM key + certificate chain) or "
                             "ssl.keystore.certificate.chain and ssl.keystore.key")
    return False


def _load_truststore(ctx: ssl.SSLContext, props: dict, listener: str | None, source: str,
                     purpose: ssl.Purpose) -> None:
    _check_type(props, "ssl.truststore.type", listener, source)
    k, v = setting(props, "ssl.truststore.password", listener)
    if v:
        raise TlsConfigError(f"{source}: {k} cannot be specified with PEM truststores (Kafka's rule)")
    lk, location = setting(props, "ssl.truststore.location", listener)
    ck, certs = setting(props, "ssl.truststore.certificates", listener)
    if location and certs:
        raise TlsConfigError(f"{source}: set {lk} or {ck}, not both")
    if location:
        try:
            ctx.load_verify_locations(cafile=location)
        except FileNotFoundError:
            raise TlsConfigError(f"{source}: {lk}: {location}: no such file") from None
        except ssl.SSLError as exc:
            raise TlsConfigError(f"{source}: {lk}: {location} holds no PEM certificate: {exc.reason or exc}") \
                from None
        except OSError as exc:
            raise TlsConfigError(f"{source}: {lk}: {location}: {exc.strerror or exc}") from None
    elif certs:
        pem = _pem(certs)
        if not pem:
            raise TlsConfigError(f"{source}: {ck} holds no PEM certificate")
        try:
            ctx.load_verify_locations(cadata=pem)
        except ssl.SSLError as exc:
            raise TlsConfigError(f"{source}: {ck}: not PEM certificates: {exc.reason or exc}") from None
    else:
        ctx.load_default_certs(purpose)


def server_context(props: dict, listener: str, source: str = "config") -> ssl.SSLContext:
    """The server side of an SSL listener named ``listener``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(ctx, props, listener, source)
    _load_keystore(ctx, props, listener, source, required=True)
    ak, auth = setting(props, "ssl.client.auth", listener)
    auth = (auth or "none").lower()
    if auth not in ("none", "requested", "required"):
        raise TlsConfigError(f"{source}: {ak}={auth!r} must be none, requested or required")
    if auth != "none":
        ctx.verify_mode = ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_OPTIONAL
        _load_truststore(ctx, props, listener, source, ssl.Purpose.CLIENT_AUTH)
    return ctx


def client_context(props: dict, listener: str | None = None, source: str = "config") -> ssl.SSLContext:
    """The client side: verifies the server's chain against the truststore, its name per
    ``ssl.endpoint.identification.algorithm``, and presents the keystore's certificate
    (if one is configured) to servers that ask for it."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions(ctx, props, listener, source)
    ek, alg = setting(props, "ssl.endpoint.identification.algorithm", listener)
    alg = "https" if alg is None else alg
    if alg.lower() not in ("https", ""):
        raise TlsConfigError(f"{source}: {ek}={alg!r} must be https (verify the host name) or empty (do not)")
    ctx.check_hostname = alg.lower() == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    _load_truststore(ctx, props, listener, source, ssl.Purpose.SERVER_AUTH)
    _load_keystore(ctx, props, listener, source, required=False)
    return ctx
