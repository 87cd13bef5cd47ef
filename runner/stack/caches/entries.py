"""torch's own entries on the shared server (``compile.cache``) as runner lets torch write and read them."""

from __future__ import annotations

from collections.abc import Callable

import torch

from runner.config.cache_secret import Signer, unverified_value


class SignedEntries:
    """Seals what torch writes and opens what it reads (see the module docstring); ``on_reject(key, why)`` is
    told of every value refused."""

    def __init__(self, signer: Signer, on_reject: Callable[[str, str], None]) -> None:
        self.signer = signer
        self.on_reject = on_reject
        self.context = f"torch {torch.__version__}"

    def subject(self, key: str) -> str:
        """What an entry's signature binds its value to: the torch that wrote it and the entry's full key."""
        return f"{self.context}\0{key}"

    def seal(self, key: str, data: bytes) -> bytes:
        return self.signer.seal(self.subject(key), bytes(data))

    def open(self, key: str, stored: bytes) -> bytes | None:
        value, why = self.signer.open(self.subject(key), stored)
        if value is None:
            self.on_reject(key, str(why))
        return value


class UnsignedEntries:
    """``compile.cache_trust=unsigned``: torch reads what the server holds, unchecked (a signed process's
    envelope is opened without checking it); what it writes is signed when a secret is set, so processes that
    check can use it."""

    def __init__(self, signer: Signer | None) -> None:
        self.signed = SignedEntries(signer, lambda key, why: None) if signer is not None else None

    def seal(self, key: str, data: bytes) -> bytes:
        return self.signed.seal(key, data) if self.signed is not None else data

    def open(self, key: str, stored: bytes) -> bytes | None:
        return unverified_value(stored)
