"""Compiled models, cached in memory (one executable per key in the process) and on disk.

An entry is a directory named by its key, holding the backend's files and a manifest.json (written
last) with each file's size and SHA-256. An entry is built in a private temporary directory and
renamed into place, so readers see a whole entry or none.

Trust: a cache entry holds shared libraries this process will dlopen, so the cache is trusted only
as far as no one else can write it:
- the cache directory must be owned by the user (or root) and writable by no one else (not group-
  or world-writable); otherwise every use raises a `CacheError` naming the path, its mode and
  owner. gdp creates it with mode 0700.
- each manifest carries an HMAC-SHA256 (over the entry's key, its files' sizes and SHA-256 and
  the backend's metadata) keyed by the cache's own key file (`.key` in the cache directory,
  outside every entry, mode 0600, 32 random bytes made on first use). Before an entry is loaded
  the HMAC and every file's checksum are verified, and the entry must hold exactly the files its
  manifest lists (at least one). A truncated, swapped or planted library, an entry copied from
  another cache or from another key, or a manifest listing no files is discarded and rebuilt,
  never loaded.
- a compile killed midway leaves a `.tmp-*` directory in the cache (or a `gdp-uncached-*` one in
  the system's temporary directory): the next process to use the cache removes those whose
  process has ended (same host) or that are older than a day, never another live process's.
A cache that cannot be written (read-only, full) still works: what it cannot store or repair is
compiled into a private temporary directory, with a warning.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import pwd
import secrets
import shutil
import socket
import stat
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gdp.errors import CacheError, ExecutionError
from gdp.runtime.backends.base import Backend, Executable

MANIFEST = "manifest.json"
FORMAT = 2
KEY_FILE = ".key"
# One empty lock file per key compiled, never removed (removing one another process waits on
# would let a third compile beside it).
LOCKS_DIR = ".locks"
# A temporary directory older than this is stale whatever its process (another host's, say).
STALE_S = 24 * 3600
# Names of temporary directories carry the host and process that made them.
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
UNCACHED_PREFIX = "gdp-uncached-"


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


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def check_private(path: Path, what: str, error: type[Exception] = CacheError) -> os.stat_result:
    """`path`'s stat if it is owned by this user (or root) and writable by no one else; else
    `error` naming the path, its mode and owner."""
    st = os.stat(path)
    me = os.geteuid()
    if st.st_uid not in (me, 0) or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise error(
            f"{what} {path} is not private: mode {stat.filemode(st.st_mode)} "
            f"({oct(stat.S_IMODE(st.st_mode))}), owner {_owner(st.st_uid)}; gdp loads code from "
            f"it, so it must be owned by {_owner(me)} and writable by no one else "
            f"(chmod go-w {path}, or choose another directory)"
        )
    return st


def _signed(body: dict, secret: bytes) -> str:
    data = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(secret, data, hashlib.sha256).hexdigest()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def _stale(path: Path, prefix: str) -> bool:
    """Whether a temporary file or directory named `prefix`HOST-PID-... is left over: its
    process (on this host) has ended, or it is older than STALE_S."""
    try:
        age = time.time() - path.lstat().st_mtime
    except OSError:
        return False
    if age > STALE_S:
        return True
    host, _, rest = path.name[len(prefix) :].partition("-")
    pid = rest.partition("-")[0]
    return host == _HOST and pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


# Per cache root, in this process: its HMAC key, and whether its leftovers were cleaned.
_secrets: dict[Path, bytes] = {}
_cleaned: set[Path] = set()
_root_lock = threading.Lock()
# Private directories this process compiled into (an unwritable cache), removed at exit.
_uncached: list[Path] = []


def clean_uncached() -> None:
    """Remove the `gdp-uncached-*` directories of this user whose process has ended."""
    tmp = Path(tempfile.gettempdir())
    with contextlib.suppress(OSError):
        for path in tmp.glob(UNCACHED_PREFIX + "*"):
            with contextlib.suppress(OSError):
                if path.lstat().st_uid == os.geteuid() and _stale(path, UNCACHED_PREFIX):
                    _remove(path)


@atexit.register
def _remove_uncached() -> None:
    for path in _uncached:
        shutil.rmtree(path, ignore_errors=True)


class DiskCache:
    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        _caches.add(self)

    def _ensure_root(self) -> None:
        if not self.root.is_dir():
            # Private to the user: compiled libraries are code this process will load.
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.root, 0o700)

    def _check_root(self) -> bool:
        """Whether the cache directory exists; a CacheError if others can write it. The first
        time in this process, also removes what interrupted compiles left there."""
        try:
            check_private(self.root, "gdp cache directory")
        except CacheError:
            raise
        except OSError:  # absent, or not a directory we can reach: nothing to load from
            return False
        root = self.root.resolve()
        with _root_lock:
            first = root not in _cleaned
            _cleaned.add(root)
        if first:
            self._clean()
        return True

    def _clean(self) -> None:
        with contextlib.suppress(OSError):
            for path in self.root.iterdir():
                for prefix in (".tmp-", ".trash-"):
                    if path.name.startswith(prefix) and _stale(path, prefix):
                        _remove(path)
        clean_uncached()

    def _secret(self, create: bool) -> bytes | None:
        """The cache's HMAC key, made on first use; None where it is absent and cannot be made
        (a read-only cache without one: nothing in it can be trusted, nothing is loaded)."""
        root = self.root.resolve()
        with _root_lock:
            if root in _secrets:
                return _secrets[root]
        path = self.root / KEY_FILE
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            if not create:
                return None
            try:
                fd = self._make_secret(path)
            except OSError:
                return None
        except OSError as err:
            raise CacheError(f"gdp cache key {path} cannot be read: {err}") from err
        try:
            st = os.fstat(fd)
            if (
                not stat.S_ISREG(st.st_mode)
                or st.st_uid != os.geteuid()
                or stat.S_IMODE(st.st_mode) & 0o077
            ):
                raise CacheError(
                    f"gdp cache key {path} is not private: mode "
                    f"{oct(stat.S_IMODE(st.st_mode))}, owner {_owner(st.st_uid)}; it must be a "
                    f"file of {_owner(os.geteuid())} with mode 0600 (delete it to make a new one "
                    "and rebuild the cache)"
                )
            secret = os.read(fd, 64)
        finally:
            os.close(fd)
        if len(secret) < 32:
            raise CacheError(f"gdp cache key {path} is damaged (delete it and the cache rebuilds)")
        with _root_lock:
            return _secrets.setdefault(root, secret)

    def _make_secret(self, path: Path) -> int:
        """Write a new key beside `path` and link it into place (the first process wins)."""
        fd, tmp = tempfile.mkstemp(prefix=f".tmp-{_HOST}-{os.getpid()}-key-", dir=self.root)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, secrets.token_bytes(32))
            os.fsync(fd)
            os.close(fd)
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW)

    def lock(self, key: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())

    @contextlib.contextmanager
    def process_lock(self, key: str):
        """An exclusive lock on `<cache>/.locks/<key>` (flock) while `key` is looked up and
        compiled: processes compiling one key take turns, and the later ones load what the
        first stored rather than compiling it again. Where the lock file cannot be made (a cache
        that cannot be written), no lock: each process compiles on its own, as before."""
        fd = None
        with contextlib.suppress(OSError):
            self._ensure_root()
            if self._check_root():
                locks = self.root / LOCKS_DIR
                locks.mkdir(mode=0o700, exist_ok=True)
                fd = os.open(locks / key, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                fcntl.flock(fd, fcntl.LOCK_EX)
                _held_file_locks.add(fd)
        try:
            yield
        finally:
            if fd is not None:
                _held_file_locks.discard(fd)
                os.close(fd)  # releases the flock

    def lookup(self, key: str) -> tuple[Path, dict] | None:
        """The entry's directory and metadata, or None if absent; a damaged entry is discarded.
        A CacheError if others can write the cache directory."""
        if not self._check_root():
            return None
        entry = self.root / key
        if not entry.is_dir():
            return None
        secret = self._secret(create=False)
        meta = None if secret is None else self._verify(entry, key, secret)
        if meta is None:
            self.discard(key)
        return None if meta is None else (entry, meta)

    def _verify(self, entry: Path, key: str, secret: bytes) -> dict | None:
        """The entry's metadata if its manifest is authentic (made by this cache for `key`) and
        the entry holds exactly the files it lists, each of its size and SHA-256; else None."""
        try:
            if entry.is_symlink():
                return None
            manifest = json.loads((entry / MANIFEST).read_text())
            if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
                return None
            body = {k: v for k, v in manifest.items() if k != "hmac"}
            if not hmac.compare_digest(str(manifest.get("hmac")), _signed(body, secret)):
                return None
            files, meta = manifest["files"], manifest["meta"]
            if manifest["key"] != key or not files or sorted(files) != sorted(meta["files"]):
                return None
            present = {str(p.relative_to(entry)) for p in entry.rglob("*") if not p.is_dir()} - {
                MANIFEST
            }
            if present != set(files):
                return None  # a planted file beside the listed ones, or one missing
            for name, expected in files.items():
                path = entry / name
                st = path.lstat()
                if not stat.S_ISREG(st.st_mode) or st.st_size != expected["size"]:
                    return None
                if _sha256(path) != expected["sha256"]:
                    return None
            return meta
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def store(self, key: str, build: Callable[[Path], dict]) -> tuple[Path, dict]:
        """Run `build(tmpdir)` (which writes files there and returns metadata naming them under
        "files") and publish the result atomically under `key`.

        If the cache directory cannot be written, the entry is built in a private temporary
        directory instead, used by this process only, with a warning: a read-only cache slows a
        program down but never stops it. A CacheError if others can write the cache directory."""
        with contextlib.suppress(OSError):  # reported below, as the cache not being writable
            self._ensure_root()
        secret = None
        try:
            if self._check_root():
                secret = self._secret(create=True)
            if secret is None:
                raise PermissionError(f"no key file {self.root / KEY_FILE} and none can be made")
            tmp = Path(
                tempfile.mkdtemp(prefix=f".tmp-{_HOST}-{os.getpid()}-{key[:16]}-", dir=self.root)
            )
        except CacheError:
            raise
        except OSError as err:
            warnings.warn(
                f"gdp cache {self.root} is not writable ({err}); compiling without caching",
                RuntimeWarning,
                stacklevel=3,
            )
            private = Path(tempfile.mkdtemp(prefix=f"{UNCACHED_PREFIX}{_HOST}-{os.getpid()}-"))
            _uncached.append(private)
            return private, build(private)
        try:
            meta = build(tmp)
            names = list(meta["files"])
            if not names:
                raise CacheError(f"the backend wrote no files for cache entry {key}")
            files = {
                name: {"size": (tmp / name).stat().st_size, "sha256": _sha256(tmp / name)}
                for name in names
            }
            body = {"format": FORMAT, "key": key, "files": files, "meta": meta}
            manifest = {**body, "hmac": _signed(body, secret)}
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
        """Remove an entry; where the cache cannot be written, leave it (it is never loaded:
        lookup verifies it again and store then compiles into a private directory)."""
        entry = self.root / key
        if not entry.exists():
            return
        try:
            # Rename first so no reader ever sees a half-deleted entry.
            trash = Path(tempfile.mkdtemp(prefix=f".trash-{_HOST}-{os.getpid()}-", dir=self.root))
        except OSError:
            return
        with contextlib.suppress(OSError):  # another process discarded it first
            os.rename(entry, trash / key)
        shutil.rmtree(trash, ignore_errors=True)


# Executables shared by every model in the process, by cache key.
_loaded: dict[str, tuple[Executable, dict]] = {}
_loaded_lock = threading.Lock()

# Held around every backend compile and gdp's graph rewrites (gdp.model): TVM's Relax ONNX importer
# and the onnxscript optimizer keep global state and fail at random when two threads run them at
# once (4 to 15 of 18 concurrent compiles failed), so compiles in one process take turns.
# Re-entrant: a compile may prepare another graph.
COMPILE_LOCK = threading.RLock()


@dataclass(frozen=True)
class Obtained:
    executable: Executable
    meta: dict  # what the backend's compile() returned
    source: str  # "compiled", "disk" (loaded from the disk cache) or "memory"
    compile_s: float = 0.0
    load_s: float = 0.0


class NotLoaded(Executable):
    """An executable compiled into the cache and not loaded (obtain(load=False): a model
    compiled only to be exported, on a machine that may lack the target's device)."""

    def __init__(self, entry: Path, meta: dict) -> None:
        self.entry = entry
        self.min_extents = tuple(tuple(m) for m in meta.get("min_extents", ()))

    def run(self, inputs, profile=None):
        raise ExecutionError(
            f"this model was compiled with compile_only=True: its executable ({self.entry}) is"
            " compiled, not loaded; export it (model.export) and gdp.load the bundle on a"
            " machine with the target's device"
        )


def obtain(
    cache: DiskCache, backend: Backend, key: str, compile_into: Callable, load: bool = True
) -> Obtained:
    """The executable for `key`: from this process, else the disk cache, else compiled by
    `compile_into(directory) -> meta` into a new entry, loaded by `backend`. With `load=False`
    nothing is loaded: the entry is found or compiled, and a NotLoaded stands for it."""
    with _loaded_lock:
        hit = _loaded.get(key)
    if hit is not None:
        return Obtained(hit[0], hit[1], "memory")

    def compile_into_cache():
        t0 = time.perf_counter()
        with COMPILE_LOCK:
            entry, meta = cache.store(key, compile_into)
        return entry, meta, time.perf_counter() - t0

    with cache.lock(key), cache.process_lock(key):
        found = cache.lookup(key)
        if found is None:
            entry, meta, compile_s = compile_into_cache()
            source = "compiled"
        else:
            (entry, meta), compile_s, source = found, 0.0, "disk"
        if not load:  # never kept in _loaded: a later loading call must load it
            return Obtained(NotLoaded(entry, meta), meta, source, compile_s)
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


def _after_fork_in_child() -> None:
    """Locks another thread held at the fork stay held in the child (which has only the forking
    thread): make them anew. Per-key locks of DiskCache instances are re-made the same way."""
    global _loaded_lock, _root_lock, COMPILE_LOCK
    _loaded_lock, _root_lock, COMPILE_LOCK = threading.Lock(), threading.Lock(), threading.RLock()
    for cache in list(_caches):
        cache._locks, cache._locks_guard = {}, threading.Lock()
    # A key's flock held by another thread at the fork is shared with the child's copy of its
    # descriptor, and stays held while either is open: the child closes its copy, or its own
    # compile of that key (and every other process's) would wait for it forever.
    for fd in list(_held_file_locks):
        with contextlib.suppress(OSError):
            os.close(fd)
    _held_file_locks.clear()


_caches: weakref.WeakSet[DiskCache] = weakref.WeakSet()
_held_file_locks: set[int] = set()  # descriptors of the key locks this process holds
os.register_at_fork(after_in_child=_after_fork_in_child)
