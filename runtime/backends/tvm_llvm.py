"""The cpu target: ONNX -> TVM Relax -> default pipeline (FuseOps, FuseTIR) -> gdp's CPU
schedules -> llvm -> Relax VM.

Compiled models are exported as shared libraries; loading one needs TVM's runtime and a dlopen, not
its compiler.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import tvm
import tvm_ffi
from gdp.rewrites.fusion import CostModel
from gdp.runtime.backends.base import Backend, Executable
from gdp.runtime.backends.tvm_fusion import DEFAULT_FUSION, FUSIONS, fuse
from gdp.runtime.backends.tvm_schedules import schedule_cpu
from gdp.runtime.profiling import Profile
from tvm import relax
from tvm.runtime.vm import VirtualMachine

from gdp.errors import CompileError, TargetError, UnsupportedOpError

LIBRARY = "model.so"


def _host_target_dict() -> dict:
    from tvm.target import codegen

    return {
        "kind": "llvm",
        "mcpu": codegen.llvm_get_system_cpu(),
        "num-cores": os.cpu_count() or 1,
    }


def physical_cores() -> int:
    """The cores this process may run on, a core's hardware threads counted once."""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    cores = set()
    for cpu in allowed if allowed is not None else range(os.cpu_count() or 1):
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        try:
            cores.add(path.read_text().strip())
        except OSError:
            cores.add(str(cpu))
    return max(1, len(cores))


def _use_every_core() -> None:
    """TVM's thread pool, unless the user sized it: one thread per physical core. Left to
    itself, TVM halves the hardware threads on x86 to skip hyper-threads, which on a machine
    without them (a 2-vCPU VM) runs every parallel kernel on one core. Read by TVM when its pool
    starts, at the first parallel kernel."""
    if "TVM_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in os.environ:
        os.environ["TVM_NUM_THREADS"] = str(physical_cores())


class TvmExecutable(Executable):
    def __init__(self, library: tvm.runtime.Module) -> None:
        _use_every_core()
        self.device = tvm.cpu()
        self.library = library
        self.vm = VirtualMachine(library, self.device)
        self._profiling_vm: VirtualMachine | None = None
        self._kernel_log: list[tuple[str, float]] = []
        self._kernel_start = 0.0
        self._staging: dict[int, tvm.runtime.Tensor] = {}

    def _to_device(self, index: int, array: np.ndarray) -> tvm.runtime.Tensor:
        """Hand `array` to the VM: zero-copy when it is element-aligned (the alignment the kernels
        are compiled to assume, see _element_aligned_parameters) and numpy can export it, else a
        copy into a staging tensor kept for the next call (allocating afresh costs page faults
        every run)."""
        if array.flags.aligned and array.flags.writeable and array.flags.c_contiguous:
            return tvm_ffi.from_dlpack(
                array, require_alignment=array.dtype.itemsize, require_contiguous=True
            )
        staging = self._staging.get(index)
        if staging is None or tuple(staging.shape) != array.shape or staging.dtype != array.dtype:
            staging = tvm.runtime.empty(array.shape, str(array.dtype), self.device)
            self._staging[index] = staging
        staging.copyfrom(array)
        return staging

    def _instrument(self, func, func_symbol, before_run, ret_value, *args) -> int:
        # Kernels run synchronously on the CPU, so the time between the VM's before and after hooks
        # is the kernel's time. VM builtins (allocation, shape checks) are not kernels.
        now = time.perf_counter()
        if before_run:
            self._kernel_start = now
        elif not str(func_symbol).startswith("vm.builtin"):
            self._kernel_log.append((str(func_symbol), now - self._kernel_start))
        return 0

    def _vm_for(self, profile: Profile | None) -> VirtualMachine:
        if profile is None:
            return self.vm
        if self._profiling_vm is None:
            self._profiling_vm = VirtualMachine(self.library, self.device)
            self._profiling_vm.set_instrument(self._instrument)
        return self._profiling_vm

    def run(self, inputs: list[np.ndarray], profile: Profile | None = None) -> list[np.ndarray]:
        vm = self._vm_for(profile)
        self._kernel_log = []
        t0 = time.perf_counter()
        args = [self._to_device(i, x) for i, x in enumerate(inputs)]
        t1 = time.perf_counter()
        result = vm["main"](*args)
        t2 = time.perf_counter()
        results = [result] if isinstance(result, tvm.runtime.Tensor) else list(result)
        # Outputs are handed over without a copy (the array keeps the VM's tensor alive), except
        # one that is an input's memory: a staging tensor is refilled by the next run.
        inputs_at = {np.from_dlpack(a).ctypes.data for a in args}
        outputs = []
        for tensor in results:
            array = np.from_dlpack(tensor)
            outputs.append(array.copy() if array.ctypes.data in inputs_at else array)
        t3 = time.perf_counter()
        if profile is not None:
            profile.copy_in_s += t1 - t0
            profile.execute_s += t2 - t1
            profile.copy_out_s += t3 - t2
            profile.kernels.extend(self._kernel_log)
        return outputs


class TvmLlvmBackend(Backend):
    name = "tvm-llvm"
    static_shapes = True
    required_rewrites = (
        "omit_empty_resize_inputs",
        "reverse_sequence_to_slice",
        "pad_in_integer_type",
    )
    options = frozenset({"fusion"})

    def fingerprint(self) -> str:
        target = _host_target_dict()
        return (
            f"tvm-{tvm.__version__}-llvm-{target['mcpu']}-{target['num-cores']}-code-{_code_hash()}"
        )

    def compile(self, model: onnx.ModelProto, outdir: Path, options: dict) -> dict:
        from tvm.relax.frontend.onnx import from_onnx

        _check_importable(model)
        try:
            mod = from_onnx(model, keep_params_in_input=False)
        except Exception as err:
            raise CompileError(f"TVM's Relax ONNX importer failed: {err}") from err
        mod["main"] = _plain_float_to_int(_pairwise_min_max(mod["main"]))
        target = tvm.target.Target(_host_target_dict())
        fusion = options.get("fusion", DEFAULT_FUSION)
        if fusion not in FUSIONS:
            raise TargetError(f"fusion: expected one of {list(FUSIONS)}, got {fusion!r}")
        alpha, beta = options.get("fusion_cost", (1.0, 0.0))
        try:
            mod, fused = _pipeline(mod, target, fusion, CostModel(alpha, beta))
            mod = _element_aligned_parameters(schedule_cpu(mod, target))
            kernels = sum(1 for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc))
            executable = tvm.compile(mod, target=target, relax_pipeline=None)
            executable.export_library(str(outdir / LIBRARY))
        except Exception as err:
            raise CompileError(f"TVM failed to compile the graph for {target}: {err}") from err
        return {"files": [LIBRARY], "kernels": kernels, "fusion": fused}

    def load(self, artifact_dir: Path, meta: dict) -> Executable:
        return TvmExecutable(tvm.runtime.load_module(str(artifact_dir / LIBRARY)))


def _pipeline(mod, target, fusion: str, cost: CostModel):
    """TVM's default CPU pipeline, with the fusion step chosen: TVM's FuseOps, gdp's plan, or
    none (runtime/backends/tvm_fusion.py)."""
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    with target:
        legalize = [p for p in cpu.legalize_passes(target) if p.info.name not in _FUSION_PASSES]
        mod = tvm.transform.Sequential(cpu.library_dispatch_passes(target) + legalize)(mod)
        mod, report = fuse(mod, fusion, cost)
        mod = relax.transform.FuseTIR()(mod)
        rest = cpu.dataflow_lower_passes(target) + cpu.finalize_passes(target)
        mod = tvm.transform.Sequential(rest)(mod)
    return mod, report


_FUSION_PASSES = ("FuseOps", "FuseTIR")


def _element_aligned_parameters(mod: tvm.IRModule) -> tvm.IRModule:
    """Every kernel's tensor parameters declared aligned to their element, not to 64 bytes.

    TVM declares a kernel's buffers 64-byte aligned and checks it on every call. numpy aligns
    a large array's data to 16 bytes only (malloc's header), so each input would otherwise be
    copied into an aligned tensor before every run: 2-4 ms for a 1080p batch, as much as a
    fused kernel takes. The vector loads and stores LLVM emits for x86 and Arm do not need the
    alignment; the tensors the VM allocates itself stay 64-byte aligned."""
    from tvm.tirx import decl_buffer
    from tvm.tirx.buffer import is_buffer_var
    from tvm.tirx.transform.common import BufferReplacer

    for gvar, func in list(mod.functions.items()):
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        relaxed = {}
        for param in func.params:
            if not is_buffer_var(param):
                continue
            ty = param.ty
            element = max(1, tvm.DataType(ty.dtype).bits // 8)
            relaxed[param] = decl_buffer(
                ty.shape,
                ty.dtype,
                param.name,
                None,
                ty.strides,
                ty.elem_offset,
                ty.storage_scope,
                element,
                ty.offset_factor,
                layout=ty.layout,
            )
        if relaxed:
            mod[gvar] = BufferReplacer(relaxed)(func)
    return mod


def _plain_float_to_int(func: relax.Function) -> relax.Function:
    """The importer's float -> integer Cast back to one conversion.

    TVM's ONNX importer writes Cast(float -> int8..int32, uint8..uint32) as NaN/inf -> 0, a
    conversion to a wider integer, and a wrap (mask or mod, then a sign fix), which is what
    C would do for out-of-range values on some machines. ONNX leaves an out-of-range cast
    undefined, and every graph gdp builds clamps before it converts; the emulation costs a
    dozen operations per element and, once inlined, copies its operand five times (a 1080p
    warp's index arithmetic grew tenfold). Matches only the importer's exact emission."""
    from tvm.relax.dpl import is_const, is_op, rewrite_call, wildcard

    x = wildcard()
    sanitized = is_op("relax.where")(
        is_op("relax.logical_not")(is_op("relax.isfinite")(x)), is_const(), x
    )
    wide = is_op("relax.astype")(sanitized)
    unsigned = is_op("relax.floor_mod")(wide, is_const()) | is_op("relax.bitwise_and")(
        wide, is_const()
    )
    two_pow = is_const() | is_op("relax.add")(is_const(), is_const())
    signed = is_op("relax.where")(
        is_op("relax.greater_equal")(unsigned, is_const()),
        is_op("relax.subtract")(unsigned, two_pow),
        unsigned,
    )
    pattern = is_op("relax.astype")(signed | unsigned)

    def rewrite(call, matches):
        return relax.op.astype(matches[x], call.attrs.dtype)

    return rewrite_call(pattern, rewrite, func)


def _pairwise_min_max(func: relax.Function) -> relax.Function:
    """max/min of a two-tensor stack over its new axis -> elementwise maximum/minimum.

    TVM's ONNX importer writes Max(a, b) and Min(a, b) of known shapes as a stack and a
    reduction: a reduction fuses with nothing and runs as a kernel of its own, so a chain of
    them (erosion, dilation, sorting networks) becomes one kernel per tap. The elementwise form
    fuses into one kernel."""
    from tvm.relax.dpl import is_op, is_tuple, rewrite_call, wildcard

    a, b = wildcard(), wildcard()
    for reduce_op, binary in (("relax.max", relax.op.maximum), ("relax.min", relax.op.minimum)):
        pattern = is_op(reduce_op)(is_op("relax.stack")(is_tuple([a, b])))

        def rewrite(call, matches, binary=binary):
            axis = call.attrs.axis
            over_stack = axis is not None and [int(v) for v in axis] == [0]
            if not over_stack or call.attrs.keepdims:
                return call
            return binary(matches[a], matches[b])

        func = rewrite_call(pattern, rewrite, func)
    return func


@functools.cache
def _code_hash() -> str:
    """A hash of the code that shapes the compiled kernels (this lowering and gdp's schedules):
    a changed schedule must not load kernels cached by the old one."""
    from gdp.runtime.backends import tvm_schedules

    digest = hashlib.sha256()
    from gdp.rewrites import fusion
    from gdp.runtime.backends import tvm_fusion

    for module in (sys.modules[__name__], tvm_schedules, tvm_fusion, fusion):
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()[:16]


def _check_importable(model: onnx.ModelProto) -> None:
    """Name the first op (and its node) that TVM's Relax ONNX importer has no converter for."""
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    convertible = _get_convert_map()
    for node in model.graph.node:
        if node.op_type not in convertible:
            raise UnsupportedOpError(
                node.op_type, node.name, "TVM's Relax ONNX importer has no converter for it"
            )
