"""Compile caches the stack turns on: ``compile.cache``, one shared by every process of a run or sweep (Redis),
and its signed CPU kernels. Imports the spine's ``component``, ``runner.config``'s checks and secret, and
``torch_internals``.
"""

from runner.stack.caches.remote import RemoteCompileCache, build_remote_cache, ping

__all__ = ["RemoteCompileCache", "build_remote_cache", "ping"]
