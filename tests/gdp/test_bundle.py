"""Ahead-of-time bundles (gdp.bundle): `Model.export` / `gdp export` write a model's executables
with a checksummed manifest; `gdp.load(DIR)` runs them in a fresh process whose compilers are
blocked, checked against onnxruntime; it refuses another toolchain or CPU, a damaged file, and a
shape the bundle lacks, and never compiles."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import gdp
from gdp import cli
from gdp.bundle import BundleError, BundleShapeError

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = "manifest.json"


def small_graph() -> onnx.ModelProto:
    """uint8 HxWx3 image -> float (x/255 - mean)/std per channel, and the image's sum per row:
    free H and W."""
    image = helper.make_tensor_value_info("image", TensorProto.UINT8, ["h", "w", 3])
    out = helper.make_tensor_value_info("normalized", TensorProto.FLOAT, ["h", "w", 3])
    rows = helper.make_tensor_value_info("row_sum", TensorProto.FLOAT, ["h"])
    consts = [
        helper.make_tensor("scale", TensorProto.FLOAT, [], [1 / 255.0]),
        helper.make_tensor("mean", TensorProto.FLOAT, [3], [0.485, 0.456, 0.406]),
        helper.make_tensor("std", TensorProto.FLOAT, [3], [0.229, 0.224, 0.225]),
        helper.make_tensor("axes", TensorProto.INT64, [2], [1, 2]),
    ]
    nodes = [
        helper.make_node("Cast", ["image"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["f", "scale"], ["x"]),
        helper.make_node("Sub", ["x", "mean"], ["centred"]),
        helper.make_node("Div", ["centred", "std"], ["normalized"]),
        helper.make_node("ReduceSum", ["f", "axes"], ["row_sum"], keepdims=0),
    ]
    graph = helper.make_graph(nodes, "normalize", [image], [out, rows], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def oracle(path: Path, image: np.ndarray) -> dict[str, np.ndarray]:
    """onnxruntime on the source graph: independent of gdp's compile."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {"image": image}), strict=True))


def image(shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def check(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    np.testing.assert_allclose(got["normalized"], want["normalized"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["row_sum"], want["row_sum"], rtol=1e-6)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The source ONNX file, a cache, and two bundles: a generic model's (its shape-generic
    executable plus 4x6x3) and a per-shape model's (4x6x3 only)."""
    base = tmp_path_factory.mktemp("bundle")
    source = base / "normalize.onnx"
    onnx.save(small_graph(), str(source))
    cache = base / "cache"
    generic = gdp.compile(str(source), target="cpu", cache_dir=cache)
    assert generic.report()["shapes_mode"] == "generic", generic.report()["generic_error"]
    generic.export(base / "generic", shapes=["image=4x6x3"])
    per_shape = gdp.compile(str(source), target="cpu", cache_dir=cache, specialize="always")
    per_shape(image((4, 6, 3)))
    per_shape.export(base / "per_shape")  # the shapes it compiled so far
    return {"base": base, "source": source, "cache": cache}


def copy(made, name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(made["base"] / name, target)
    return target


# -- a fresh process, compilers blocked --------------------------------------------------------

CHILD = """
import importlib.abc, json, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "tf2onnx", "keras", "tf_keras"):
            raise ImportError(f"{name} is blocked: loading a bundle must not need it")
        return None

sys.meta_path.insert(0, Blocked())

import tvm, tvm.relax, tvm.relax.vm_build, tvm.tirx

def compiler(*args, **kwargs):
    raise AssertionError("a compiler entry point was called while loading a bundle")

tvm.compile = tvm.build = tvm.relax.build = tvm.relax.vm_build.build = compiler
tvm.tirx.build = compiler

import numpy as np
import gdp

bundle, inputs, outputs = sys.argv[1:]
model = gdp.load(bundle)
arrays = np.load(inputs)
results = {}
for name in arrays.files:
    got = model(arrays[name])
    for output, value in got.items():
        results[f"{name}/{output}"] = value
np.savez(outputs, **results)
report = model.report()
print(json.dumps({
    "cache": report["cache"],
    "bundle": report["bundle"],
    "shapes_mode": report["shapes_mode"],
    "tensorflow": any(m.split(".")[0] in ("tensorflow", "tf2onnx") for m in sys.modules),
}))
"""


# The child with TVM's runtime alone (TVM_USE_RUNTIME_LIB=1): no compiler to block, and none
# may be loaded.
RUNTIME_ONLY_CHILD = CHILD.replace(
    CHILD[CHILD.index("import tvm, tvm.relax") : CHILD.index("import numpy as np")],
    """
import tvm

def compiler_loaded():
    with open("/proc/self/maps") as maps:
        return "libtvm_compiler" in maps.read()

assert not compiler_loaded(), "TVM_USE_RUNTIME_LIB=1 loaded the compiler"
""",
).replace("report = model.report()", "assert not compiler_loaded()\nreport = model.report()")


@pytest.mark.parametrize("runtime_only", [False, True], ids=["compiler-blocked", "runtime-only"])
def test_a_bundle_runs_in_a_fresh_process_without_any_compiler(made, tmp_path, runtime_only):
    cases = {"bundled": image((4, 6, 3), 1), "other": image((5, 7, 3), 2)}
    np.savez(tmp_path / "in.npz", **cases)
    empty_cache = tmp_path / "empty-cache"
    env = {**os.environ, "GDP_CACHE_DIR": str(empty_cache), "PYTHONPATH": str(ROOT)}
    if runtime_only:
        env["TVM_USE_RUNTIME_LIB"] = "1"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(RUNTIME_ONLY_CHILD if runtime_only else CHILD),
            str(made["base"] / "generic"),
            str(tmp_path / "in.npz"),
            str(tmp_path / "out.npz"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.splitlines()[-1])
    assert facts["cache"] == "bundle"
    assert facts["tensorflow"] is False
    assert facts["shapes_mode"] == "generic"
    assert [e["shapes"] for e in facts["bundle"]["executables"]] == [
        "image=?x?x3",
        "image=4x6x3",
    ]
    assert facts["bundle"]["loaded"] == 2
    got = np.load(tmp_path / "out.npz")
    for name, array in cases.items():
        want = oracle(made["source"], array)
        check({o: got[f"{name}/{o}"] for o in want}, want)
    # Nothing was compiled into (or read from) a cache.
    assert not empty_cache.exists() or not any(empty_cache.iterdir())


# -- refusals ---------------------------------------------------------------------------------


def test_a_shape_the_bundle_lacks_is_an_error_not_a_compile(made, monkeypatch):
    import gdp.model
    import gdp.runtime.cache

    def never(*args, **kwargs):
        raise AssertionError("a bundle compiled")

    monkeypatch.setattr(gdp.model, "obtain", never)
    monkeypatch.setattr(gdp.runtime.cache, "obtain", never)
    model = gdp.load(made["base"] / "per_shape")
    assert model.report()["cache"] == "bundle"
    x = image((4, 6, 3), 3)
    check(model(x), oracle(made["source"], x))
    with pytest.raises(BundleShapeError, match=r"image=5x7x3.*holds image=4x6x3") as err:
        model(image((5, 7, 3)))
    assert isinstance(err.value, gdp.InputError)


def test_a_tampered_fingerprint_is_refused(made, tmp_path):
    bundle = copy(made, "generic", tmp_path)
    manifest = json.loads((bundle / MANIFEST).read_text())
    manifest["fingerprint"] = manifest["fingerprint"].replace("tvm-", "tvm-0.0.1-other-")
    (bundle / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="built for runtime 'tvm-0.0.1-other-.*export the"):
        gdp.load(bundle)


def test_a_bundle_for_another_cpu_is_refused(made, tmp_path):
    bundle = copy(made, "generic", tmp_path)
    manifest = json.loads((bundle / MANIFEST).read_text())
    manifest["host"]["cpu"] = "sapphirerapids"
    manifest["host"]["cpu_features"] += ["avx512-not-on-this-cpu"]
    (bundle / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="'sapphirerapids'.* lacks avx512-not-on-this-cpu"):
        gdp.load(bundle)


def test_another_gdp_version_is_refused(made, tmp_path):
    bundle = copy(made, "generic", tmp_path)
    manifest = json.loads((bundle / MANIFEST).read_text())
    manifest["gdp"] = "0.0.0"
    (bundle / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"written by gdp 0\.0\.0, this is gdp"):
        gdp.load(bundle)


@pytest.mark.parametrize("damage", ["flip", "truncate", "remove"])
def test_a_damaged_file_is_refused(made, tmp_path, damage):
    bundle = copy(made, "generic", tmp_path)
    manifest = json.loads((bundle / MANIFEST).read_text())
    library = (
        bundle / manifest["executables"][0]["dir"] / manifest["executables"][0]["meta"]["files"][0]
    )
    data = bytearray(library.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
        library.write_bytes(bytes(data))
    elif damage == "truncate":
        library.write_bytes(bytes(data[: len(data) // 2]))
    else:
        library.unlink()
    expected = "is missing" if damage == "remove" else "does not match its checksum"
    with pytest.raises(BundleError, match=expected):
        gdp.load(bundle)


def test_export_refuses_what_it_cannot_bundle(made, tmp_path):
    model = gdp.load(made["base"] / "per_shape")
    with pytest.raises(BundleError, match="loaded from the bundle"):
        model.export(tmp_path / "again")
    lazy = gdp.compile(str(made["source"]), target="cpu", cache_dir=made["cache"])
    (tmp_path / "occupied").mkdir()
    (tmp_path / "occupied" / "notes.txt").write_text("mine")
    with pytest.raises(BundleError, match="exists and is not a gdp bundle"):
        lazy.export(tmp_path / "occupied")
    assert (tmp_path / "occupied" / "notes.txt").read_text() == "mine"
    with pytest.raises(BundleError, match=r"input 'image' is uint8\[None, None, 3\], got 4x6"):
        lazy.export(tmp_path / "b", shapes=["image=4x6"])
    with pytest.raises(BundleError, match="unknown input 'mask'"):
        lazy.export(tmp_path / "b", shapes=[{"mask": (4, 6)}])


# -- the command line -------------------------------------------------------------------------


def test_gdp_export_on_the_command_line(made, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GDP_CACHE_DIR", str(made["cache"]))
    out = tmp_path / "cli-bundle"
    argv = ["export", str(made["source"]), "--target", "cpu", "--shapes", "image=4x6x3"]
    assert cli.main([*argv, "-o", str(out)]) == 0
    told = json.loads(capsys.readouterr().out)
    assert told["path"] == str(out) and told["target"] == "cpu"
    assert [e["shapes"] for e in told["executables"]] == ["image=?x?x3", "image=4x6x3"]
    manifest = json.loads((out / MANIFEST).read_text())
    assert set(manifest["files"]) >= {"source.onnx", "executables/0/model.so"}
    model = gdp.load(out)
    x = image((4, 6, 3), 5)
    check(model(x), oracle(made["source"], x))
    assert model.report()["bundle"]["path"] == str(out)
    # Exporting again replaces the bundle; a bad shape is an error naming the input.
    assert cli.main([*argv, "-o", str(out)]) == 0
    capsys.readouterr()
    assert cli.main(["export", str(made["source"]), "--shapes", "image=4x6", "-o", str(out)]) == 2
    assert "input 'image'" in capsys.readouterr().err
    assert gdp.load(out).report()["cache"] == "bundle"  # the failed export left it whole
