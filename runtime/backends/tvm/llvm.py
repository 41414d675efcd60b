"""The cpu target: the shared TVM compile (backend.py) for this machine's CPU through LLVM, with
gdp's CPU schedules (llvm_schedules.py), kernels that take numpy's arrays in place, and TVM's
thread pool sized to the physical cores.

Compiled models are exported as shared libraries; loading one needs TVM's runtime and a dlopen, not
its compiler.
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from types import ModuleType

import tvm

from gdp.runtime.backends.tvm.backend import TvmBackend


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


@functools.cache
def pool_threads() -> int:
    """The threads of TVM's pool (use_every_core's, or the user's TVM_NUM_THREADS or
    OMP_NUM_THREADS): what a kernel that pays per strip splits its rows into."""
    for name in ("TVM_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return physical_cores()


def use_every_core() -> None:
    """TVM's thread pool, unless the user sized it: one thread per physical core. Left to
    itself, TVM halves the hardware threads on x86 to skip hyper-threads, which on a machine
    without them (a 2-vCPU VM) runs every parallel kernel on one core.

    And its workers not pinned to cores, unless the user asks (TVM_BIND_THREADS): a worker
    pinned to core 1 shares it with whatever else the OS puts there (OpenCV's pool, which
    gdp.cv2 calls and users mix with gdp's; a spinning idle worker of either), and each process
    settled at random into one of two modes, gdp's kernels or OpenCV's calls 2x slower
    (1080p BGR2GRAY: 0.135 or 0.27 ms; OpenCV's 0.21 or 0.41 ms); unpinned, every process
    ran both fast.

    Its idle workers keep TVM's spin (300000 rounds, over 10 ms of a core after each kernel;
    TVM_THREAD_POOL_SPIN_COUNT), although a spinning worker slows the next call of another
    library on its core (OpenCV's calls interleaved with gdp's ran at half speed in 4 of 5
    processes; with 300 rounds, about 150 us, in none of 6): gdp's fork safety rests on it
    (gdp.runtime.backends.tvm.thread_pool: the workers woken before a fork must still be awake
    when it copies the process, which takes milliseconds; with 300 rounds a forked child hung).
    Both settings are read by TVM when its pool starts, at the first parallel kernel."""
    if "TVM_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in os.environ:
        os.environ["TVM_NUM_THREADS"] = str(physical_cores())
    os.environ.setdefault("TVM_BIND_THREADS", "0")


class TvmLlvmBackend(TvmBackend):
    name = "tvm-llvm"
    schedules_module = "gdp.runtime.backends.tvm.llvm_schedules"
    # Free dimensions become Relax symbolic shapes; llvm_schedules takes extents at run time.
    generic_shapes = True
    # Reductions as TF writes them, in the forms llvm_schedules reads in one pass over rows.
    required_rewrites = (
        *TvmBackend.required_rewrites,
        "variance_in_one_pass",
        "reductions_as_row_scans",
    )

    @functools.cached_property
    def pipeline(self) -> ModuleType:
        from tvm.relax.backend.cpu_generic import pipeline

        return pipeline

    def target(self) -> tvm.target.Target:
        return tvm.target.Target(_host_target_dict())

    def device(self) -> tvm.runtime.Device:
        return tvm.cpu()

    def toolchain(self) -> str:
        target = _host_target_dict()
        return f"llvm-{target['mcpu']}-{target['num-cores']}"

    def finish(self, mod: tvm.IRModule) -> tvm.IRModule:
        return _element_aligned_parameters(
            nan_propagating_min_max(hyperbolics_as_exponentials(mod))
        )

    def prepare_load(self) -> None:
        use_every_core()

    def cpu_facts(self) -> dict:
        """What of this machine's CPU the compiled code may use: its flags (/proc/cpuinfo),
        and where TVM's compiler is present, the CPU LLVM targets and the features it compiles
        for. A bundle's facts are checked against these (gdp.bundle)."""
        import tvm_ffi

        facts: dict = {"cpu_flags": cpu_flags()}
        if tvm_ffi.get_global_func("target.llvm_get_system_cpu", allow_missing=True):
            from tvm.target import codegen

            target = self.target()
            facts["cpu"] = str(target.attrs.get("mcpu", ""))
            facts["cpu_features"] = sorted(str(f) for f in codegen.llvm_get_cpu_features(target))
        return facts


def cpu_flags() -> list[str]:
    """The CPU's feature flags as Linux lists them (/proc/cpuinfo), [] where it does not."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith(("flags", "Features")):
                    return sorted(set(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return []


# The longest chain of nested float min/max a kernel may hold for nan_propagating_min_max to
# rewrite it (a clip is 2, a relu or a reduction's combiner 1).
MAX_NAN_MIN_MAX_DEPTH = 3


def nan_propagating_min_max(mod: tvm.IRModule) -> tvm.IRModule:
    """Every floating-point min and max in the kernels made to return NaN when an operand is
    NaN, as TF's minimum, maximum, clip_by_value, relu and reduce_min/max do (and ONNX's Min,
    Max and Clip on onnxruntime).

    TVM's LLVM codegen writes min(a, b) as select(a < b, a, b) and max(a, b) as
    select(a > b, a, b), without fast-math flags: a NaN in `b` comes through, a NaN in `a` is
    replaced by `b`. TOPI writes clip(x, lo, hi) as max(min(x, hi), lo), so a NaN pixel was
    clipped to `hi`, and a reduction's running max(acc, x) forgot a NaN once a later element
    came. Keras' AutoContrast, whose 0 * inf on a flat channel is a NaN that IsNaN then
    replaces by the input, gave 0 there.

    Against a constant (clip, relu), the comparison is turned so that an unordered one
    returns the other operand: one compare and select, an x86 maxps/minps as before. Between
    two values, the select also takes `a` where `a` is NaN (a compare and a blend more).
    Integer min and max are left alone. Runs on the scheduled module: schedule primitives
    (rfactor, decompose_reduction) recognise a reduction by its min or max combiner."""
    import tvm_ffi
    from tvm import tirx

    def constant(x) -> bool:
        if isinstance(x, tirx.Broadcast):
            x = x.value
        return isinstance(x, tirx.FloatImm) and not math.isnan(x.value)

    def rewrite(expr, wins):  # wins(a, b): whether min/max(a, b) is `a` when a, b ordered
        if not tvm.DataType(str(expr.a.ty.dtype)).is_float:
            return expr
        a, b = expr.a, expr.b
        if constant(a):
            return tirx.Select(wins(a, b), a, b)  # b, a NaN when unordered
        if constant(b):
            return tirx.Select(wins(b, a), b, a)
        # The select reads a three times and b twice: each operand that is an expression is
        # computed once, as a let. Written out, max(max(r, g), b) held r nine times, and
        # HSV's float kernel (its V and the min used eight times) took TVM's simplifier 55 s.
        lets = []
        a, b = (leaf(x, lets) for x in (a, b))
        out = tirx.Select(tirx.Or(tirx.isnan(a), wins(a, b)), a, b)
        for var, value in reversed(lets):
            out = tirx.Let(var, value, out)
        return out

    def leaf(x, lets):
        """`x` where reading it twice costs nothing (a variable, a load, a constant), else a
        new variable that `lets` binds to it."""
        if isinstance(x, (tvm.ir.expr.Var, tvm.ir.expr.TensorLoad, tirx.FloatImm, tirx.IntImm)):
            return x
        var = tirx.Var("nan_operand", x.ty)
        lets.append((var, x))
        return var

    def on_min(expr):
        return rewrite(expr, tirx.LT)

    def on_max(expr):
        return rewrite(expr, tirx.GT)

    def min_max_depth(func) -> int:
        """The longest chain of float min/max nested in one another in `func`."""
        depth: dict = {}

        def seen(node):
            depth[node] = 1 + max(depth.get(node.a, 0), depth.get(node.b, 0))
            return node

        tvm_ffi.structural_map(func, [(tirx.Min, seen), (tirx.Max, seen)], order="post")
        return max(depth.values(), default=0)

    for gvar, func in list(mod.functions.items()):
        # A min/max network (a median's sorting network, an erosion's chain) is left as is:
        # each select reads its operands twice, the nested expressions then grow exponentially
        # and TVM's build ran for ever on a 3x3 median and a 5x5 erosion. Such kernels are
        # gdp.cv2's, with OpenCV's semantics, not a TF op's.
        if isinstance(func, tvm.tirx.PrimFunc) and min_max_depth(func) <= MAX_NAN_MIN_MAX_DEPTH:
            mod[gvar] = tvm_ffi.structural_map(
                func, [(tirx.Min, on_min), (tirx.Max, on_max)], order="post"
            )
    return mod


# Where exp of a float type overflows (its largest finite value's log, rounded down): past it
# half of e^|x| is (e^(|x|/2) / 2) e^(|x|/2), still finite up to the type's largest value.
_EXP_LIMIT = {32: 88.0, 64: 709.0}
# sinh's Taylor coefficients 1/3!, 1/5!, ... 1/19!: below |x| = 1, x * (1 + x^2/3! + ...) to
# float64's precision (the first term left out, x^21/21!, is below 2e-20 of the sum).
_SINH_TAYLOR = tuple(1 / math.factorial(n) for n in range(3, 21, 2))


def hyperbolics_as_exponentials(mod: tvm.IRModule) -> tvm.IRModule:
    """Every float sinh and cosh in the kernels written with exp, which TVM's LLVM code
    generator vectorises: it has no vector form of its own for them and failed with "unknown
    intrinsic tirx.sinh" on a vectorised loop (tf.math.sinh, tf.math.cosh, ONNX's Sinh and Cosh).

    cosh(x) = h + 1/(4h) and, from |x| = 1 up, sinh(x) = sign(x) (h - 1/(4h)), h = e^|x| / 2
    (no overflow before the result's own); below 1, sinh's Taylor series, since e^x - e^-x
    there cancels the leading digits (sinh(1e-4) lost three of float32's seven)."""
    import tvm_ffi
    from tvm import tirx

    ops = {tvm.ir.Op.get("tirx.sinh"): "sinh", tvm.ir.Op.get("tirx.cosh"): "cosh"}

    def on_call(call):
        which = ops.get(call.op)
        if which is None:  # (other calls' types need not have a dtype: pointers)
            return call
        dtype = tvm.DataType(str(call.ty.dtype))
        if not dtype.is_float or dtype.bits not in _EXP_LIMIT:
            return call
        x = call.args[0]
        ax = tirx.abs(x)
        big = ax > _EXP_LIMIT[dtype.bits]
        root = tirx.exp(ax * 0.5)  # e^|x| = root^2, exactly halved: no rounding of |x| - ln 2
        half = tirx.Select(big, root * 0.5 * root, tirx.exp(ax) * 0.5)
        if which == "cosh":
            return half + 0.25 / half
        x2 = x * x
        series = _SINH_TAYLOR[-1]
        for c in reversed(_SINH_TAYLOR[:-1]):
            series = series * x2 + c
        large = half - 0.25 / half
        return tirx.Select(ax < 1.0, x + x * x2 * series, tirx.Select(x < 0.0, -large, large))

    for gvar, func in list(mod.functions.items()):
        if isinstance(func, tvm.tirx.PrimFunc):
            mod[gvar] = tvm_ffi.structural_map(func, [(tvm.ir.Call, on_call)], order="post")
    return mod


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
