"""Compiled models, cached in memory (one executable per key in the process) and on disk.

An entry is a directory named by its key, holding the backend's files and a manifest.json (written
last) with each file's size and SHA-256. An entry is built in a private temporary directory and
renamed into place, so readers see a whole entry or none. Before a library is loaded, its checksums
are verified: a truncated or corrupted entry is discarded and rebuilt, and is never dlopen'ed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gdp.runtime.backends.base import Backend, Executable

MANIFEST = "manifest.json"
FORMAT = 1


def default_cache_dir() -> Path:
    return Path(os.environ.get("GDP_CACHE_DIR") or Path.home() / ".cache" / "gdp")


def cache_key(*parts: bytes | str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class DiskCache:
    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def _ensure_root(self) -> None:
        if not self.root.is_dir():
            # Private to the user: compiled libraries are code this process will load.
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.root, 0o700)

    def lock(self, key: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())

    def lookup(self, key: str) -> tuple[Path, dict] | None:
        """The entry's directory and metadata, or None if absent; a damaged entry is discarded."""
        entry = self.root / key
        if not entry.is_dir():
            return None
        meta = self._verify(entry)
        if meta is None:
            self.discard(key)
        return None if meta is None else (entry, meta)

    def _verify(self, entry: Path) -> dict | None:
        try:
            manifest = json.loads((entry / MANIFEST).read_text())
            if manifest.get("format") != FORMAT:
                return None
            for name, expected in manifest["files"].items():
                path = entry / name
                if path.stat().st_size != expected["size"] or _sha256(path) != expected["sha256"]:
                    return None
            return manifest["meta"]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def store(self, key: str, build: Callable[[Path], dict]) -> tuple[Path, dict]:
        """Run `build(tmpdir)` (which writes files there and returns metadata naming them under
        "files") and publish the result atomically under `key`.

        If the cache directory cannot be written, the entry is built in a private temporary
        directory instead, used by this process only, with a warning: a read-only cache slows a
        program down but never stops it."""
        try:
            self._ensure_root()
            tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key[:16]}-", dir=self.root))
        except OSError as err:
            warnings.warn(
                f"gdp cache {self.root} is not writable ({err}); compiling without caching",
                RuntimeWarning,
                stacklevel=3,
            )
            private = Path(tempfile.mkdtemp(prefix="gdp-uncached-"))
            return private, build(private)
        try:
            meta = build(tmp)
            files = {
                name: {"size": (tmp / name).stat().st_size, "sha256": _sha256(tmp / name)}
                for name in meta["files"]
            }
            manifest = {"format": FORMAT, "files": files, "meta": meta}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
            entry = self.root / key
            try:
                os.rename(tmp, entry)
            except OSError:
                # Another process published the same key first; theirs is as good as ours.
                found = self.lookup(key)
                if found is None:
                    raise
                return found
            return entry, meta
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def discard(self, key: str) -> None:
        entry = self.root / key
        if not entry.exists():
            return
        # Rename first so no reader ever sees a half-deleted entry.
        trash = Path(tempfile.mkdtemp(prefix=".trash-", dir=self.root))
        with contextlib.suppress(OSError):  # another process discarded it first
            os.rename(entry, trash / key)
        shutil.rmtree(trash, ignore_errors=True)


# Executables shared by every model in the process, by cache key.
_loaded: dict[str, tuple[Executable, dict]] = {}
_loaded_lock = threading.Lock()


@dataclass(frozen=True)
class Obtained:
    executable: Executable
    meta: dict  # what the backend's compile() returned
    source: str  # "compiled", "disk" (loaded from the disk cache) or "memory"
    compile_s: float = 0.0
    load_s: float = 0.0


def obtain(cache: DiskCache, backend: Backend, key: str, compile_into: Callable) -> Obtained:
    """The executable for `key`: from this process, else the disk cache, else compiled by
    `compile_into(directory) -> meta` into a new entry, loaded by `backend`."""
    with _loaded_lock:
        hit = _loaded.get(key)
    if hit is not None:
        return Obtained(hit[0], hit[1], "memory")

    def compile_into_cache():
        t0 = time.perf_counter()
        entry, meta = cache.store(key, compile_into)
        return entry, meta, time.perf_counter() - t0

    with cache.lock(key):
        found = cache.lookup(key)
        if found is None:
            entry, meta, compile_s = compile_into_cache()
            source = "compiled"
        else:
            (entry, meta), compile_s, source = found, 0.0, "disk"
        t0 = time.perf_counter()
        try:
            executable = backend.load(entry, meta)
        except Exception:
            if source == "compiled":
                raise
            # Checksums matched but the library does not load (another toolchain wrote it):
            # rebuild it rather than fail the caller.
            cache.discard(key)
            entry, meta, compile_s = compile_into_cache()
            source = "compiled"
            t0 = time.perf_counter()
            executable = backend.load(entry, meta)
        load_s = time.perf_counter() - t0
    with _loaded_lock:
        _loaded[key] = (executable, meta)
    return Obtained(executable, meta, source, compile_s, load_s)
