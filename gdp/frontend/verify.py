"""Verify-on-compile: a TensorFlow program's conversion and compiled model checked against TF.

A result the front end cannot vouch for is never returned silently. When the source of
`gdp.compile` is a TF program (a tf.function, a function with `input_signature=`, or Keras inputs
and outputs), compile runs TensorFlow and gdp on probe inputs and compares them; a disagreement
raises `gdp.errors.VerificationError` naming the output, the largest error and the tolerance, and
the first TF op whose output disagrees. `verify=False` skips it; ONNX sources and gdp.cv2 calls
have no TF program to compare with and are not verified. What was compared and the time it took
are in `model.report()["verify"]` and `["verify_s"]`.

Probes
    One random probe with a fixed seed (`SEED`), each input within its range: uint8 and uint16
    their whole range, other integers 0..9, bool half and half, float [0, 1], and
    `input_ranges=` where the caller declared one. A free dimension takes a modest, odd,
    non-square size so that strip and tile boundaries fall inside the image: the last axis of
    a rank >= 3 input is a channel axis (3), the two before it rows and columns (37 x 53), and
    leading axes a batch of 2. Where TF refuses that size (a crop to 224 rows), 257 x 385 with a
    batch of 1 is tried; where it refuses that too, or refuses the static shape, the program is
    not verified, with a warning and the reason in the report. `sample=` (one array, a list in
    input order, or a dict by input name: the user's real data) is a second probe, at its own
    shape; it must fit the signature like any input.

Two comparisons, TF's answer computed once per probe (`function(*probe)`, one TF run):
    1. conversion: the front end's ONNX graph on onnxruntime (fp32, one thread) against TF,
       before the backend compiles anything, so a wrong conversion fails fast and leaves nothing
       in the cache. Where onnxruntime cannot run the graph (an op or type it lacks) this
       comparison is skipped, said in the report, and the compiled one still runs.
    2. compiled: the model gdp.compile built (every static model, and the reference target's
       free-dimension one) run on its target against TF. A model with free dimensions on a
       backend that compiles per shape is not compiled for the probe (that would cost a full
       backend compile and a cache entry nobody asked for): comparison 1 covers its conversion.
       On a disagreement, the rewritten graph (the one the backend received) is run on
       onnxruntime too: if it disagrees as well a rewrite is at fault, else the backend.

Tolerances (per output, by dtype; `compare`):
    float, fp32: |got - TF| <= atol + rtol * |TF| with rtol = 1e-4 and atol = 1e-4 * max(1,
        max |TF|). Where an output depends on a large sum (a Reduce*, GlobalAveragePool, CumSum,
        MatMul, Gemm or Einsum upstream), TF's own float32 summation drifts with the number of
        terms n: rtol and atol's factor become max(1e-4, n * 2**-24 / 64), with n the size of
        the largest input (random 1080p data drifts 3e-5; photos more). Where a resize (or
        another op that samples at float32 coordinates) is upstream, TF and ONNX round the
        coordinates differently by up to an ulp of the image extent, which moves the weights by
        as much; atol grows by 4 * 2**-24 * extent * max(1, max |TF|) (a 1080p -> 224 bilinear
        downscale of a random [0, 1] probe differs by 1.5e-4; the allowance there is 4.6e-4).
        NaN where TF has NaN and the same infinity where TF has one are equal; anything else
        non-finite is an error. An output stored in a narrower float (float16, bfloat16: a cast
        at the end) may round the other way where the float32 value before the cast differs in
        its last bits: rtol grows by that type's epsilon (one unit in its last place).
    float, fp16 (precision="fp16", the npu): within 1% of the output's range, atol = 1e-2 *
        max |TF| and rtol 1e-2 (GDPNPU's table 5-4 reports 0.00-0.18% mean relative errors; 1%
        bounds any single element), and never NaN or inf where TF is finite.
    integer: exact, except that a float -> int rounding sitting at .5 may round the other way:
        no element may be off by more than 1, and at most 0.1% of them off by 1 (1% downstream
        of a sum: its drift shifts every element alike, and one uint8 input value of 256 on a
        rounding edge moves 0.4% of the elements together). fp16: off by at most max(1, 1% of
        max |TF|), with the same allowance beyond that.
    bool: at most 0.1% of the elements flipped (a compare of a value that sits on the
        threshold); fp16 1%.
    Outputs that depend on a random op (tf.random.*) are not compared, and say so.

Finding the op (only after a disagreement, so its cost is off the common path)
    tf2onnx converts the frozen, grappler-optimised GraphDef of the function
    (`tf2onnx.tf_loader.from_function`); verification runs that same GraphDef in a TF session and
    the ONNX graph on onnxruntime with its intermediate tensors exposed as outputs. A TF tensor
    and an ONNX tensor are paired where tf2onnx kept the name (`"sub:0"`), where an ONNX node
    bears the TF op's name (its outputs in order), and at the graph's inputs and outputs. ONNX
    tensors may be laid out differently (tf2onnx moves NHWC transposes, drops unit axes): a
    pair agrees if the ONNX values match TF's in some order of axes of the same extents. The
    culprit is the first TF op, in topological order, with a disagreeing output; where its
    inputs could not be compared, the ops upstream of it back to tensors that agree are the
    suspects, and a single non-trivial suspect is named as the op. The op's type, name and,
    where TF recorded it, the user's source line go in the error.

Cost: one TF run, one onnxruntime session and run, and one compiled run per probe (their
times are in report()["verify"]["runs_s"]): 5-40 ms for a program on a small or free-dimension
input, 0.1-1 s on a static 1080p one (TF and onnxruntime each run the whole image), 4-5 s on
mean_std's batch of eight 1080p images. On tests/gdp/frontend it adds 2-3 s to ~60 s; on the
corpus's default run 1.8 s to 53 s.
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from gdp.errors import GdpError, InputError, VerificationError
from gdp.signature import TensorSig, check_input, graph_inputs, graph_outputs

SEED = 18
# (rows, columns, batch) of a free dimension's probe, tried in order until TF takes one.
PROBE_SIZES = ((37, 53, 2), (257, 385, 1))
CHANNELS = 3
SMALL_INT = (0, 9)

FP32_TOL = 1e-4
FP16_TOL = 1e-2
# The fraction of integer elements that may be off by one (a rounding at .5), and of bool
# elements that may flip (a value on a compare's threshold). Downstream of a sum, whose drift
# shifts every element alike, one uint8 input value of 256 sitting on a rounding edge moves
# 0.4% of the elements at once (TF's adjust_contrast of a 1080p uint8 image, on onnxruntime).
OFF_BY_ONE = 1e-3
OFF_BY_ONE_SUMMED = 1e-2
FP16_FLIPS = 1e-2
# TF's float32 sums drift by about n * eps / 64 relative, for n terms (see the docstring).
SUM_DRIFT = 2.0**-24 / 64
SUMS = frozenset(
    {
        "ReduceSum",
        "ReduceMean",
        "ReduceSumSquare",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "GlobalAveragePool",
        "GlobalLpPool",
        "CumSum",
        "MatMul",
        "Gemm",
        "Einsum",
    }
)
# Ops that compute sample coordinates in float32 ((x + 0.5) * scale - 0.5): TF and ONNX round
# them differently, by up to an ulp of the extent, which moves a weight by as much; on a random
# probe neighbours differ by the whole range. A 1920-wide bilinear downscale: 1.5e-4 of it.
RESAMPLES = frozenset({"Resize", "Upsample", "GridSample", "RoiAlign", "AffineGrid"})
COORDINATE_DRIFT = 4 * 2.0**-24

# TF ops that never compare (their outputs are not functions of the inputs).
_TRIVIAL = frozenset({"Identity", "IdentityN", "Const", "Placeholder", "NoOp", "StopGradient"})


@dataclass
class TfProgram:
    """A TF source: the tf.function gdp converted and its input signature (tf.TensorSpec)."""

    function: Any
    specs: list
    origin: str


@dataclass
class Mismatch:
    """How one output (or intermediate tensor) disagrees with TF's."""

    name: str
    max_error: float
    tolerance: str
    bad: int
    size: int
    detail: str

    def describe(self) -> str:
        return (
            f"max error {self.max_error:.4g} {self.detail}, tolerance {self.tolerance}; "
            f"{self.bad} of {self.size} elements outside"
        )


@dataclass
class Culprit:
    """The first TF op whose output disagrees (`op_type`, `op_name`, the user's `line`).

    Where that op's output had no ONNX tensor to compare, `via` is the first op downstream
    whose output did (its type and name) and `mismatch` that output's error; `suspects` lists
    the uncompared ops between when more than one could be at fault (then `op_*` is `via`)."""

    op_type: str
    op_name: str
    line: str | None
    mismatch: Mismatch
    via: tuple[str, str] | None = None
    suspects: list[tuple[str, str]] = field(default_factory=list)

    def describe(self) -> str:
        where = f" ({self.line})" if self.line else ""
        text = f"{self.op_type} {self.op_name!r}{where}"
        bad = self.mismatch
        if self.via is None:
            return f"{text}: its output {bad.name!r} is off by {bad.max_error:.4g}"
        return (
            f"{text}; its output has no ONNX counterpart, the first compared one downstream, "
            f"{bad.name!r} of {self.via[0]} {self.via[1]!r}, is off by {bad.max_error:.4g}"
        )


# -- tolerances -----------------------------------------------------------------------------


def compare(
    name: str, want: Any, got: Any, *, fp16: bool = False, terms: int = 0, extent: int = 0
) -> Mismatch | None:
    """None if `got` is TF's `want` within the tolerance of its dtype (module docstring), else
    a Mismatch. `terms`: the number of float32 terms of the largest sum the output depends on;
    `extent`: the largest image extent a resize upstream of it computes coordinates over."""
    want, got = np.asarray(want), np.asarray(got)
    if want.shape != got.shape:
        return Mismatch(name, math.inf, "the same shape", want.size, want.size,
                        f"(shape {list(got.shape)}, TF's {list(want.shape)})")  # fmt: skip
    if want.dtype != got.dtype:
        return Mismatch(name, math.inf, "the same dtype", want.size, want.size,
                        f"(dtype {got.dtype}, TF's {want.dtype})")  # fmt: skip
    size = want.size
    if size == 0:
        return None
    if want.dtype.kind == "b":
        flips = np.count_nonzero(want != got)
        allowed = int((FP16_FLIPS if fp16 else OFF_BY_ONE) * size)
        if flips <= allowed:
            return None
        return Mismatch(name, 1.0, f"{allowed} flipped of {size}", flips, size,
                        f"(first at {_index(want != got)})")  # fmt: skip
    if want.dtype.kind in "iu":
        diff = np.abs(want.astype(np.int64) - got.astype(np.int64))
        allowed = int((OFF_BY_ONE_SUMMED if terms else OFF_BY_ONE) * size)
        if fp16:  # within 1% of the range, but for 0.1% of the elements
            step = max(1, math.ceil(FP16_TOL * float(np.max(np.abs(want.astype(np.int64))))))
            bad = int(np.count_nonzero(diff > step))
            ok = bad <= allowed
            tol = f"off by at most {step} but for {allowed} of {size} elements"
        else:  # exact, but for 0.1% of the elements off by one
            bad = int(np.count_nonzero(diff > 0))
            ok = bad <= allowed and not np.any(diff > 1)
            tol = f"exact, or off by 1 on at most {allowed} of {size} elements"
        if ok:
            return None
        at = np.unravel_index(int(np.argmax(diff)), diff.shape)
        return Mismatch(name, float(diff[at]), tol, bad, size,
                        f"at {list(map(int, at))} (TF {want[at]}, got {got[at]})")  # fmt: skip
    w, g = want.astype(np.float64), got.astype(np.float64)
    finite = np.isfinite(w)
    peak = float(np.max(np.abs(w[finite]))) if finite.any() else 0.0
    atol, rtol, tol = _float_tolerance(peak, fp16, terms, extent, want.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(finite, np.abs(g - w), 0.0)
        bad = finite & ~(err <= atol + rtol * np.abs(w))  # NaN in got is bad
        # TF's NaN must be NaN, TF's inf the same inf.
        bad |= np.isnan(w) & ~np.isnan(g)
        bad |= np.isinf(w) & (g != w)
    count = int(np.count_nonzero(bad))
    if count == 0:
        return None
    score = np.where(bad, np.where(np.isfinite(err), err, np.inf), -1.0)
    at = np.unravel_index(int(np.argmax(score)), score.shape)
    worst = float(score[at])
    return Mismatch(name, worst, tol, count, size,
                    f"at {list(map(int, at))} (TF {w[at]:.6g}, got {g[at]:.6g})")  # fmt: skip


def _float_tolerance(
    peak: float, fp16: bool, terms: int, extent: int, dtype: np.dtype
) -> tuple[float, float, str]:
    """(atol, rtol, in words) for a float output of `dtype` whose largest finite |TF| is
    `peak`."""
    if fp16:
        atol = FP16_TOL * max(peak, 2.0**-14)
        return atol, FP16_TOL, f"1% of the range: {atol:.3g} + {FP16_TOL:g} * |TF|"
    rtol = max(FP32_TOL, SUM_DRIFT * terms)
    atol = (rtol + COORDINATE_DRIFT * extent) * max(1.0, peak)
    if np.dtype(dtype).itemsize < 4:  # one unit in the last place of the narrow type
        rtol += float(np.finfo(dtype).eps)
    return atol, rtol, f"{atol:.3g} + {rtol:.3g} * |TF|"


def _quick(want: np.ndarray, got: np.ndarray, fp16: bool, terms: int, extent: int) -> float | None:
    """The largest |got - want| where compare() would accept them, found in a few passes in
    the arrays' own dtype (a 1080p output in ~20 ms); None where only compare() can tell."""
    if want.shape != got.shape or want.dtype != got.dtype:
        return None
    if want.dtype.kind in "biu":
        return 0.0 if np.array_equal(want, got) else None
    if want.dtype.kind != "f" or want.size == 0:
        return None
    dtype = want.dtype
    if want.dtype.itemsize < 4:
        want, got = want.astype(np.float32), got.astype(np.float32)
    want, got = np.atleast_1d(want), np.atleast_1d(got)  # 0-d: ufuncs return scalars
    bound = np.abs(want)
    peak = float(bound.max())
    if not math.isfinite(peak):
        return None
    atol, rtol, _ = _float_tolerance(peak, fp16, terms, extent, dtype)
    err = np.subtract(got, want)
    np.abs(err, out=err)
    bound *= rtol
    bound += atol
    if not np.all(err <= bound):  # NaN anywhere fails this too
        return None
    return float(err.max())


def _max_error(want: np.ndarray, got: np.ndarray) -> float:
    """The largest finite |got - want| of two arrays that compare() accepted."""
    if not want.size:
        return 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))
    finite = err[np.isfinite(err)]
    return float(finite.max()) if finite.size else 0.0


def _index(mask: np.ndarray) -> list[int]:
    return [int(i) for i in np.unravel_index(int(np.argmax(mask)), mask.shape)]


def _upstream(
    graph: onnx.ModelProto, feeds: Sequence[np.ndarray], names: Sequence[str] | None = None
) -> dict[str, dict]:
    """Each output (or tensor of `names`) -> compare()'s `terms` (the terms of the largest
    float32 sum upstream of it, bounded by the largest input's size; 0 if none) and `extent`
    (the largest input extent, if a resize upstream computes float32 coordinates; else 0)."""
    producer = {o: n for n in graph.graph.node for o in n.output}
    largest = max((a.size for a in feeds), default=0)
    widest = max((max(a.shape, default=1) for a in feeds), default=0)
    out = {}
    for name in names if names is not None else [v.name for v in graph.graph.output]:
        seen, stack, kinds = set(), [name], set()
        while stack:
            node = producer.get(stack.pop())
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            kinds.add(node.op_type)
            stack.extend(node.input)
        out[name] = {
            "terms": largest if kinds & SUMS else 0,
            "extent": widest if kinds & RESAMPLES else 0,
        }
    return out


# -- probes ---------------------------------------------------------------------------------


def _free_sizes(rank: int, rows: int, cols: int, batch: int) -> list[int]:
    """The size each axis of a rank-`rank` input takes where it is free."""
    if rank == 1:
        return [cols]
    if rank == 2:
        return [rows, cols]
    return [batch] * (rank - 3) + [rows, cols, CHANNELS]


def _random(sig: TensorSig, shape: tuple, rng: np.random.Generator, declared) -> np.ndarray:
    dtype = sig.dtype
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape, dtype=np.uint8).astype(bool)
    if dtype.kind in "iu":
        if declared is not None:
            lo, hi = math.ceil(declared[0]), math.floor(declared[1])
        elif dtype in (np.uint8, np.uint16):
            lo, hi = 0, int(np.iinfo(dtype).max)
        else:
            lo, hi = SMALL_INT
        return rng.integers(lo, hi, size=shape, dtype=dtype, endpoint=True)
    if dtype.kind == "f":
        lo, hi = declared if declared is not None else (0.0, 1.0)
        unit = rng.random(size=shape, dtype=np.float32 if dtype.itemsize <= 4 else np.float64)
        if (lo, hi) != (0.0, 1.0):
            unit *= hi - lo
            unit += lo
        return unit.astype(dtype, copy=False)
    raise InputError(f"input {sig.name!r}: verification has no probe for dtype {dtype}")


def random_probe(
    inputs: Sequence[TensorSig], ranges: Mapping[str, tuple], rows: int, cols: int, batch: int
) -> list[np.ndarray]:
    rng = np.random.default_rng(SEED)
    arrays = []
    for sig in inputs:
        free = _free_sizes(len(sig.shape), rows, cols, batch)
        shape = tuple(f if d is None else d for d, f in zip(sig.shape, free, strict=True))
        arrays.append(_random(sig, shape, rng, ranges.get(sig.name)))
    return arrays


def sample_probe(inputs: Sequence[TensorSig], sample: Any) -> list[np.ndarray]:
    """`sample=` (one array, a list in input order, or a dict by name) as arrays in input order."""
    names = [s.name for s in inputs]
    if isinstance(sample, Mapping):
        unknown = sorted(set(sample) - set(names))
        missing = [n for n in names if n not in sample]
        if unknown or missing:
            raise InputError(
                f"sample: expected arrays for inputs {names}, got {sorted(sample)}"
                + (f" (unknown {unknown})" if unknown else "")
            )
        given = [sample[n] for n in names]
    elif isinstance(sample, list | tuple):
        given = list(sample)
    else:
        given = [sample]
    if len(given) != len(names):
        raise InputError(
            f"sample: expected {len(names)} array(s) for inputs {names}, got {len(given)}"
        )
    try:
        return [check_input(sig, a) for sig, a in zip(inputs, given, strict=True)]
    except InputError as err:
        raise InputError(f"sample: {err}") from None


def _shapes(inputs: Sequence[TensorSig], arrays: Sequence[np.ndarray]) -> dict[str, list[int]]:
    return {s.name: list(a.shape) for s, a in zip(inputs, arrays, strict=True)}


# -- running --------------------------------------------------------------------------------


def _tensorflow():
    from gdp.frontend.tensorflow import _quiet_tensorflow

    return _quiet_tensorflow()


def run_tf(program: TfProgram, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """TF's outputs, flattened in the order tf2onnx wrote the graph's outputs."""
    tf = _tensorflow()
    result = program.function(*arrays)
    return [np.asarray(t) for t in tf.nest.flatten(result, expand_composites=True)]


def run_onnxruntime(
    graph: onnx.ModelProto,
    inputs: Sequence[TensorSig],
    arrays: Sequence[np.ndarray],
    extra: Sequence[str] = (),
) -> dict[str, np.ndarray]:
    """The graph's outputs (and the `extra` intermediate tensors) on onnxruntime, by name."""
    import onnxruntime as ort

    if extra:
        exposed = onnx.ModelProto()
        exposed.CopyFrom(graph)
        have = {o.name for o in exposed.graph.output}
        for name in extra:
            if name not in have:
                exposed.graph.output.append(onnx.ValueInfoProto(name=name))
                have.add(name)
        graph = exposed
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        graph.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    feeds = {s.name: a for s, a in zip(inputs, arrays, strict=True)}
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def _random_outputs(program: TfProgram, count: int) -> set[int]:
    """Indices of outputs that depend on a random op (tf.random.*): TF and gdp draw differently."""
    concrete = program.function.get_concrete_function(*program.specs)

    def is_random(op_type: str) -> bool:
        return "Random" in op_type or op_type.startswith("Rng") or op_type in (
            "Multinomial", "TruncatedNormal", "ParameterizedTruncatedNormal"
        )  # fmt: skip

    library = concrete.graph.as_graph_def().library
    calls_random = any(is_random(n.op) for f in library.function for n in f.node_def)
    out = set()
    for i, tensor in enumerate(concrete.outputs[:count]):
        seen, stack = set(), [tensor.op]
        while stack:
            op = stack.pop()
            if op.name in seen:
                continue
            seen.add(op.name)
            if is_random(op.type) or (calls_random and "Call" in op.type):
                out.add(i)
                break
            stack.extend(t.op for t in op.inputs)
    return out


# -- the check ------------------------------------------------------------------------------


@dataclass
class _Probe:
    label: str
    arrays: list[np.ndarray]
    want: list[np.ndarray]


class Verification:
    """Compile-time verification of one TF program (module docstring). `conversion()` runs
    before the backend compiles; `compiled(model)` after; `report()` is what model.report()
    shows under "verify"."""

    def __init__(
        self,
        program: TfProgram,
        graph: onnx.ModelProto,
        *,
        input_ranges: Mapping[str, tuple] | None = None,
        sample: Any = None,
    ) -> None:
        t0 = time.perf_counter()
        self.program, self.graph = program, graph
        self.inputs, self.outputs = graph_inputs(graph), graph_outputs(graph)
        self.skipped: dict[str, str] = {}
        self.compared: dict[str, float] = {}  # output -> the largest error seen
        self.stages: dict[str, str] = {}
        self.probes: list[_Probe] = []
        self._ranges = dict(input_ranges or {})
        self._seconds = 0.0
        self._times = {"tensorflow": 0.0, "onnxruntime": 0.0, "compiled": 0.0}
        given = sample_probe(self.inputs, sample) if sample is not None else None
        self.probes = self._random_probes()
        if given is not None:
            try:
                want = self._run_tf(given)
            except _TfRefused as err:
                raise InputError(
                    f"sample: TensorFlow cannot run {program.origin} on it: {err}"
                ) from None
            self.probes.append(_Probe("sample", given, want))
        self._seconds += time.perf_counter() - t0

    @property
    def seconds(self) -> float:
        return self._seconds

    def _run_tf(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        try:
            t0 = time.perf_counter()
            want = run_tf(self.program, arrays)
            self._times["tensorflow"] += time.perf_counter() - t0
        except Exception as err:  # TF's own refusal of this input (InvalidArgumentError, ...)
            raise _TfRefused(_first_line(err)) from err
        if len(want) != len(self.outputs):
            raise VerificationError(
                f"{self.program.origin} returns {len(want)} tensors but its ONNX graph has "
                f"{len(self.outputs)} outputs {[o.name for o in self.outputs]}",
                stage="conversion",
            )
        return want

    def _random_probes(self) -> list[_Probe]:
        free = not all(s.static for s in self.inputs)
        reasons = []
        for rows, cols, batch in PROBE_SIZES if free else PROBE_SIZES[:1]:
            arrays = random_probe(self.inputs, self._ranges, rows, cols, batch)
            try:
                return [_Probe("random", arrays, self._run_tf(arrays))]
            except _TfRefused as err:
                reasons.append(f"{_shapes(self.inputs, arrays)}: {err}")
        self.skipped["*"] = "TensorFlow refused every probe: " + "; ".join(reasons)
        warnings.warn(
            f"gdp.compile could not verify {self.program.origin}: {self.skipped['*']}",
            RuntimeWarning,
            stacklevel=4,
        )
        return []

    def _random_dependent(self) -> set[int]:
        if not hasattr(self, "_random_cache"):
            self._random_cache = _random_outputs(self.program, len(self.outputs))
            for i in self._random_cache:
                self.skipped[self.outputs[i].name] = "depends on a random op"
        return self._random_cache

    def _check(
        self, probe: _Probe, got: Mapping[str, np.ndarray], *, fp16: bool
    ) -> tuple[str, Mismatch] | None:
        """The first output that disagrees (name, mismatch), or None; records the errors."""
        upstream = _upstream(self.graph, probe.arrays)
        skip = self._random_dependent()
        for i, (sig, want) in enumerate(zip(self.outputs, probe.want, strict=True)):
            if i in skip:
                continue
            where = upstream[sig.name]
            worst = _quick(want, got[sig.name], fp16, **where)
            if worst is None:
                bad = compare(sig.name, want, got[sig.name], fp16=fp16, **where)
                if bad is not None:
                    return sig.name, bad
                worst = _max_error(want, got[sig.name])
            self.compared[sig.name] = max(self.compared.get(sig.name, 0.0), worst)
        return None

    # stage 1
    def conversion(self) -> None:
        """The front end's graph on onnxruntime against TF; raises VerificationError naming
        the first TF op whose output disagrees."""
        if not self.probes:
            return
        t0 = time.perf_counter()
        try:
            for probe in self.probes:
                try:
                    t1 = time.perf_counter()
                    got = run_onnxruntime(self.graph, self.inputs, probe.arrays)
                    self._times["onnxruntime"] += time.perf_counter() - t1
                except Exception as err:  # onnxruntime lacks an op or a type: not gdp's verdict
                    self.stages["conversion"] = (
                        f"skipped: onnxruntime cannot run the graph ({_first_line(err)})"
                    )
                    return
                found = self._check(probe, got, fp16=False)
                if found is not None:
                    name, bad = found
                    culprit = locate(self.program, self.graph, self.inputs, probe.arrays)
                    raise _error(self.program, "conversion", probe, self.inputs, name, bad, culprit,
                                 "the converted ONNX graph (tf2onnx) on onnxruntime")  # fmt: skip
            self.stages["conversion"] = "onnxruntime"
        finally:
            self._seconds += time.perf_counter() - t0

    # stage 2
    def compiled(self, model: Any) -> None:
        """The compiled model on its target against TF, where gdp.compile built one."""
        if not self.probes:
            return
        t0 = time.perf_counter()
        try:
            if not model._specialized:
                why = (
                    "fp16 scales are chosen from each run's input range"
                    if all(s.static for s in model.inputs)
                    else "free dimensions, compiled per input shape"
                )
                self.stages["compiled"] = f"skipped: {why} at run time"
                return
            fp16 = model.precision == "fp16"
            for probe in self.probes:
                t1 = time.perf_counter()
                got = model.submit(list(probe.arrays), wait=True).result()
                self._times["compiled"] += time.perf_counter() - t1
                found = self._check(probe, got, fp16=fp16)
                if found is None:
                    continue
                name, bad = found
                raise _error(self.program, "compiled", probe, self.inputs, name, bad,
                             None, f"the model compiled for target {model.target.name!r}",
                             blame=self._blame(model, probe, fp16))  # fmt: skip
            self.stages["compiled"] = model.target.name
        finally:
            self._seconds += time.perf_counter() - t0

    def _blame(self, model: Any, probe: _Probe, fp16: bool) -> str:
        """Whether the rewritten graph (what the backend received) already disagrees."""
        spec = model._last
        names = [r.get("rule", r.get("name", "?")) for r in spec.rewrites] if spec else []
        try:
            got = run_onnxruntime(spec.onnx, graph_inputs(spec.onnx), probe.arrays)
        except Exception as err:
            return f"The rewritten graph does not run on onnxruntime ({_first_line(err)})"
        if self._check(probe, got, fp16=fp16) is not None:
            return (
                "The rewritten graph disagrees on onnxruntime too: a rewrite is at fault "
                f"(applied: {names or 'none'}" + (", and the fp16 pass" if fp16 else "") + ")"
            )
        return (
            f"The rewritten graph agrees on onnxruntime: the backend {model._backend.name!r} "
            "is at fault"
        )

    def report(self) -> dict:
        return {
            "probes": [
                {"name": p.label, "shapes": _shapes(self.inputs, p.arrays)} for p in self.probes
            ],
            "stages": dict(self.stages),
            "max_error": dict(self.compared),
            "skipped": dict(self.skipped),
            "seconds": self._seconds,
            # of which running TF, the converted graph on onnxruntime, the compiled model
            "runs_s": dict(self._times),
        }


class _TfRefused(Exception):
    pass


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300] if text else ''}"


def _error(program, stage, probe, inputs, name, bad, culprit, what, blame=None):
    shapes = ", ".join(f"{k} {v}" for k, v in _shapes(inputs, probe.arrays).items())
    msg = (
        f"{program.origin}: output {name!r} of {what} disagrees with TensorFlow on the "
        f"{probe.label} probe ({shapes}): {bad.describe()}."
    )
    if culprit is not None:
        msg += f" First TF op whose output disagrees: {culprit.describe()}."
        if culprit.suspects:
            listed = ", ".join(f"{t} {n!r}" for t, n in culprit.suspects)
            msg += f" Its inputs had no ONNX counterpart; it starts in one of: {listed}."
    if blame:
        msg += f" {blame}."
    msg += " gdp.compile(..., verify=False) skips this check."
    return VerificationError(
        msg,
        stage=stage,
        output=name,
        max_error=bad.max_error,
        tolerance=bad.tolerance,
        op_type=culprit.op_type if culprit else None,
        op_name=culprit.op_name if culprit else None,
    )


# -- finding the op -------------------------------------------------------------------------


def locate(
    program: TfProgram,
    graph: onnx.ModelProto,
    inputs: Sequence[TensorSig],
    arrays: Sequence[np.ndarray],
) -> Culprit | None:
    """The first TF op whose output the ONNX graph does not reproduce (module docstring);
    None where no TF tensor could be paired with an ONNX one."""
    try:
        return _locate(program, graph, inputs, arrays)
    except GdpError:
        raise
    except Exception as err:  # localisation is a courtesy: never hide the disagreement itself
        warnings.warn(
            f"verification could not localise the disagreement: {err}", RuntimeWarning, stacklevel=2
        )
        return None


def _locate(program, graph, inputs, arrays) -> Culprit | None:
    tf = _tensorflow()
    from tf2onnx import tf_loader

    concrete = program.function.get_concrete_function(*program.specs)
    tf_inputs = [t.name for t in concrete.inputs if t.dtype != tf.resource]
    tf_outputs = [t.name for t in concrete.outputs if t.dtype != tf.resource]
    with tf.device("/cpu:0"):
        graph_def = tf_loader.from_function(concrete, tf_inputs, tf_outputs)
    tf_graph = tf.Graph()
    with tf_graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    ops = _topological(tf_graph.get_operations())
    tensors = {t.name: t for op in ops for t in op.outputs}

    # TF tensor name -> ONNX tensor name.
    pairs: dict[str, str] = {}
    for sig, name in zip(inputs, tf_inputs, strict=False):
        pairs[name] = sig.name
    for value, name in zip(graph.graph.output, tf_outputs, strict=False):
        pairs.setdefault(name, value.name)
    initializers = {t.name for t in graph.graph.initializer}
    for node in graph.graph.node:
        for name in node.output:
            if name in tensors:
                pairs.setdefault(name, name)
    for node in graph.graph.node:
        for i, name in enumerate(node.output):
            if name and f"{node.name}:{i}" in tensors:
                pairs.setdefault(f"{node.name}:{i}", name)
    comparable = {
        k: v
        for k, v in pairs.items()
        if v not in initializers
        and tensors[k].op.type not in ("Const", "Placeholder")
        and (tensors[k].dtype.is_numpy_compatible and tensors[k].dtype != tf.string)
    }
    if not comparable:
        return None

    feeds = {}
    for name, array in zip(tf_inputs, arrays, strict=False):
        if name in tensors:
            feeds[tensors[name]] = array
    for external, internal in concrete.graph.captures:
        if (
            internal.dtype != tf.resource
            and hasattr(external, "numpy")
            and internal.name in tensors
        ):
            feeds[tensors[internal.name]] = external.numpy()
    fetch = sorted(comparable)
    with tf.compat.v1.Session(graph=tf_graph) as session:
        values = session.run([tensors[n] for n in fetch], feeds)
    want = dict(zip(fetch, values, strict=True))
    graph_ins = {s.name for s in inputs}
    got = run_onnxruntime(
        graph, inputs, arrays, extra=[v for v in comparable.values() if v not in graph_ins]
    )
    feed_by_name = {s.name: a for s, a in zip(inputs, arrays, strict=True)}
    upstream = _upstream(graph, arrays, sorted(set(comparable.values())))

    status: dict[str, bool] = {}  # TF tensor -> agrees
    mismatches: dict[str, Mismatch] = {}
    for name in fetch:
        onnx_name = comparable[name]
        value = got.get(onnx_name, feed_by_name.get(onnx_name))
        if value is None:
            continue
        bad = _compare_any_layout(name, want[name], np.asarray(value), upstream[onnx_name])
        status[name] = bad is None
        if bad is not None:
            mismatches[name] = bad
    for name in tf_inputs:
        status[name] = True

    for op in ops:
        bad_outputs = [t.name for t in op.outputs if status.get(t.name) is False]
        if not bad_outputs:
            continue
        bad = mismatches[bad_outputs[0]]
        suspects = [s for s in _upstream_unknown(op, status) if s.type not in _TRIVIAL]
        if not suspects:
            return Culprit(op.type, op.name, _source_line(concrete, op.name), bad)
        if len(suspects) == 1:
            only = suspects[0]
            return Culprit(
                only.type, only.name, _source_line(concrete, only.name), bad, (op.type, op.name)
            )
        return Culprit(
            op.type,
            op.name,
            _source_line(concrete, op.name),
            bad,
            suspects=[(s.type, s.name) for s in suspects],
        )
    return None


def _compare_any_layout(
    name: str, want: np.ndarray, got: np.ndarray, where: Mapping[str, int]
) -> Mismatch | None:
    """compare(), accepting `got` in any order of axes (or unit axes) that fits TF's shape."""
    first = compare(name, want, got, **where)
    if first is None or want.shape == got.shape and first.max_error != math.inf:
        return first
    if want.size != got.size or want.dtype != got.dtype:
        return first
    wdims = [d for d in want.shape if d != 1]
    gdims = [d for d in got.shape if d != 1]
    if sorted(wdims) != sorted(gdims) or len(gdims) > 6:
        return first
    squeezed = got.reshape(gdims)
    for perm in itertools.permutations(range(len(gdims))):
        if [gdims[p] for p in perm] != wdims:
            continue
        if compare(name, want, np.transpose(squeezed, perm).reshape(want.shape), **where) is None:
            return None
    return first


def _topological(ops: list) -> list:
    order, seen = [], set()
    for root in ops:
        stack = [(root, False)]
        while stack:
            op, done = stack.pop()
            if done:
                order.append(op)
                continue
            if op.name in seen:
                continue
            seen.add(op.name)
            stack.append((op, True))
            for dep in [*(t.op for t in op.inputs), *op.control_inputs]:
                if dep.name not in seen:
                    stack.append((dep, False))
    return order


def _upstream_unknown(op, status: Mapping[str, bool]) -> list:
    """The ops upstream of `op` reached through tensors that were not compared, in topological
    order from the inputs; empty where every input of `op` was compared and agrees."""
    found, seen, stack = [], set(), list(op.inputs)
    while stack:
        tensor = stack.pop()
        if status.get(tensor.name) is not None or tensor.op.type in ("Const", "Placeholder"):
            continue
        producer = tensor.op
        if producer.name in seen:
            continue
        seen.add(producer.name)
        found.append(producer)
        stack.extend(producer.inputs)
    return found[::-1]


def _source_line(concrete, op_name: str) -> str | None:
    """The user's line that made `op_name`, where TF recorded it (the front end's lookup)."""
    from gdp.frontend.tensorflow import _source_line as source_line

    return source_line(concrete.graph, op_name)
