"""Shared C++ kernels as ``compile.cache`` stores them: signed, checked before anything is written."""

from __future__ import annotations

import hashlib
import hmac
import platform
import re
import sys

KERNEL_NAME = re.compile(r"[0-9a-z]{2}/[0-9a-z]+(\.main)?\.so")
MAX_KERNEL_BYTES = 64 * 2**20
_DOMAIN = b"runner compile.cache kernel v1\0"
_MAC_BYTES = hashlib.sha256().digest_size
# ELF e_machine of the platforms torch ships CPU wheels for.
_ELF_MACHINE = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21, "s390x": 22}


def sharing_supported() -> str | None:
    """Why built kernels cannot be shared on this machine, or None (Linux shared objects only)."""
    if sys.platform != "linux" or platform.machine().lower() not in _ELF_MACHINE:
        return f"built kernels are shared on Linux ({', '.join(sorted(_ELF_MACHINE))}) only"
    return None


def _mac(secret: bytes, name: str, context: str, content: bytes) -> bytes:
    message = b"\0".join((_DOMAIN, name.encode(), context.encode(), hashlib.sha256(content).digest()))
    return hmac.new(secret, message, hashlib.sha256).digest()


def sign(secret: bytes, name: str, context: str, content: bytes) -> bytes:
    """The server's value for kernel ``name`` built in ``context`` (torch version and instruction set)."""
    return _mac(secret, name, context, content) + content


def open_entry(secret: bytes, name: str, context: str, value: object) -> tuple[bytes | None, str | None]:
    """``(content, None)`` for an entry that may be written, else ``(None, why not)``."""
    if not isinstance(value, bytes):
        return None, f"not bytes ({type(value).__name__})"
    if len(value) > _MAC_BYTES + MAX_KERNEL_BYTES:
        return None, f"{len(value)} bytes, over the {MAX_KERNEL_BYTES} a kernel may have"
    mac, content = value[:_MAC_BYTES], value[_MAC_BYTES:]
    if not hmac.compare_digest(mac, _mac(secret, name, context, content)):
        return None, "its signature does not verify (another secret, or changed or truncated on the server)"
    if problem := shared_object_problem(content):
        return None, problem
    return content, None


def shared_object_problem(content: bytes) -> str | None:
    """Why ``content`` is not a shared object this process could load, or None: an ELF file of this machine's
    word size, byte order and architecture, of type ``ET_DYN``."""
    if len(content) < 64 or content[:4] != b"\x7fELF":
        return "not an ELF file"
    order = "little" if content[5] == 1 else "big"
    if content[4] != (2 if sys.maxsize > 2**32 else 1) or order != sys.byteorder:
        return "an ELF file of another word size or byte order"
    if int.from_bytes(content[16:18], order) != 3:
        return "an ELF file but not a shared object"
    if int.from_bytes(content[18:20], order) != _ELF_MACHINE.get(platform.machine().lower()):
        return f"a shared object for another architecture than {platform.machine()}"
    return None
