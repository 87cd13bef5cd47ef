"""torch's own entries on the shared server (``compile.cache``) as runner lets torch write and read them.

Every Redis cache of torch (FX graph, AOTAutograd, autotune, bundled autotune, Dynamo's PGO) stores a pickle
or JSON that torch trusts: an FX-graph or AOTAutograd entry is unpickled before any guard is checked, and a
loaded graph writes its source code to disk and imports it. So whoever writes to the server would run code
in every process that reads from it. :class:`SignedEntries` seals each value torch writes in an envelope
signed under the cluster's secret over (torch version, the entry's full key, the value)
(:class:`runner.config.cache_secret.Signer`) and opens each value torch reads before torch sees a byte of it:
anything unsigned, signed under another secret, changed, truncated or moved from another key is a miss, which
torch compiles locally and stores again (its own put replaces the bad entry). ``compile.cache_trust=unsigned``
(:class:`UnsignedEntries`) is torch's own behaviour: what the server holds is read unchecked.
"""

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
