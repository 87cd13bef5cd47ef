"""The secret that signs what ``compile.cache`` shares and the cache artifacts a run saves, its envelope, and the
cache's address as it may be shown. The secret comes from the environment, never the config (which Hydra saves in
every run directory)."""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

SECRET_ENV = "RUNNER_COMPILE_CACHE_SECRET"
SECRET_FILE_ENV = "RUNNER_COMPILE_CACHE_SECRET_FILE"
MIN_SECRET_BYTES = 16
# What every envelope starts with: its format and version (no value torch writes starts so: JSON, a pickle).
TAG = b"runner-signed-v1\0"
_KEY_ID_BYTES = 8
_MAC_BYTES = hashlib.sha256().digest_size
HEADER_BYTES = len(TAG) + _KEY_ID_BYTES + _MAC_BYTES
SECRET_HINT = "python -c 'import secrets; print(secrets.token_hex(32))'"


def read_secret() -> tuple[bytes | None, str | None]:
    """``(secret, None)``; ``(None, None)`` when none is set; ``(None, why)`` when one is set but unusable,
    with the fix."""
    path = os.environ.get(SECRET_FILE_ENV)
    if path:
        try:
            with open(path, "rb") as f:
                secret = f.read().strip()
        except OSError as e:
            return None, (f"{SECRET_FILE_ENV}={path} cannot be read ({e.strerror}): point it at a readable file "
                          f"holding the secret that signs what compile.cache shares, or set {SECRET_ENV} instead.")
        source = SECRET_FILE_ENV
    else:
        secret = os.environ.get(SECRET_ENV, "").strip().encode()
        source = SECRET_ENV
        if not secret:
            return None, None
    if len(secret) < MIN_SECRET_BYTES:
        return None, (f"{source} holds {len(secret)} bytes: the secret that signs what compile.cache shares needs "
                      f"at least {MIN_SECRET_BYTES} (e.g. `{SECRET_HINT}`), the same on every machine that shares "
                      "the cache.")
    return secret, None


@dataclass(frozen=True)
class Signer:
    """Seals values in envelopes under ``secret`` and opens them. An envelope is ``TAG``, the key id (tells "another
    secret" from "changed"), an HMAC-SHA256 over the tag, the subject (so a value moved to another key fails) and the
    value, then the value; the HMAC is checked before a byte of the value is read."""

    secret: bytes = field(repr=False)

    @property
    def key_id(self) -> bytes:
        """Names the secret without revealing it: the first bytes of an HMAC of a fixed string under it."""
        return hmac.new(self.secret, b"runner compile.cache key id", hashlib.sha256).digest()[:_KEY_ID_BYTES]

    def _mac(self, subject: str, value: bytes) -> bytes:
        mac = hmac.new(self.secret, TAG, hashlib.sha256)
        encoded = subject.encode()
        mac.update(len(encoded).to_bytes(4, "big") + encoded)  # length-prefixed: no subject is another's prefix
        mac.update(value)
        return mac.digest()

    def seal(self, subject: str, value: bytes) -> bytes:
        """``value`` in an envelope bound to ``subject``."""
        return TAG + self.key_id + self._mac(subject, value) + value

    def open(self, subject: str, sealed: object) -> tuple[bytes | None, str | None]:
        """``(value, None)`` when ``sealed`` is an envelope of ``subject`` signed under this secret, else
        ``(None, why not)``."""
        if not isinstance(sealed, bytes):
            return None, f"not bytes ({type(sealed).__name__})"
        if not sealed.startswith(TAG):
            return None, "unsigned (no signature: written by a process without the secret, or by someone else)"
        if len(sealed) < HEADER_BYTES:
            return None, f"a truncated envelope ({len(sealed)} bytes, shorter than its {HEADER_BYTES}-byte header)"
        key_id, mac, value = (sealed[len(TAG):len(TAG) + _KEY_ID_BYTES],
                              sealed[len(TAG) + _KEY_ID_BYTES:HEADER_BYTES], sealed[HEADER_BYTES:])
        if not hmac.compare_digest(key_id, self.key_id):
            return None, (f"signed under another secret (key id {key_id.hex()}, this process's {self.key_id.hex()}): "
                          f"the secrets differ; every process sharing the cache needs the same {SECRET_ENV}")
        if not hmac.compare_digest(mac, self._mac(subject, value)):
            return None, ("its signature does not verify: changed or truncated where it was stored, or moved there "
                          "from another entry")
        return value, None


def unverified_value(stored: bytes) -> bytes:
    """The value inside an envelope without checking it (``compile.cache_trust=unsigned``), or ``stored``
    itself when it is not in one."""
    return stored[HEADER_BYTES:] if stored.startswith(TAG) else stored


# What the signature of a run's saved cache artifacts (compile_cache/artifacts.bin) binds them to.
ARTIFACTS_SUBJECT = "runner compile-cache artifacts"


def open_artifacts(stored: bytes, shown: str, trust_unsigned: bool) -> tuple[bytes | None, str | None]:
    """``(torch's artifacts, None)`` from a saved artifacts file that may be loaded (signed under this secret, or any
    under ``compile.cache_trust=unsigned``), else ``(None, the refusal)``: torch unpickles what it loads."""
    secret, problem = read_secret()
    if problem:
        return None, f"{shown}: {problem}"
    drop = "or drop reliability.load_cache_artifacts."
    if secret is not None and stored.startswith(TAG):
        value, why = Signer(secret).open(ARTIFACTS_SUBJECT, stored)
        if value is None:
            return None, (f"{shown}: not loaded, since torch unpickles what it loads: {why}. Load artifacts saved "
                          f"by a run holding this process's {SECRET_ENV}, {drop}")
        return value, None
    if trust_unsigned:
        return unverified_value(stored), None
    if stored.startswith(TAG):
        return None, (f"{shown}: the artifacts are signed and this process has no secret to check them: set "
                      f"{SECRET_ENV} (or {SECRET_FILE_ENV}) to the secret of the run that saved them, {drop}")
    return None, (f"{shown}: the artifacts are unsigned (saved by a run without {SECRET_ENV}), and torch unpickles "
                  "them: whoever could write that file would run code here. Set the same "
                  f"{SECRET_ENV} (or {SECRET_FILE_ENV}; e.g. `{SECRET_HINT}`) in the run that saves them and in this "
                  "one (rerun that run to save signed artifacts); or, trusting whoever can write the file, load it "
                  f"unsigned with compile.cache_trust=unsigned; {drop}")


def redact_url(url: str) -> str:
    """``url`` with its password (and query) left out, for logs, reports and error messages."""
    parts = urlsplit(url)
    if parts.password is None and not parts.query:
        return url
    user = f"{parts.username}:***@" if parts.username else (":***@" if parts.password is not None else "")
    host = parts.hostname or ""
    netloc = f"{user}{host}" + (f":{parts.port}" if parts.port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
