"""Reliability and security of the runtime (issue 21): a cache or bundle others can write, forged or
foreign cache entries, leftovers of killed compiles, fork, threads, back-pressure and memory.

Each test failed before the fix it guards (see docs/reliability.md). Tests that could hang or
crash (fork) run in a child process with a timeout."""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path

import numpy as np
import onnx
import pytest

import gdp
import gdp.runtime.cache as cache_mod
from gdp import bundle
from gdp.errors import CacheError, FrontendError, GdpError, InputError, QueueFullError
from gdp.runtime import queue
from tests.children import run_child
from tests.models import affine, affine_oracle

X = np.random.default_rng(0).random((3, 4, 3), np.float32)


def close(actual, expected) -> None:
    """Equal up to rounding: the kernel may fuse x * scale + shift into one FMA."""
    np.testing.assert_allclose(actual, expected, rtol=1e-6)


@pytest.fixture
def fresh(monkeypatch):
    """This process as a new one would be: no executables loaded, no cache cleaned yet."""
    monkeypatch.setattr(cache_mod, "_loaded", {})
    monkeypatch.setattr(cache_mod, "_cleaned", set(), raising=False)
    monkeypatch.setattr(cache_mod, "_secrets", {}, raising=False)


def _entries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if not p.name.startswith(".") and p.name != "profiles")


# -- the cache directory ------------------------------------------------------------------------


def test_cache_dir_and_key_are_made_private(tmp_path, fresh):
    cache = tmp_path / "cache"
    gdp.compile(affine((3, 4, 3)), cache_dir=cache)
    assert cache.stat().st_mode & 0o777 == 0o700
    key = cache / cache_mod.KEY_FILE
    assert key.stat().st_mode & 0o777 == 0o600 and key.stat().st_size == 32


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722])
def test_a_cache_dir_others_can_write_is_refused(tmp_path, fresh, mode):
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, mode)
    with pytest.raises(CacheError, match=rf"{cache}.*not private.*{oct(mode)}.*owner"):
        gdp.compile(affine((3, 4, 3), scale=1.5), cache_dir=cache)
    assert not list(cache.iterdir())  # nothing written, nothing loaded


def test_a_cache_dir_owned_by_another_user_is_refused(tmp_path, fresh, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(cache, 65534, 65534)  # nobody
    else:
        me = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: me + 1)
    with pytest.raises(CacheError, match=r"not private.*owner"):
        gdp.compile(affine((3, 4, 3), scale=1.75), cache_dir=cache)


def test_a_key_file_others_can_read_is_refused(tmp_path, fresh):
    cache = tmp_path / "cache"
    gdp.compile(affine((3, 4, 3), scale=2.5), cache_dir=cache)
    os.chmod(cache / cache_mod.KEY_FILE, 0o644)
    cache_mod._loaded.clear()
    cache_mod._secrets.clear()
    with pytest.raises(CacheError, match=r"\.key is not private"):
        gdp.compile(affine((3, 4, 3), scale=2.5), cache_dir=cache)


# -- entries ------------------------------------------------------------------------------------


def _two_models(cache: Path) -> tuple[onnx.ModelProto, Path, Path]:
    """Compile y = 3x + 1 (A) and y = 7x + 1 (B) into `cache`; A's proto and both entries."""
    a = affine((3, 4, 3), scale=3.0)
    gdp.compile(a, cache_dir=cache)
    (entry_a,) = _entries(cache)
    gdp.compile(affine((3, 4, 3), scale=7.0), cache_dir=cache)
    (entry_b,) = [e for e in _entries(cache) if e != entry_a]
    return a, entry_a, entry_b


def _reload(proto, cache: Path):
    cache_mod._loaded.clear()  # as a new process
    model = gdp.compile(proto, cache_dir=cache)
    return model, model(X)


def _replace(path: Path, data: bytes) -> None:
    # Through a new file: this process has the old library mapped.
    new = path.with_name(path.name + ".new")
    new.write_bytes(data)
    os.replace(new, path)


def test_another_models_entry_copied_under_this_key_is_rebuilt(tmp_path, fresh):
    cache = tmp_path / "cache"
    a, entry_a, entry_b = _two_models(cache)
    shutil.rmtree(entry_a)
    shutil.copytree(entry_b, entry_a)  # B's whole, valid entry under A's key
    model, y = _reload(a, cache)
    assert model.report()["cache"] == "compiled"
    close(y, affine_oracle(X, scale=3.0))


def test_a_swapped_library_with_a_matching_checksum_is_rebuilt(tmp_path, fresh):
    """Who can write an entry can fix up its checksums, but not the manifest's HMAC."""
    cache = tmp_path / "cache"
    a, entry_a, entry_b = _two_models(cache)
    _replace(entry_a / "model.so", (entry_b / "model.so").read_bytes())
    manifest = json.loads((entry_a / "manifest.json").read_text())
    manifest["files"] = json.loads((entry_b / "manifest.json").read_text())["files"]
    (entry_a / "manifest.json").write_text(json.dumps(manifest))
    model, y = _reload(a, cache)
    assert model.report()["cache"] == "compiled"
    close(y, affine_oracle(X, scale=3.0))


def test_an_entry_from_another_cache_is_rebuilt(tmp_path, fresh):
    """Each cache signs with its own key: an entry planted from another cache is not trusted."""
    proto = affine((3, 4, 3), scale=3.0)
    other, mine = tmp_path / "other", tmp_path / "mine"
    gdp.compile(proto, cache_dir=other)
    cache_mod._loaded.clear()
    gdp.compile(affine((3, 4, 3), scale=9.0), cache_dir=mine)  # makes mine's key
    (entry,) = _entries(other)
    shutil.copytree(entry, mine / entry.name)
    model, y = _reload(proto, mine)
    assert model.report()["cache"] == "compiled"
    close(y, affine_oracle(X, scale=3.0))


def test_a_manifest_listing_no_files_is_rebuilt_not_loaded(tmp_path, fresh):
    """Was SIGBUS: the manifest verified nothing, and a truncated library was dlopen'ed."""
    cache = tmp_path / "cache"
    proto = affine((3, 4, 3), scale=3.0)
    gdp.compile(proto, cache_dir=cache)
    (entry,) = _entries(cache)
    manifest = json.loads((entry / "manifest.json").read_text())
    manifest["files"] = {}
    (entry / "manifest.json").write_text(json.dumps(manifest))
    _replace(entry / "model.so", (entry / "model.so").read_bytes()[:4096])
    model, y = _reload(proto, cache)
    assert model.report()["cache"] == "compiled"
    close(y, affine_oracle(X, scale=3.0))


def test_a_file_planted_in_an_entry_is_rebuilt(tmp_path, fresh):
    cache = tmp_path / "cache"
    proto = affine((3, 4, 3), scale=3.0)
    gdp.compile(proto, cache_dir=cache)
    (entry,) = _entries(cache)
    (entry / "libevil.so").write_bytes(b"\x7fELF")
    model, _ = _reload(proto, cache)
    assert model.report()["cache"] == "compiled"
    assert not (_entries(cache)[0] / "libevil.so").exists()


def test_a_read_only_damaged_cache_compiles_privately(tmp_path, fresh, monkeypatch):
    """Was a PermissionError from discarding the damaged entry; now the entry is left (never
    loaded) and the model compiles into a private directory, with a warning."""
    cache = tmp_path / "cache"
    proto = affine((3, 4, 3), scale=3.0)
    gdp.compile(proto, cache_dir=cache)
    (entry,) = _entries(cache)
    _replace(entry / "model.so", b"garbage")
    real = tempfile.mkdtemp

    def read_only(*args, dir=None, **kwargs):  # root ignores chmod: refuse writes in the cache
        if dir is not None and Path(dir) == cache:
            raise PermissionError(13, "Permission denied", str(dir))
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    cache_mod._loaded.clear()
    with pytest.warns(RuntimeWarning, match="not writable"):
        model = gdp.compile(proto, cache_dir=cache)
    close(model(X), affine_oracle(X, scale=3.0))


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_leftovers_of_killed_compiles_are_cleaned_at_the_next_start(tmp_path, fresh):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    host, dead, live = cache_mod._HOST, _dead_pid(), os.getppid()
    stale = [
        cache / f".tmp-{host}-{dead}-0123456789abcdef-x1",
        cache / f".trash-{host}-{dead}-x2",
        cache / ".tmp-0123456789abcdef-old",  # an old gdp's name, two days old
    ]
    kept = [cache / f".tmp-{host}-{live}-0123456789abcdef-x3", cache / ".tmp-0123-recent"]
    for path in stale + kept:
        path.mkdir()
        (path / "model.so").write_bytes(b"half")
    old = time.time() - 2 * 24 * 3600
    os.utime(stale[2], (old, old))
    uncached = Path(tempfile.mkdtemp(prefix=f"{cache_mod.UNCACHED_PREFIX}{host}-{dead}-"))
    uncached_live = Path(tempfile.mkdtemp(prefix=f"{cache_mod.UNCACHED_PREFIX}{host}-{live}-"))
    try:
        gdp.compile(affine((3, 4, 3), scale=4.0), cache_dir=cache)
        assert not any(p.exists() for p in stale) and not uncached.exists()
        assert all(p.exists() for p in kept) and uncached_live.exists()
    finally:
        shutil.rmtree(uncached, ignore_errors=True)
        shutil.rmtree(uncached_live, ignore_errors=True)


# -- bundles and saved models -------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    model = gdp.compile(affine((3, 4, 3), scale=6.0))
    return model.export(tmp_path_factory.mktemp("bundles") / "b")


def _copy(bundle_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "b"
    shutil.copytree(bundle_dir, copy)
    os.chmod(copy, 0o755)
    return copy


def test_an_exported_bundle_is_private_and_loads(exported, tmp_path):
    for path in [exported, *exported.rglob("*")]:
        assert not path.stat().st_mode & 0o022, path
    close(gdp.load(exported)(X), affine_oracle(X, scale=6.0))


@pytest.mark.parametrize("where", ["root", "file", "subdir"])
def test_a_bundle_others_can_write_is_refused(exported, tmp_path, where):
    copy = _copy(exported, tmp_path)
    target = {
        "root": copy,
        "file": next(copy.rglob("*.so")),
        "subdir": next(p for p in copy.rglob("*") if p.is_dir()),
    }[where]
    os.chmod(target, target.stat().st_mode | 0o022)
    with pytest.raises(bundle.BundleError, match=rf"{target}.*not private"):
        gdp.load(copy)


def test_a_bundle_owned_by_another_user_is_refused(exported, tmp_path, monkeypatch):
    copy = _copy(exported, tmp_path)
    if os.geteuid() == 0:
        os.chown(next(copy.rglob("*.so")), 65534, 65534)
    else:
        me = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: me + 1)
    with pytest.raises(bundle.BundleError, match=r"not private.*owner"):
        gdp.load(copy)


def test_a_symlink_in_a_bundle_is_refused(exported, tmp_path):
    copy = _copy(exported, tmp_path)
    library = next(copy.rglob("*.so"))
    library.unlink()
    library.symlink_to(next(exported.rglob("*.so")))
    with pytest.raises(bundle.BundleError, match="symbolic link"):
        gdp.load(copy)


def test_a_saved_model_records_its_checksum_and_an_edited_one_is_refused(tmp_path):
    path = tmp_path / "m.onnx"
    gdp.compile(affine((3, 4, 3), scale=6.0)).save(path)
    saved = onnx.load(str(path))
    assert any(p.key == "gdp.sha256" for p in saved.metadata_props)
    close(gdp.load(path)(X), affine_oracle(X, scale=6.0))
    scale = next(t for t in saved.graph.initializer if t.name == "scale")
    scale.CopyFrom(onnx.numpy_helper.from_array(np.array(60.0, np.float32), "scale"))
    onnx.save(saved, str(path))
    with pytest.raises(FrontendError, match="SHA-256"):
        gdp.load(path)


# -- fork ---------------------------------------------------------------------------------------


def _child(model, x, out) -> None:
    y_sync = model(x)
    handle = gdp.run_async(model, [x])
    gdp.sync()
    out.put((float(y_sync.sum()), float(handle.result()["y"].sum())))


@pytest.mark.parametrize("used", ["sync", "async"])
def test_a_forked_child_runs_models_sync_and_async(used):
    """Was a deadlock in TVM's thread pool (sync) and a run that never ran (async): the parent's
    threads do not exist in the child."""
    model = gdp.compile(affine((256, 256, 3)))  # big enough for TVM's parallel loops
    x = np.ones((256, 256, 3), np.float32)
    if used == "sync":
        model(x)
    else:
        gdp.run_async(model, [x]).result()
        gdp.sync()
    expected = float(affine_oracle(x).sum())
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_child, args=(model, x, out))
    child.start()
    child.join(30)
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail("the forked child hung running the model")
    assert child.exitcode == 0
    assert out.get(timeout=5) == (expected, expected)
    close(model(x), affine_oracle(x))  # the parent still runs


def _child_compiles(model, out) -> None:
    x = np.ones((5, 7, 3), np.float32)
    fresh = gdp.compile(affine((2, 2, 3), scale=11.0))
    out.put((float(model(x).sum()), float(fresh(np.ones((2, 2, 3), np.float32)).sum())))


def test_a_child_forked_while_another_thread_compiles_can_compile():
    """Locks held by a compiling thread at the fork (the model's, the process-wide compile lock)
    stayed held forever in the child."""
    model = gdp.compile(affine((None, None, 3), scale=2.0))
    holding, release = threading.Event(), threading.Event()

    def compiling() -> None:
        with cache_mod.COMPILE_LOCK, model._lock:
            holding.set()
            release.wait(30)

    thread = threading.Thread(target=compiling)
    thread.start()
    holding.wait(10)
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_child_compiles, args=(model, out))
    try:
        child.start()
        child.join(30)
        if child.is_alive():
            child.kill()
            child.join()
            pytest.fail("the forked child hung on a lock held at the fork")
    finally:
        release.set()
        thread.join()
    assert child.exitcode == 0
    assert out.get(timeout=5) == (5 * 7 * 3 * 3.0, 2 * 2 * 3 * 12.0)


# -- threads ------------------------------------------------------------------------------------


def test_compiles_from_many_threads_all_succeed(tmp_path, fresh):
    """Were 4 to 15 of 18 failing (races in TVM's ONNX importer and the onnxscript optimizer)."""
    n = 8
    results: list = [None] * n

    def compile_one(i: int) -> None:
        try:
            model = gdp.compile(affine((3, 4, 3), scale=10.0 + i), cache_dir=tmp_path / "c")
            results[i] = model(X)
        except Exception as err:  # reported below
            results[i] = err

    threads = [threading.Thread(target=compile_one, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    failed = [r for r in results if not isinstance(r, np.ndarray)]
    assert not failed, failed
    for i, y in enumerate(results):
        close(y, affine_oracle(X, scale=10.0 + i))


def _in_thread(fn):
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as err:
            box["error"] = err

    thread = threading.Thread(target=run)
    thread.start()
    return thread, box


def test_sync_in_one_thread_waits_for_that_threads_runs():
    """Was: A's sync() took B's queued tasks, and B's sync() then returned at once, B's run still
    queued."""
    release = threading.Event()
    submitted = threading.Event()

    def a() -> None:
        queue.worker("cpu").submit(release.wait, queue.Task())
        submitted.wait()
        gdp.sync()

    thread_a, _ = _in_thread(a)
    mine = queue.Task()

    def b() -> bool:
        queue.worker("cpu").submit(lambda: "b", mine)
        submitted.set()
        time.sleep(0.2)  # A's sync() is waiting by now
        gdp.sync()
        return mine.done()

    thread_b, box = _in_thread(b)
    threading.Timer(0.5, release.set).start()
    thread_b.join(10)
    thread_a.join(10)
    assert box == {"value": True}


def test_a_failure_is_raised_in_its_own_threads_sync_only():
    def boom():
        raise ValueError("boom in A")

    go_b, a_may_sync = threading.Event(), threading.Event()

    def a() -> None:
        task = queue.Task()
        queue.worker("cpu").submit(boom, task)
        task.wait()
        go_b.set()
        a_may_sync.wait()
        gdp.sync()

    thread_a, box_a = _in_thread(a)
    go_b.wait(10)

    def b() -> str:
        gdp.run_async(gdp.compile(affine((3, 4, 3))), [X])
        gdp.sync()  # B's run is fine: A's failure is not B's
        return "ok"

    thread_b, box_b = _in_thread(b)
    thread_b.join(30)
    a_may_sync.set()
    thread_a.join(10)
    assert box_b == {"value": "ok"}
    assert isinstance(box_a.get("error"), GdpError) and "boom in A" in str(box_a["error"])


def test_a_failure_of_an_ended_thread_is_raised_by_the_next_sync():
    def boom():
        raise ValueError("orphan")

    def a() -> None:
        queue.worker("cpu").submit(boom, queue.Task()).wait()

    thread, _ = _in_thread(a)
    thread.join(10)
    with pytest.raises(GdpError, match="orphan"):
        gdp.sync()


# -- back-pressure and memory -------------------------------------------------------------------


def test_a_full_queue_makes_the_submitter_wait(monkeypatch):
    monkeypatch.setattr(queue, "MAX_QUEUED", 4)
    worker = queue.Worker("test-back-pressure")
    release = threading.Event()
    worker.submit(release.wait, queue.Task())
    time.sleep(0.1)  # the worker took the blocker: 4 more fit in the queue

    def submit_six() -> int:
        for _ in range(6):
            worker.submit(lambda: None, queue.Task())
        return 6

    thread, box = _in_thread(submit_six)
    thread.join(0.5)
    assert thread.is_alive() and not box  # waiting for room
    release.set()
    thread.join(10)
    assert box == {"value": 6}
    gdp.sync()


def test_a_full_queue_refuses_a_run_asked_not_to_wait(monkeypatch):
    monkeypatch.setattr(queue, "MAX_QUEUED", 2)
    monkeypatch.setattr(queue, "_workers", {})  # a fresh cpu worker, its queue of 2
    model = gdp.compile(affine((3, 4, 3), scale=1.25))
    release = threading.Event()
    queue.worker("cpu").submit(release.wait, queue.Task())
    time.sleep(0.1)  # the worker took the blocker: 2 more fit
    handles = [gdp.run_async(model, [X], block=False) for _ in range(2)]
    with pytest.raises(QueueFullError, match="2 runs are queued"):
        gdp.run_async(model, [X], block=False)
    release.set()
    gdp.sync()
    for handle in handles:
        close(handle.result()["y"], affine_oracle(X, scale=1.25))


def test_finished_unsynced_runs_do_not_keep_their_outputs():
    """Was: up to 1024 finished runs' outputs kept alive until gdp.sync()."""
    model = gdp.compile(affine((64, 64, 3)))
    x = np.ones((64, 64, 3), np.float32)
    refs = []
    for _ in range(20):
        handle = gdp.run_async(model, [x])
        refs.append(weakref.ref(handle.result()["y"]))
        del handle
    gc.collect()
    assert all(r() is None for r in refs)


def test_an_input_too_large_for_memory_is_an_input_error():
    """Was Python's own MemoryError (numpy's _ArrayMemoryError) escaping."""
    model = gdp.compile(affine((None, None, 3)))
    huge = np.broadcast_to(np.float32(1), (1 << 20, 1 << 20, 3))  # a view of 12 TiB
    with pytest.raises(InputError, match=r"input 'x'.*out of memory"):
        model(huge)
    with pytest.raises(InputError, match=r"input 'x'.*out of memory"):
        gdp.run_async(model, {"x": huge})
    with pytest.raises(InputError, match=r"input 'x'.*out of memory"):
        model.run_batch([huge])


FILE_SIZE_CHILD = """
import json, resource, sys
import numpy as np, onnx, gdp
from tests.models import affine
soft, hard = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard if hard >= 0 else resource.RLIM_INFINITY))
try:
    y = gdp.compile(affine((5, 6, 3)), target="cpu")(np.full((5, 6, 3), 2.0, np.float32))
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    print(json.dumps({"y": float(y[0, 0, 0]), "limit": limit}))
except gdp.CompileError as err:
    print(json.dumps({"error": str(err)}))
"""


@pytest.mark.parametrize("hard", [-1, 10_000])
def test_a_file_size_limit_is_no_crash(hard, tmp_path):
    """A soft file-size limit below a library's size (`ulimit -f`): the process died (SIGXFSZ,
    or LLVM's "IO failure on output stream" abort). Now the compile lifts it to the hard limit
    and puts it back; a hard limit too small is a CompileError."""
    result = run_child(FILE_SIZE_CHILD, tmp_path / "cache", "10000", str(hard))
    if hard < 0:
        assert result == {"y": 5.0, "limit": 10_000}
    else:
        assert "RLIMIT_FSIZE" in result["error"]


def test_an_empty_image_to_a_free_size_model_is_an_input_error():
    """A zero extent where the signature has a free one: an ExecutionError from TVM's stride
    check ("Mismatched p0.strides") before; now an InputError naming the input, from every
    entry point."""
    model = gdp.compile(affine((None, None, 3)), target="cpu")
    for shape in [(0, 5, 3), (5, 0, 3), (0, 0, 3)]:
        empty = np.zeros(shape, np.float32)
        with pytest.raises(InputError, match=r"input 'x'.*empty array"):
            model(empty)
        with pytest.raises(InputError, match=r"input 'x'.*empty array"):
            gdp.run_async(model, {"x": empty})
        with pytest.raises(InputError, match=r"input 'x'.*empty array"):
            model.run_batch([empty])
    np.testing.assert_array_equal(model(X), affine_oracle(X))  # the model still runs
