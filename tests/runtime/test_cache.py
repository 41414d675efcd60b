"""The compile cache: shared across processes, atomic, private, and robust to damage."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import gdp
import gdp.runtime.cache
from tests import ROOT
from tests.children import run_child
from tests.models import affine, affine_oracle

# A fresh process that compiles the ONNX file and prints where the code came from. It imports
# neither TensorFlow nor TVM's ONNX importer unless it must compile.
CHILD = """
import sys, json, numpy as np, gdp
model = gdp.compile(sys.argv[1])
x = np.full((5, 6, 3), 2.0, np.float32)
y = model(x)
mods = sys.modules
print(json.dumps({"cache": model.report()["cache"], "y": float(y[0, 0, 0]),
                  "tensorflow": "tensorflow" in mods,
                  "importer": "tvm.relax.frontend.onnx" in mods}))
"""


def test_second_process_loads_instead_of_compiling(tmp_path):
    path = tmp_path / "affine.onnx"
    onnx.save(affine((5, 6, 3)), path)
    cache = tmp_path / "cache"
    first = run_child(CHILD, cache, str(path))
    second = run_child(CHILD, cache, str(path))
    assert first["cache"] == "compiled" and first["importer"]
    assert second["cache"] == "disk"
    assert not second["importer"] and not second["tensorflow"]
    assert first["y"] == second["y"] == 5.0
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700


def replace_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(".new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _entry(cache: Path) -> Path:
    entries = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1
    return entries[0]


@pytest.mark.parametrize("damage", ["truncate", "flip", "manifest", "missing"])
def test_damaged_entry_is_rebuilt_not_loaded(tmp_path, damage, monkeypatch):
    monkeypatch.setattr(gdp.runtime.cache, "_loaded", {})  # loaded code is shared by cache key
    cache = tmp_path / "cache"
    proto = affine((3, 4, 3), scale=3.0)
    x = np.random.default_rng(0).random((3, 4, 3), np.float32)
    model = gdp.compile(proto, cache_dir=cache)
    assert model.report()["cache"] == "compiled"
    entry = _entry(cache)
    library = entry / "model.so"
    # Damage goes through a new file: this process has the library mapped, and rewriting a mapped
    # file in place would crash it (SIGBUS), whatever gdp did.
    if damage == "truncate":
        replace_bytes(library, library.read_bytes()[:100])
    elif damage == "flip":
        data = bytearray(library.read_bytes())
        data[len(data) // 2] ^= 0xFF
        replace_bytes(library, bytes(data))
    elif damage == "manifest":
        (entry / "manifest.json").write_text("{ not json")
    else:
        library.unlink()
    # Forget the in-process copy, as a new process would not have it.
    monkeypatch.setattr(gdp.runtime.cache, "_loaded", {})
    again = gdp.compile(proto, cache_dir=cache)
    assert again.report()["cache"] == "compiled"
    np.testing.assert_array_equal(again(x), affine_oracle(x, scale=3.0))
    manifest = json.loads((_entry(cache) / "manifest.json").read_text())
    assert manifest["files"]["model.so"]["size"] == (_entry(cache) / "model.so").stat().st_size


def test_same_graph_hits_memory_and_different_options_miss(tmp_path):
    cache = tmp_path / "cache"
    gdp.compile(affine((2, 2, 3)), cache_dir=cache)
    assert gdp.compile(affine((2, 2, 3)), cache_dir=cache).report()["cache"] == "memory"
    other = gdp.compile(affine((2, 2, 3), shift=5.0), cache_dir=cache)
    assert other.report()["cache"] == "compiled"
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 2
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp")]  # no leftovers


TF_CHILD = """
import json, numpy as np, gdp
from tests.pipelines import NORMALIZE_BLUR
model = gdp.compile(NORMALIZE_BLUR)
model(np.zeros((40, 30, 3), np.uint8))
print(json.dumps({"cache": model.report()["cache"]}))
"""


def test_tf_function_hits_the_cache_from_a_new_process(tmp_path):
    """tf2onnx names tensors differently in every process; the cache key must not care."""
    seen = [run_child(TF_CHILD, tmp_path / "cache")["cache"] for _ in range(2)]
    assert seen == ["compiled", "disk"]


def test_unwritable_cache_dir_compiles_without_caching(tmp_path, monkeypatch):
    monkeypatch.setattr(gdp.runtime.cache, "_loaded", {})
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory should go")
    with pytest.warns(RuntimeWarning, match="not writable"):
        model = gdp.compile(affine((2, 3, 3), shift=7.0), cache_dir=blocker / "cache")
    x = np.ones((2, 3, 3), np.float32)
    np.testing.assert_array_equal(model(x), affine_oracle(x, shift=7.0))


def test_entry_that_will_not_load_is_rebuilt(tmp_path, monkeypatch):
    """Checksums match but the library does not load (say, another toolchain wrote it)."""
    from gdp.runtime.backends import get_backend

    monkeypatch.setattr(gdp.runtime.cache, "_loaded", {})
    cache = tmp_path / "cache"
    proto = affine((2, 2, 3), scale=5.0)
    gdp.compile(proto, cache_dir=cache)
    monkeypatch.setattr(gdp.runtime.cache, "_loaded", {})
    backend = get_backend("tvm-llvm")
    real_load, calls = backend.load, []

    def load_fails_once(entry, meta):
        calls.append(entry)
        if len(calls) == 1:
            raise OSError("wrong ELF class: ELFCLASS32")
        return real_load(entry, meta)

    monkeypatch.setattr(backend, "load", load_fails_once)
    model = gdp.compile(proto, cache_dir=cache)
    assert model.report()["cache"] == "compiled" and len(calls) == 2
    x = np.ones((2, 2, 3), np.float32)
    np.testing.assert_array_equal(model(x), affine_oracle(x, scale=5.0))


def test_processes_compiling_one_key_take_turns(tmp_path):
    """Three processes compile one model into one cache at once: the key's lock file makes the
    others wait for the first and load its entry (before, each compiled its own copy)."""
    path = tmp_path / "affine.onnx"
    onnx.save(affine((5, 6, 3)), path)
    env = dict(os.environ, GDP_CACHE_DIR=str(tmp_path / "cache"))
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for _ in range(3)
    ]
    results = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(r["cache"] for r in results) == ["compiled", "disk", "disk"]
    assert all(r["y"] == 5.0 for r in results)
    assert (tmp_path / "cache" / ".locks").is_dir()
