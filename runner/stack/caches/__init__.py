"""The compile caches: the local one (``compile.cache_dir``, the cache artifacts saved with a run) and
``compile.cache``, one Redis server shared by every process of a run or sweep."""

from runner.stack.caches.local import LocalCompileCache, load_artifacts, save_artifacts
from runner.stack.caches.remote import NoRemoteCache, RemoteCompileCache, build_remote_cache
from runner.stack.caches.server import ping

__all__ = ["LocalCompileCache", "NoRemoteCache", "RemoteCompileCache", "build_remote_cache", "load_artifacts", "ping",
           "save_artifacts"]
