"""The secret that signs the kernels ``compile.cache`` shares, and the cache's address as it may be shown.

The secret is not a config field: Hydra saves every run's composed config in its run directory, and a
secret there would reach every copy of the outputs. It comes from the environment, as the Redis password
does in most clusters: ``RUNNER_COMPILE_CACHE_SECRET`` holds it, or ``RUNNER_COMPILE_CACHE_SECRET_FILE``
names a file that does (docs/compile-cache.md).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

SECRET_ENV = "RUNNER_COMPILE_CACHE_SECRET"
SECRET_FILE_ENV = "RUNNER_COMPILE_CACHE_SECRET_FILE"
MIN_SECRET_BYTES = 16


def read_secret() -> tuple[bytes | None, str | None]:
    """``(secret, None)``; ``(None, None)`` when none is set (kernels are then not shared); ``(None, why)``
    when one is set but unusable, with the fix."""
    path = os.environ.get(SECRET_FILE_ENV)
    if path:
        try:
            with open(path, "rb") as f:
                secret = f.read().strip()
        except OSError as e:
            return None, (f"{SECRET_FILE_ENV}={path} cannot be read ({e.strerror}): "
                          f"point it at a readable file holding the secret that signs compile.cache's kernels, or "
                          f"unset it (and {SECRET_ENV}) to share compiled graphs without kernels.")
        source = SECRET_FILE_ENV
    else:
        secret = os.environ.get(SECRET_ENV, "").strip().encode()
        source = SECRET_ENV
        if not secret:
            return None, None
    if len(secret) < MIN_SECRET_BYTES:
        return None, (f"{source} holds {len(secret)} bytes: the secret that signs compile.cache's kernels needs at "
                      f"least {MIN_SECRET_BYTES} (e.g. `python -c 'import secrets; print(secrets.token_hex(32))'`), "
                      "the same on every machine that shares the cache.")
    return secret, None


def redact_url(url: str) -> str:
    """``url`` with its password (and query) left out, for logs, reports and error messages."""
    parts = urlsplit(url)
    if parts.password is None and not parts.query:
        return url
    user = f"{parts.username}:***@" if parts.username else (":***@" if parts.password is not None else "")
    host = parts.hostname or ""
    netloc = f"{user}{host}" + (f":{parts.port}" if parts.port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
