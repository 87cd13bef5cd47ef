"""The compile caches, in one place: the local one (``compile.cache_dir`` and the cache artifacts saved with a
run, ``local``), and ``compile.cache``, one shared by every process of a run or sweep (Redis, ``remote``) with
its signed CPU kernels (``kernels``) and torch's signed entries (``entries``), and the server itself
(``server``). Imports the spine, ``runner.config``'s checks and secret, ``runner.atomic_files`` and
``torch_internals``.
"""

from runner.stack.caches.local import LocalCompileCache, load_artifacts, save_artifacts
from runner.stack.caches.remote import NoRemoteCache, RemoteCompileCache, build_remote_cache
from runner.stack.caches.server import ping

__all__ = ["LocalCompileCache", "NoRemoteCache", "RemoteCompileCache", "build_remote_cache", "load_artifacts", "ping",
           "save_artifacts"]
