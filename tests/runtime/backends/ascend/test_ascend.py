"""The npu target without an Ascend card.

- Export: the six workloads' npu graphs (opset 13, static shapes, only CANN's ONNX operators,
  fp16 where the input is float), checked on every run; gdp.cv2's accelerated functions too.
- npu-emulate: the npu's exact graph on this CPU, against each workload's OpenCV/NumPy peer
  within the FP16 issue's bounds for fp16 arithmetic.
- ATC driver: the command line, ATC's errors shown verbatim, artifacts where ATC is missing,
  against a recording fake `atc`.
- pyACL adapter: a PROTOCOL test against a recording fake of the `acl` module (fake_acl.py):
  return codes checked, each .om loaded once, buffers reused and freed, the stream synchronised
  before results are read, the teardown order. It is not hardware verification.
"""

from __future__ import annotations

import importlib
import os
import shutil
import stat
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest

import gdp
from gdp.errors import CompileError, DeviceError, TargetError, UnsupportedOpError
from gdp.runtime.backends.ascend import acl_runtime
from gdp.runtime.backends.ascend.backend import AscendBackend, parse_npu_smi
from gdp.runtime.backends.ascend.cann_onnx_ops import CANN_ONNX_OPS
from gdp.runtime.backends.ascend.export import export
from gdp.runtime.backends.tvm.llvm import TvmLlvmBackend
from tests import SAMPLES
from tests.oracle import run_onnxruntime
from tests.runtime.backends.ascend.fake_acl import FakeAcl

sys.path.insert(0, str(SAMPLES))
import workload

SOC = "Ascend310P3"
WORKLOADS = ["tone", "gaussian", "sharpness", "canny", "mean_std", "knn"]


def exported_graph(program, inputs: dict, tmp_path: Path, **options) -> onnx.ModelProto:
    """The graph gdp hands ATC for `program` on `inputs` (no ATC here: compile writes it as an
    artifact and says ATC is missing)."""
    artifacts = tmp_path / "artifacts"
    ranges = {k: (float(v.min()), float(v.max())) for k, v in inputs.items() if v.dtype.kind == "f"}
    with pytest.raises(CompileError, match="missing ATC"):
        model = gdp.compile(
            program,
            target="npu",
            soc_version=SOC,
            artifacts_dir=str(artifacts),
            cache_dir=tmp_path / "cache",
            input_ranges=ranges,
            **options,
        )
        model(inputs)  # where the signature left shapes open, compiling happens here
    model = onnx.load(artifacts / "model.onnx")
    (artifacts / "model.onnx").unlink()
    return model


def check_exported(model: onnx.ModelProto, opset: int = 13) -> None:
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [opset]
    for node in model.graph.node:
        low, high = CANN_ONNX_OPS[node.op_type]
        assert low <= opset <= high, node.op_type
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    g = inferred.graph
    for value in [*g.input, *g.output, *g.value_info]:
        dims = value.type.tensor_type.shape.dim
        assert all(d.HasField("dim_value") for d in dims), value.name
    onnx.checker.check_model(model, full_check=True)


# Workloads whose npu graph computes in fp16 (mean_std computes in integers; canny partly
# in float, where tf2onnx writes its comparisons so).
FP16_WORKLOADS = ("tone", "gaussian", "sharpness", "canny", "knn")


@pytest.mark.parametrize("name", WORKLOADS)
def test_workloads_export_for_atc(name, tmp_path):
    module = importlib.import_module(name)
    if name == "canny":
        photo = module.inputs()["rgb"]
        maps = {k: np.zeros(photo.shape[:2], np.uint8) for k in ("candidates", "strong")}
        programs = [(module.make_prepare(), {"rgb": photo}), (module.make_track(), maps)]
    else:
        programs = [(module.program, module.inputs())]
    halves = []
    for program, inputs in programs:
        model = exported_graph(program, inputs, tmp_path)
        check_exported(model)
        inferred = onnx.shape_inference.infer_shapes(model).graph.value_info
        halves += [v for v in inferred if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16]
    assert bool(halves) == (name in FP16_WORKLOADS), name


def test_export_refuses_what_atc_cannot_take():
    from onnx import TensorProto, helper

    def graph(op: str, opset: int, **attrs) -> onnx.ModelProto:
        node = helper.make_node(op, ["x"], ["y"], **attrs)
        g = helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        )
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])

    with pytest.raises(UnsupportedOpError, match="'HardSwish'.*does not exist at opset 13"):
        export(graph("HardSwish", 17))
    with pytest.raises(UnsupportedOpError, match="'Shrink'.*not on CANN's ONNX operator list"):
        export(graph("Shrink", 13))
    with pytest.raises(TargetError, match="opset: expected an int in 11..18, got 19"):
        export(graph("Relu", 17), opset=19)
    dynamic = graph("Relu", 13)
    dynamic.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    with pytest.raises(CompileError, match="static shapes"):
        export(dynamic)
    assert export(graph("Relu", 17), opset=11).opset_import[0].version == 11
    assert export(graph("Relu", 13), opset=18).opset_import[0].version == 18


def test_npu_and_emulator_take_the_same_rewrites():
    from gdp.runtime.backends.ascend.npu_emulate import NpuEmulateBackend

    assert NpuEmulateBackend.required_rewrites == AscendBackend.required_rewrites
    # What TVM's importer needs (the cpu adds forms of its own schedules: float64 variance,
    # row-scan reductions, which the npu has no use for).
    importer = set(TvmLlvmBackend.required_rewrites) - {
        "variance_in_one_pass",
        "reductions_as_row_scans",
    }
    assert importer <= set(AscendBackend.required_rewrites)


@pytest.mark.parametrize("name", ["tone", "gaussian", "sharpness", "canny", "mean_std", "knn"])
def test_emulator_matches_the_peers_within_the_fp16_bounds(name, tmp_path):
    """The npu's graph (fp16 with its fp16 arithmetic, opset 13) against OpenCV/NumPy in fp32:
    within the bounds test_fp16 holds for fp16 arithmetic; canny's edges identical."""
    from tests.rewrites.test_fp16 import GDP_BOUND, relative_error

    module = importlib.import_module(name)
    compiled = workload.build(module, "npu-emulate")
    inputs = module.inputs()
    got, want = compiled(inputs), module.peer(**inputs)
    for key in want:
        if name == "canny":
            np.testing.assert_array_equal(got[key], want[key])
        else:
            bound = GDP_BOUND["fp16"][name]
            assert relative_error(got[key], want[key]) <= bound, key
    for model in getattr(compiled, "models", [compiled]):
        report = model.report()
        assert report["target"] == "npu-emulate" and report["precision"] == "fp16"


# -- the ATC driver ---------------------------------------------------------------------------

FAKE_ATC = """\
#!{python}
# A recording fake of ATC: writes its argv to argv.txt beside the model and "compiles" by
# copying the ONNX file to <output>.om (fake_acl.py runs it with onnxruntime).
import shutil, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
with open(args["model"] + ".argv.txt", "w") as log:
    log.write("\\n".join(sys.argv[1:]))
if {fail!r}:
    print("ATC start working now, please wait for a moment.")
    print("E10001: Value [x] for parameter [--input_shape] is invalid.", file=sys.stderr)
    sys.exit(1)
shutil.copyfile(args["model"], args["output"] + ".om")
print("ATC run success, welcome to the next use.")
"""


@pytest.fixture
def fake_npu(tmp_path, monkeypatch):
    """A fake `atc` on PATH and a fake `acl` module; the ACL runtime torn down after."""

    def install(fail_atc: bool = False, **acl_options) -> FakeAcl:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        atc = bin_dir / "atc"
        atc.write_text(FAKE_ATC.format(python=sys.executable, fail=fail_atc))
        atc.chmod(atc.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        fake = FakeAcl(**acl_options)
        monkeypatch.setitem(sys.modules, "acl", fake)
        acl_runtime.reset_runtime()
        return fake

    yield install
    acl_runtime.reset_runtime()


def sharpness_on_npu(tmp_path, **options) -> gdp.Model:
    module = importlib.import_module("sharpness")
    return gdp.compile(
        module.program, target="npu", soc_version=SOC, cache_dir=tmp_path / "cache", **options
    )


def test_atc_command_line(fake_npu, tmp_path):
    fake_npu()
    sharpness_on_npu(tmp_path)
    (argv_file,) = (tmp_path / "cache").rglob("*.argv.txt")
    argv = argv_file.read_text().splitlines()
    assert "--framework=5" in argv
    assert f"--soc_version={SOC}" in argv
    assert "--input_shape=rgb:1080,1920,3" in argv
    assert "--precision_mode=must_keep_origin_dtype" in argv  # gdp does its own fp16
    assert "--log=error" in argv and "--input_format=ND" in argv
    assert any(a.startswith("--model=") and a.endswith("model.onnx") for a in argv)


def test_atc_errors_are_shown_verbatim_and_do_not_poison_the_cache(fake_npu, tmp_path):
    fake_npu(fail_atc=True)
    with pytest.raises(CompileError, match=r"ATC failed \(exit 1\)[\s\S]*E10001: Value \[x\]"):
        sharpness_on_npu(tmp_path)
    fake_npu(fail_atc=False)
    sharpness_on_npu(tmp_path)  # compiles afresh: nothing of the failed build was kept


def test_without_atc_the_artifacts_are_written(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    artifacts = tmp_path / "out"
    with pytest.raises(CompileError, match="missing ATC.*atc command and a README are in"):
        sharpness_on_npu(tmp_path, artifacts_dir=str(artifacts))
    assert sorted(p.name for p in artifacts.iterdir()) == ["README.md", "atc.sh", "model.onnx"]
    script = (artifacts / "atc.sh").read_text()
    assert f"--soc_version={SOC}" in script and "--model=model.onnx" in script
    check_exported(onnx.load(artifacts / "model.onnx"))
    with pytest.raises(CompileError, match="pass artifacts_dir="):
        sharpness_on_npu(tmp_path)


def test_soc_version_from_npu_smi():
    table = textwrap.dedent(
        """\
        +-------------------------------+-----------------+------------------------------------+
        | npu-smi 25.2.0                                   Version: 25.2.0                     |
        +-------------------------------+-----------------+------------------------------------+
        | NPU     Name                  | Health          | Power(W)     Temp(C)               |
        | Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)      |
        +===============================+=================+====================================+
        | 0       310P3                 | OK              | NA           48                    |
        | 0       0                     | 0000:01:00.0    | 0            1851 / 21527          |
        +===============================+=================+====================================+
        """
    )
    assert parse_npu_smi(table) == "Ascend310P3"
    assert parse_npu_smi("no table here") is None


# -- the pyACL adapter: protocol tests against the recording fake ------------------------------


def test_protocol_load_once_reuse_buffers_sync_before_read_and_teardown_order(fake_npu, tmp_path):
    fake = fake_npu(devices=1)
    model = sharpness_on_npu(tmp_path)
    module = importlib.import_module("sharpness")
    photo = module.inputs()["rgb"]
    want = module.peer(photo)["sharpness"]
    for _ in range(3):
        got = model(photo)
        np.testing.assert_allclose(got, want, rtol=2e-3)
    out = {"sharpness": np.zeros((), np.float32)}
    gdp.run_async(model, {"rgb": photo}, out)  # the same async semantics as the cpu target
    gdp.sync()
    np.testing.assert_allclose(out["sharpness"], want, rtol=2e-3)
    assert fake.violations == []
    assert fake.log.count("acl.init") == 1
    assert list(fake.loads.values()) == [1]  # the .om loaded once
    assert fake.log.count("acl.rt.malloc") == 2  # one input, one output: allocated once
    # four runs here and one at compile time: gdp.compile's verification against TF
    assert fake.log.count("acl.mdl.execute_async") == 5
    assert fake.log.count("acl.rt.synchronize_stream") == 5
    acl_runtime.reset_runtime()
    assert fake.violations == []  # teardown order held (the fake checks each step)
    log = fake.log
    first_context_gone = log.index("acl.rt.destroy_context")
    for step in ("acl.mdl.unload", "acl.rt.free", "acl.mdl.destroy_dataset"):
        assert len(log) - 1 - log[::-1].index(step) < first_context_gone, step
    assert fake.log[-2:] == ["acl.rt.reset_device", "acl.finalize"]
    assert not fake.memory and not fake.models and not fake.contexts


def test_protocol_return_codes_become_device_errors(fake_npu, tmp_path):
    fake = fake_npu(devices=1)
    model = sharpness_on_npu(tmp_path)
    photo = importlib.import_module("sharpness").inputs()["rgb"]
    fake.fail["acl.mdl.execute_async"] = 507011
    with pytest.raises(DeviceError, match="acl.mdl.execute_async failed with ACL error 507011"):
        model(photo)
    model(photo)  # the model is still usable
    fake.fail["acl.rt.memcpy"] = 100000
    with pytest.raises(DeviceError) as caught:
        model(photo)
    assert caught.value.code == 100000 and caught.value.call == "acl.rt.memcpy (input)"
    assert fake.violations == []


def test_protocol_device_manager_picks_the_idlest_device(fake_npu):
    fake = fake_npu(devices=2)
    rt = acl_runtime.runtime()
    first = rt.acquire(None)
    second = rt.acquire(None)  # the first is busy: the other card
    assert (first, second) == (0, 1)
    rt.release(first)
    assert rt.acquire(None) == 0
    with pytest.raises(TargetError, match="device: expected an id in 0..1, got 5"):
        rt.acquire(5)
    assert fake.violations == []


def test_protocol_profiling(fake_npu, tmp_path):
    fake = fake_npu(devices=1)
    model = sharpness_on_npu(tmp_path)
    photo = importlib.import_module("sharpness").inputs()["rgb"]
    handle = gdp.run_async(model, {"rgb": photo}, profile=True)
    gdp.sync()
    profile = handle.profile
    assert profile.trace_dir and profile.execute_s > 0
    shutil.rmtree(profile.trace_dir)  # acl.prof's directory: the user's to read, a test's to remove
    calls = [c for c in fake.log if c.startswith("acl.prof")]
    assert calls == [
        "acl.prof.init",
        "acl.prof.create_config",
        "acl.prof.start",
        "acl.prof.stop",
        "acl.prof.destroy_config",
    ]
    acl_runtime.reset_runtime()
    assert fake.log[-1] == "acl.finalize" and "acl.prof.finalize" in fake.log
    assert fake.violations == []


def test_without_pyacl_the_error_says_what_to_install(fake_npu, tmp_path, monkeypatch):
    fake_npu()
    monkeypatch.setitem(sys.modules, "acl", None)  # import acl -> ImportError
    with pytest.raises(TargetError, match="`acl` module is not installed"):
        sharpness_on_npu(tmp_path)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16"])
def test_small_integer_arithmetic_widened_wraps_like_numpy(dtype):
    """((a + b) * a - b) / c on small integers (with overflow): the widened graph (what opsets
    11..13 can hold) on onnxruntime against NumPy's wrap-around arithmetic."""
    from onnx import helper

    from gdp.rewrites.rules.small_integer_arithmetic_widened import (
        RULE as small_integer_arithmetic_widened,
    )

    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    signed = np.dtype(dtype).kind == "i"
    nodes = [
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Mul", ["s", "a"], ["p"]),
        helper.make_node("Sub", ["p", "b"], ["d"]),
    ]
    nodes.append(helper.make_node("Div", ["d", "c"], ["y"]) if not signed else None)
    nodes = [n for n in nodes if n is not None]
    out = "d" if signed else "y"  # ONNX truncates a signed division, NumPy floors it
    inputs = ["a", "b", "c"] if not signed else ["a", "b"]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, elem, [4096]) for n in inputs],
        [helper.make_tensor_value_info(out, elem, [4096])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    widened, changed = small_integer_arithmetic_widened(model)
    assert changed == len(nodes)
    types = {
        v.name: v.type.tensor_type.elem_type
        for v in onnx.shape_inference.infer_shapes(widened).graph.value_info
    }
    arithmetic = [n for n in widened.graph.node if n.op_type in ("Add", "Sub", "Mul", "Div")]
    assert all(types.get(n.output[0]) != elem for n in arithmetic)
    info = np.iinfo(dtype)
    rng = np.random.default_rng(0)
    feeds = {n: rng.integers(info.min, info.max, 4096, endpoint=True, dtype=dtype) for n in inputs}
    if "c" in feeds:
        feeds["c"] = np.maximum(feeds["c"], 1).astype(dtype)
    a, b = feeds["a"], feeds["b"]
    with np.errstate(over="ignore"):
        want = (a + b) * a - b
        if not signed:
            want = want // feeds["c"]
    np.testing.assert_array_equal(run_onnxruntime(widened, feeds)[0], want)
    check = onnx.ModelProto()
    check.CopyFrom(widened)
    check.opset_import[0].version = 13
    onnx.checker.check_model(check, full_check=True)  # valid where opset 13 has no uint8 Add


def cv2_programs() -> list:
    """One conformance case per (function, dtype, params) at the smallest size (each gdp call
    compiles one program); `slow` marks all but the first of each function."""
    from tests.conformance import cases_color, cases_filters, cases_geometry, cases_pointwise

    chosen: dict[tuple, object] = {}
    for module in (cases_color, cases_filters, cases_geometry, cases_pointwise):
        for case in module.cases():
            if case.size in ("tiny", "odd"):
                chosen.setdefault((case.function, case.dtype, case.params), case)
    seen: set[str] = set()
    params = []
    for case in chosen.values():
        marks = [pytest.mark.slow] if case.function in seen else []
        seen.add(case.function)
        params.append(pytest.param(case, marks=marks, id=case.id))
    return params


@pytest.mark.parametrize("case", cv2_programs())
def test_cv2_functions_export_for_atc(case, tmp_path, monkeypatch):
    """Every accelerated gdp.cv2 function's program, as the npu would get it: opset 13, CANN's
    operators, static shapes (float inputs declared over the case's own values). Float HSV
    divides by max - min, which may be 0: the fp16 pass refuses it by name, and it goes to the
    npu in fp32."""
    from gdp.cv2 import engine

    captured = {}

    class Captured(Exception):
        pass

    original = engine.program

    def capture_program(name, graph, arrays, params, outputs=1, values=None, free=False, **kw):
        captured["arrays"], captured["values"] = arrays, values
        # ATC compiles static shapes: the program as it would be for these arrays' sizes.
        return original(name, graph, arrays, params, outputs, values, free=False, **kw)

    def capture_compile(function, target=None, **options):
        captured["function"] = function
        raise Captured

    monkeypatch.setattr(engine, "program", capture_program)
    monkeypatch.setattr(gdp, "compile", capture_compile)
    # The program as gdp.cv2 writes it for the npu (its opset 13 lacks what TVM takes: 16-bit
    # Min/Max, ScatterND's reduction).
    monkeypatch.setattr(gdp.api, "_default_target", gdp.api.get_target("npu"))
    engine.clear_cache()
    with pytest.raises(Captured):
        case.gdp()
    monkeypatch.undo()
    engine.clear_cache()
    inputs = engine.feeds(captured["arrays"], captured["values"])
    try:
        model = exported_graph(captured["function"], inputs, tmp_path)
    except UnsupportedOpError as err:
        assert "HSV" in case.params and "no finite range" in str(err)
        model = exported_graph(captured["function"], inputs, tmp_path, precision="fp32")
    check_exported(model)
