"""The Redis server of ``compile.cache`` as every client of a fit reaches it: one ``PING`` before anything
compiles, and short socket timeouts on every command, runner's and torch's."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

CONNECT_TIMEOUT_S = 1.0
TIMEOUT_S = 2.0


def ping(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """None when the Redis server at ``url`` answers a PING within ``timeout_s``, else why not."""
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.exceptions.RedisError, OSError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def bounded_url(url: str) -> str:
    """``url`` with socket timeouts in its query (kept where the user set them): ``redis.Redis.from_url``
    reads them, so torch's own client waits no longer than runner's."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query.setdefault("socket_connect_timeout", f"{CONNECT_TIMEOUT_S:g}")
    query.setdefault("socket_timeout", f"{TIMEOUT_S:g}")
    return urlunsplit(parts._replace(query=urlencode(query)))
