"""ONNX -> TVM Relax for every TVM backend: the importer, a check that names the first op it
cannot convert, clean-up passes that undo what the importer writes in a form the kernels pay
for, and bounds checks of the indices gathers and scatters read (applied in IMPORT_PASSES
order)."""

from __future__ import annotations

import contextlib
import gc
import io

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.shape_inference
import tvm
import tvm_ffi
from tvm import relax

from gdp.errors import CompileError, InputError, UnsupportedOpError
from gdp.runtime.backends.tvm.tvm_log import tvm_notices_dropped


def import_onnx(model: onnx.ModelProto) -> tvm.IRModule:
    """`model` as a Relax module with the clean-up passes applied (constants kept in the graph)."""
    from tvm.relax.frontend.onnx import from_onnx

    check_importable(model)
    model = exact_resize_scales(model)
    model = explicit_max_pool_pads(model)
    model = one_hots_as_comparisons(model)
    # The importer print()s the node it failed on to stdout, which is the user's program's
    # (a pipe of results, gdp export's JSON): kept for the error instead.
    printed = io.StringIO()
    failure = None
    with contextlib.redirect_stdout(printed), tvm_notices_dropped():
        try:
            with _pairwise_min_max_of_run_time_extents():
                mod = from_onnx(model, keep_params_in_input=False)
        except Exception as err:
            # Without the importer's frames, which hold its BlockBuilder: freed here, where its
            # notice on stderr is dropped, not when the error is collected later.
            failure = err.with_traceback(None)
        if failure is not None:
            gc.collect()
    if failure is not None:
        where = printed.getvalue().strip().splitlines()
        at = f" ({where[0][:300]})" if where else ""
        raise CompileError(f"TVM's Relax ONNX importer failed: {failure}{at}") from failure
    check_output_types(model, mod)
    mod = tvm.transform.Sequential(IMPORT_PASSES)(mod)
    refused = mod["main"].attrs.get(REFUSED_ATTR) if mod["main"].attrs is not None else None
    if refused:
        # Raised here, not in the pass: TVM's pass infrastructure re-raises a Python exception
        # from a pass as its own error type.
        raise InputError(str(refused))
    return mod


def check_output_types(model: onnx.ModelProto, mod: tvm.IRModule) -> None:
    """Refuse an import whose outputs' element types are not the graph's: a converter that
    computes in another type (TVM's OneHot made float32 one-hots float64 from its Python
    values) would return arrays of a type the model does not declare."""
    ret = mod["main"].ret_ty
    fields = list(ret.fields) if isinstance(ret, tvm.ir.TupleType) else [ret]
    if len(fields) != len(model.graph.output):
        return  # not one field per output: nothing to pair
    for output, info in zip(model.graph.output, fields, strict=True):
        declared = output.type.tensor_type.elem_type
        if declared == onnx.TensorProto.UNDEFINED or not isinstance(info, relax.TensorType):
            continue
        want = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(declared)).name
        got = str(info.dtype)
        if got and got != want:
            raise CompileError(
                f"TVM's Relax ONNX importer made output {output.name!r} {got} where the graph"
                f" declares {want}"
            )


@contextlib.contextmanager
def _pairwise_min_max_of_run_time_extents():
    """While importing: ONNX Min, Max, Sum and Mean whose operands' run-time extents are
    different expressions folded pairwise (the importer's own `_impl_dynamic`, which it uses
    when a shape is unknown), instead of refused.

    The importer stacks the operands of these ops, which needs one broadcast shape at import
    time; two windows of a shape-generic stencil (x[0:-4] and x[4:], ONNX's end INT_MAX) have
    extents that are equal but written differently until InboundSlices resolves them, and the
    importer raised "Cannot broadcast symbolic dimensions" on every erosion, median and Canny
    over a free size. The elementwise form is what ONNX defines and what PairwiseMinMax makes
    of the stack afterwards anyway. Runs under gdp's process-wide compile lock."""
    from tvm.relax.frontend.onnx import onnx_frontend

    base = onnx_frontend.MultiInputBase
    stacked = base.__dict__["_impl_v1"]

    def impl_v1(cls, bb, inputs, attr, params):
        try:
            return stacked.__func__(cls, bb, inputs, attr, params)
        except ValueError as err:
            if "Cannot broadcast symbolic dimensions" not in str(err):
                raise
            return cls._impl_dynamic(bb, inputs)

    base._impl_v1 = classmethod(impl_v1)
    try:
        yield
    finally:
        base._impl_v1 = stacked


def check_importable(model: onnx.ModelProto) -> None:
    """Name the first op (and its node) that TVM's Relax ONNX importer has no converter for."""
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    convertible = _get_convert_map()
    for node in model.graph.node:
        if node.op_type not in convertible:
            raise UnsupportedOpError(
                node.op_type, node.name, "TVM's Relax ONNX importer has no converter for it"
            )
    check_integer_divisors(model)


_INTEGERS = {
    onnx.TensorProto.INT8,
    onnx.TensorProto.INT16,
    onnx.TensorProto.INT32,
    onnx.TensorProto.INT64,
    onnx.TensorProto.UINT8,
    onnx.TensorProto.UINT16,
    onnx.TensorProto.UINT32,
    onnx.TensorProto.UINT64,
}


def check_integer_divisors(model: onnx.ModelProto) -> None:
    """Refuse an integer Div or Mod whose divisor is not a constant without zeros.

    onnxruntime raises on an integer division by zero ("Integer division by zero"); compiled
    code cannot raise, and the CPU's integer divide traps: the process died of SIGFPE. A
    divisor known only at run time is refused (UnsupportedOpError): a graph whose divisor
    comes from a free input extent then compiles per shape, where the extent is a constant."""
    nodes = [n for n in model.graph.node if n.op_type in ("Div", "Mod") and len(n.input) > 1]
    if not nodes:
        return
    constants = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            constants[node.output[0]] = node.attribute[0].t
    types = {t.name: t.data_type for t in model.graph.initializer}
    inferred = onnx.shape_inference.infer_shapes(model)
    for value in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        types[value.name] = value.type.tensor_type.elem_type
    for node in nodes:
        divisor = node.input[1]
        if types.get(divisor, types.get(node.input[0])) not in _INTEGERS:
            continue
        if divisor not in constants:
            raise UnsupportedOpError(
                node.op_type,
                node.name,
                "an integer division by a divisor known only at run time: onnxruntime raises"
                " on a zero divisor, which compiled code cannot (the CPU's divide traps); gdp"
                " compiles integer division by constants",
            )
        if np.any(onnx.numpy_helper.to_array(constants[divisor]) == 0):
            raise UnsupportedOpError(
                node.op_type, node.name, "an integer division by a constant zero"
            )


# ONNX Resize's coordinate transformations that use the given scale (the others use only the
# input and output extents, which TVM's resize computes as ONNX does).
_SCALE_COORDINATES = (
    "half_pixel",
    "pytorch_half_pixel",
    "asymmetric",
    "half_pixel_symmetric",
    "tf_half_pixel_for_nn",
)
_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)


def exact_resize_scales(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each Resize given `scales` whose product with an input extent is not a whole
    number written as per-axis Gathers (and for linear, their weighted sum) of constant indices
    and weights computed as ONNX defines them (float32, as onnxruntime does).

    ONNX resizes to floor(extent * scale) and maps output x to input (x + 0.5) / scale - 0.5
    (half_pixel; the other modes alike) with the scale as given; TVM's importer passes only the
    output size, and its resize maps with extent_in / extent_out, which differs when the product
    is not whole: values off by up to 2 on data in [-3, 3]. Where every product is whole the
    two agree and TVM's resize stays (but for half_pixel_symmetric, which TVM's resize lacks).
    A cubic resize, or an antialiased downscale, of such scales is refused
    (UnsupportedOpError), not computed wrongly."""
    if not any(n.op_type == "Resize" for n in model.graph.node):
        return model
    exact, done = model, set()
    while True:  # one Resize at a time: a rewritten one's output extent changes what follows
        rewritten = _rewrite_next_resize(exact, done)
        if rewritten is None:
            return exact
        exact = rewritten


def _rewrite_next_resize(model: onnx.ModelProto, done: set) -> onnx.ModelProto | None:
    """`model` with its first Resize not in `done` (by output name) that needs it computed
    exactly (added to `done`), or None where none is left. The shapes come from ONNX's shape
    inference over the graph as it now is (its stale value_info dropped): inference sizes a
    Resize in float64 (10 * 1.3f is 12), onnxruntime in float32 (13), so a Resize after a
    rewritten one must see the extent the rewrite made (the Gathers' 13), not the one declared."""
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)  # the caller's model stays as it was
    del stripped.graph.value_info[:]
    shapes = _static_shapes(stripped)
    constants = _constant_values(model)
    for index, node in enumerate(model.graph.node):
        if node.op_type != "Resize" or node.output[0] in done:
            continue
        done.add(node.output[0])
        new = _exact_resize(node, shapes, constants)
        if new is None:
            continue
        nodes = [*model.graph.node[:index], *new[0], *model.graph.node[index + 1 :]]
        del stripped.graph.node[:]
        stripped.graph.node.extend(nodes)
        stripped.graph.initializer.extend(new[1])
        return stripped
    return None


def explicit_max_pool_pads(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each MaxPool of auto_pad SAME_UPPER/SAME_LOWER over a static input given
    its pads explicitly, computed as TF and onnxruntime do.

    TVM's importer computes a SAME pad as (out - 1) * stride + kernel - extent without a floor
    at 0 and halves it with Python's floor division: where the pad is -1 (tf.nn.max_pool2d(x,
    1, 2, "SAME") over an even extent, which tf2onnx writes as SAME_UPPER when the size is
    free) the windows began one pixel early, a silent wrong answer (found by
    tests/corpus/test_tf_fuzz.py, seed 173)."""
    if not any(n.op_type == "MaxPool" for n in model.graph.node):
        return model
    shapes = _static_shapes(model)
    explicit = onnx.ModelProto()
    explicit.CopyFrom(model)  # the caller's model stays as it was
    for node in explicit.graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        mode = attrs.get("auto_pad", b"")
        if node.op_type != "MaxPool" or mode not in (b"SAME_UPPER", b"SAME_LOWER"):
            continue
        if node.input[0] not in shapes:
            continue  # a free extent: TVM's importer cannot read it either, and refuses it
        extents = shapes[node.input[0]][0][2:]
        kernel = attrs["kernel_shape"]
        strides = attrs.get("strides", [1] * len(kernel))
        dilations = attrs.get("dilations", [1] * len(kernel))
        begins, ends = [], []
        for extent, k, stride, dilation in zip(extents, kernel, strides, dilations, strict=True):
            out = -(-extent // stride)
            pad = max(0, (out - 1) * stride + (k - 1) * dilation + 1 - extent)
            small, large = pad // 2, pad - pad // 2
            begins.append(small if mode == b"SAME_UPPER" else large)
            ends.append(large if mode == b"SAME_UPPER" else small)
        kept = [a for a in node.attribute if a.name not in ("auto_pad", "pads")]
        del node.attribute[:]
        node.attribute.extend(kept)
        node.attribute.append(onnx.helper.make_attribute("pads", begins + ends))
    return explicit


def one_hots_as_comparisons(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each OneHot of a constant depth written as ONNX defines it: the indices
    as int64, a negative one counted from depth, compared with the classes along `axis`, and
    a Where of the on and off values (an index outside [-depth, depth) all off).

    TVM's importer passed a one-element depth ([4]) on as a list and failed, and made the
    values Python floats, so a float32 OneHot came out float64."""
    nodes = [n for n in model.graph.node if n.op_type == "OneHot"]
    if not nodes:
        return model
    constants = _constant_values(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
        values = (*inferred.input, *inferred.value_info, *inferred.output)
        ranks = {
            v.name: len(v.type.tensor_type.shape.dim)
            for v in values
            if v.type.tensor_type.HasField("shape")
        }
    except Exception:  # a graph inference cannot read: ranks unknown
        ranks = {}
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)  # the caller's model stays as it was
    out_nodes, initializers = [], []
    for node in rewritten.graph.node:
        depth = constants.get(node.input[1]) if node.op_type == "OneHot" else None
        if depth is None or depth.size != 1:
            out_nodes.append(node)  # the importer's own converter, or its refusal
            continue
        depth = int(depth.reshape(()))
        axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
        rank = ranks.get(node.input[0])
        if axis >= 0 and rank is None:
            out_nodes.append(node)
            continue
        after = -axis - 1 if axis < 0 else rank - axis  # class axes after the one-hot axis
        name = node.output[0]
        classes = np.arange(depth, dtype=np.int64).reshape([depth] + [1] * after)
        for tensor_name, value in (
            (f"{name}/gdp_classes", classes),
            (f"{name}/gdp_depth", np.array(depth, np.int64)),
            (f"{name}/gdp_zero", np.array(0, np.int64)),
            (f"{name}/gdp_axis", np.array([axis], np.int64)),
            (f"{name}/gdp_off", np.array(0, np.int64)),
            (f"{name}/gdp_on", np.array(1, np.int64)),
        ):
            initializers.append(onnx.numpy_helper.from_array(value, tensor_name))
        make = onnx.helper.make_node
        out_nodes += [
            make("Cast", [node.input[0]], [f"{name}/gdp_i"], to=onnx.TensorProto.INT64),
            make("Less", [f"{name}/gdp_i", f"{name}/gdp_zero"], [f"{name}/gdp_neg"]),
            make("Add", [f"{name}/gdp_i", f"{name}/gdp_depth"], [f"{name}/gdp_up"]),
            make(
                "Where", [f"{name}/gdp_neg", f"{name}/gdp_up", f"{name}/gdp_i"], [f"{name}/gdp_w"]
            ),
            make("Unsqueeze", [f"{name}/gdp_w", f"{name}/gdp_axis"], [f"{name}/gdp_u"]),
            make("Equal", [f"{name}/gdp_u", f"{name}/gdp_classes"], [f"{name}/gdp_hit"]),
            make("Gather", [node.input[2], f"{name}/gdp_off"], [f"{name}/gdp_offv"], axis=0),
            make("Gather", [node.input[2], f"{name}/gdp_on"], [f"{name}/gdp_onv"], axis=0),
            make("Where", [f"{name}/gdp_hit", f"{name}/gdp_onv", f"{name}/gdp_offv"], [name]),
        ]
    del rewritten.graph.node[:]
    rewritten.graph.node.extend(out_nodes)
    rewritten.graph.initializer.extend(initializers)
    return rewritten


def _constant_values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The values of the graph's initializers and Constant nodes, by name."""
    constants = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            constants[node.output[0]] = onnx.numpy_helper.to_array(node.attribute[0].t)
    return constants


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[tuple[int, ...], int]]:
    """Each value's static shape and element type, by name, from ONNX's shape inference."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # a graph inference cannot read: nothing known
        return {}
    found = {}
    graph = inferred.graph
    for info in [*graph.input, *graph.value_info, *graph.output]:
        tensor = info.type.tensor_type
        dims = tensor.shape.dim if tensor.HasField("shape") else None
        if dims is not None and all(d.HasField("dim_value") for d in dims):
            found[info.name] = (tuple(d.dim_value for d in dims), tensor.elem_type)
    return found


def _exact_resize(node, shapes, constants):
    """The Gathers and weights that compute `node` (a Resize) exactly, with their constants;
    None where TVM's resize is already exact or the node is not of the form handled."""
    inputs = list(node.input) + [""] * (4 - len(node.input))
    scales = constants.get(inputs[2]) if inputs[2] else None
    if scales is None or scales.size == 0 or (inputs[3] and inputs[3] in constants):
        return None
    if inputs[0] not in shapes:
        return None
    shape, elem_type = shapes[inputs[0]]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}

    def text(name, default):
        value = attrs.get(name, default)
        return value.decode() if isinstance(value, bytes) else value

    coordinates = text("coordinate_transformation_mode", "half_pixel")
    mode = text("mode", "nearest")
    axes = [int(a) % len(shape) for a in attrs.get("axes", range(len(shape)))]
    scales = np.asarray(scales, np.float32).reshape(-1)
    if len(axes) != len(scales) or coordinates not in _SCALE_COORDINATES:
        return None
    resized, inexact = {}, coordinates == "half_pixel_symmetric"  # TVM has no such mode
    for axis, scale in zip(axes, scales, strict=True):
        # In float32, as onnxruntime: 10 * 1.3f is 13, where TVM's importer makes it 12.
        out = int(np.floor(np.float32(shape[axis]) * np.float32(scale)))
        if scale != 1:
            resized[axis] = (float(scale), out)
        inexact |= shape[axis] * float(scale) != out
    if not inexact or not resized or any(out < 1 for _, out in resized.values()):
        return None  # an empty output: TVM's resize refuses it (CompileError)
    where = f"Resize {node.name!r} (scales {scales.tolist()} of a {list(shape)} input)"
    if mode == "cubic" or (
        attrs.get("antialias", 0) and any(s < 1 for s, _ in resized.values()) and mode == "linear"
    ):
        raise UnsupportedOpError(
            "Resize",
            node.name,
            f"{where}: a {mode} resize to a size that is not extent * scale is not computed "
            "as ONNX defines it by TVM; give `sizes`, or scales whose products are whole",
        )
    if mode == "linear" and elem_type not in _FLOATS:
        return None
    nearest = text("nearest_mode", "round_prefer_floor")
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    prefix = f"gdp_resize_{node.output[0]}"  # an output's name is unique in the graph
    nodes, tensors, value = [], [], inputs[0]
    last = max(resized)
    for axis, (scale, out) in sorted(resized.items()):
        x = _resize_coordinates(coordinates, scale, shape[axis], out)
        name = f"{prefix}_{axis}"
        target = node.output[0] if axis == last else f"{name}_out"
        if mode == "nearest":
            index = np.clip(_nearest(x, nearest), 0, shape[axis] - 1).astype(np.int64)
            tensors.append(onnx.numpy_helper.from_array(index, f"{name}_i"))
            nodes.append(onnx.helper.make_node("Gather", [value, f"{name}_i"], [target], axis=axis))
        else:
            x = np.clip(x, np.float32(0), np.float32(shape[axis] - 1))
            low = np.floor(x).astype(np.int64)
            high = np.minimum(low + 1, shape[axis] - 1)
            weight = (x - low.astype(np.float32)).astype(dtype)
            at = [1] * len(shape)
            at[axis] = out
            tensors += [
                onnx.numpy_helper.from_array(low, f"{name}_i0"),
                onnx.numpy_helper.from_array(high, f"{name}_i1"),
                onnx.numpy_helper.from_array((1 - weight).reshape(at), f"{name}_w0"),
                onnx.numpy_helper.from_array(weight.reshape(at), f"{name}_w1"),
            ]
            nodes += [
                onnx.helper.make_node("Gather", [value, f"{name}_i0"], [f"{name}_g0"], axis=axis),
                onnx.helper.make_node("Gather", [value, f"{name}_i1"], [f"{name}_g1"], axis=axis),
                onnx.helper.make_node("Mul", [f"{name}_g0", f"{name}_w0"], [f"{name}_m0"]),
                onnx.helper.make_node("Mul", [f"{name}_g1", f"{name}_w1"], [f"{name}_m1"]),
                onnx.helper.make_node("Add", [f"{name}_m0", f"{name}_m1"], [target]),
            ]
        value = target
    return nodes, tensors


def _resize_coordinates(mode: str, scale: float, extent: int, out: int) -> np.ndarray:
    """The input coordinate of each output index along one axis, as ONNX's Resize defines it
    for `mode` with `scale` as given (float32, as onnxruntime computes it)."""
    f = np.float32
    i = np.arange(out, dtype=f)
    s = f(scale)
    if mode == "half_pixel":
        return (i + f(0.5)) / s - f(0.5)
    if mode == "pytorch_half_pixel":
        return (i + f(0.5)) / s - f(0.5) if out > 1 else np.zeros(out, f)
    if mode == "asymmetric":
        return i / s
    if mode == "tf_half_pixel_for_nn":
        return (i + f(0.5)) / s
    # half_pixel_symmetric
    adjustment = f(out) / (s * f(extent))
    offset = f(extent) / f(2) * (f(1) - adjustment)
    return offset + (i + f(0.5)) / s - f(0.5)


def _nearest(x: np.ndarray, mode: str) -> np.ndarray:
    if mode == "floor":
        return np.floor(x)
    if mode == "ceil":
        return np.ceil(x)
    half = x == np.floor(x) + np.float32(0.5)
    if mode == "round_prefer_ceil":
        return np.where(half, np.ceil(x), np.round(x))
    return np.where(half, np.floor(x), np.round(x))


@relax.transform.function_pass(opt_level=0, name="PairwiseMinMax")
class PairwiseMinMax:
    """max/min of a two-tensor stack over its new axis -> elementwise maximum/minimum.

    TVM's ONNX importer writes Max(a, b) and Min(a, b) of known shapes as a stack and a
    reduction: a reduction fuses with nothing and runs as a kernel of its own, so a chain of
    them (erosion, dilation, sorting networks) becomes one kernel per tap. The elementwise form
    fuses into one kernel."""

    def transform_function(self, func, mod, ctx) -> relax.Function:
        from tvm.relax.dpl import is_op, is_tuple, rewrite_call, wildcard

        a, b = wildcard(), wildcard()
        for reduce_op, binary in (
            ("relax.max", relax.op.maximum),
            ("relax.min", relax.op.minimum),
        ):
            pattern = is_op(reduce_op)(is_op("relax.stack")(is_tuple([a, b])))

            def rewrite(call, matches, binary=binary):
                axis = call.attrs.axis
                over_stack = axis is not None and [int(v) for v in axis] == [0]
                if not over_stack or call.attrs.keepdims:
                    return call
                return binary(matches[a], matches[b])

            func = rewrite_call(pattern, rewrite, func)
        return func


# Elementwise binary ops that broadcast their operands themselves.
_BROADCASTING = {
    "relax.minimum": relax.op.minimum,
    "relax.maximum": relax.op.maximum,
    "relax.add": relax.op.add,
    "relax.subtract": relax.op.subtract,
    "relax.multiply": relax.op.multiply,
}


@relax.transform.function_pass(opt_level=0, name="ImplicitBroadcasts")
class ImplicitBroadcasts:
    """An elementwise op's operand broadcast_to the shape its other operand already has ->
    the operand itself (the op broadcasts it). TVM's ONNX importer broadcasts both operands of
    Min and Max explicitly; a constant so broadcast to a static image shape was then folded
    into a constant of that size (a 1080p warp's clamps read 24 MB of -2.0s and 0s a run)."""

    def transform_function(self, func, mod, ctx) -> relax.Function:
        from tvm.relax.dpl import is_op, rewrite_call, wildcard

        bound = relax.analysis.get_var2val(func)
        for name, binary in _BROADCASTING.items():
            a, b = wildcard(), wildcard()

            def rewrite(call, matches, binary=binary, a=a, b=b):
                # A broadcast to its source's own shape is dropped first; then one to the
                # shape the other side has (one side keeps the result's shape).
                first = _unbroadcast(matches[a], None, bound)
                second = _unbroadcast(matches[b], None, bound)
                stripped = _unbroadcast(second, first, bound)
                if stripped is second:
                    first = _unbroadcast(first, second, bound)
                second = stripped
                if first is matches[a] and second is matches[b]:
                    return call
                return binary(first, second)

            func = rewrite_call(is_op(name)(a, b), rewrite, func)
        return func


def _unbroadcast(operand: relax.Expr, other: relax.Expr | None, bound: dict) -> relax.Expr:
    """`operand` without its broadcast_to where `other` has the broadcast shape already, or
    (`other` None) where the broadcast's source has it."""
    # rewrite_call gives the matched operands as their bound values
    value = bound.get(operand) if isinstance(operand, relax.Var) else operand
    if not (
        isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.broadcast_to"
    ):
        return operand
    source = value.args[0]
    shape = getattr((source if other is None else other).ty, "shape", None)
    if shape is None or not tvm_ffi.structural_equal(value.ty.shape, shape):
        return operand
    return source


@relax.transform.function_pass(opt_level=0, name="PlainFloatToInt")
class PlainFloatToInt:
    """The importer's float -> integer Cast back to one conversion.

    TVM's ONNX importer writes Cast(float -> int8..int32, uint8..uint32) as NaN/inf -> 0, a
    conversion to a wider integer, and a wrap (mask or mod, then a sign fix), which is what
    C would do for out-of-range values on some machines. ONNX leaves an out-of-range cast
    undefined, and every graph gdp builds clamps before it converts; the emulation costs a
    dozen operations per element and, once inlined, copies its operand five times (a 1080p
    warp's index arithmetic grew tenfold). Matches only the importer's exact emission."""

    def transform_function(self, func, mod, ctx) -> relax.Function:
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


# ONNX's Slice ends past the extent (INT_MAX for "to the end") and negative (from the end).
_TO_THE_END = 2**31 - 1


@relax.transform.function_pass(opt_level=0, name="InboundSlices")
class InboundSlices:
    """A slice of a tensor with run-time extents (shape-generic models) with its begin and end
    written against the extent, where they lie inside it.

    ONNX writes "to the end" as INT_MAX and "but the last k" as -k; TVM's importer passes them
    on, and Relax's strided_slice, clamping them, gives the result an extent such as
    min(2147483643, H): the sum of that slice and another of extent H then has no known shape
    ("emit_te now only supports Tensor that has ShapeExpr shape": a 5x5 Gaussian written with
    slices, and every stencil after a reflected pad). With the ends resolved (H + 4 - 4 = H)
    the slices' extents are exact.

    A slice lies inside its axis only for extents above some minimum (x[-2:-1] needs H >= 2):
    the pass assumes the least extent of each free dimension that makes every slice of it
    inbound, and records those minima on `main` (MIN_EXTENTS_ATTR, by the dimension's variable
    name). The executable serves only shapes that meet them (`min_extents`); a smaller shape
    compiles its own. A slice whose bound is not of that form, or of static extents, is left
    alone."""

    def transform_function(self, func, mod, ctx) -> relax.Function:
        if not _has_free_extent(func):
            return func
        # A mutator, not a pattern rewrite: each binding after a resolved slice is emitted
        # again, its shape inferred anew from its operands' exact extents.
        mutator = _InboundSliceMutator(mod)
        func = mutator.visit_expr(func)
        if mutator.minima and func.attrs is not None and "global_symbol" in func.attrs:
            func = func.with_attr(MIN_EXTENTS_ATTR, dict(mutator.minima))
        return func


@relax.transform.function_pass(opt_level=0, name="FirstIndexOfTies")
class FirstIndexOfTies:
    """argmax/argmin -> maximum(that, 0).

    TVM's arg-reductions start from the index -1 with the type's extreme value, and a tie keeps
    the lower index: where every value along the axis is that extreme (a uint8 pixel of three
    0s under argmax, of three 255s under argmin; -inf floats), the result stayed -1, where
    TensorFlow, NumPy and ONNX give the first index, 0. Measured on a photo: argmax of x // 64
    over its channels was -1 at 16590 of 73861 pixels. The importer's select_last_index
    reverses the axis around argmax, so the same clamp makes its n - 1 - index right."""

    def transform_function(self, func, mod, ctx) -> relax.Function:
        return _FirstIndexMutator(mod).visit_expr(func)


@relax.expr_functor.mutator
class _FirstIndexMutator(relax.PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if isinstance(call, relax.Call) and getattr(call.op, "name", "") in (
            "relax.argmax",
            "relax.argmin",
        ):
            dtype = call.ty.dtype
            return relax.op.maximum(self.builder_.emit(call), relax.const(0, dtype))
        return call


# The attribute of `main` that carries InboundSlices' assumed minimum extents.
MIN_EXTENTS_ATTR = "gdp_min_extents"
# The largest minimum extent InboundSlices assumes for a free dimension: a slice needing more
# is left alone (the generic compile then fails, and the model compiles per shape).
_MAX_ASSUMED_EXTENT = 1 << 12


def _has_free_extent(func: relax.Function) -> bool:
    return any(
        isinstance(p.ty, relax.TensorType)
        and isinstance(p.ty.shape, relax.ShapeExpr)
        and not all(isinstance(d, tvm.tirx.IntImm) for d in p.ty.shape.values)
        for p in func.params
    )


@relax.expr_functor.mutator
class _InboundSliceMutator(relax.PyExprMutator):
    def __init__(self, mod=None) -> None:
        super().__init__(mod)
        self.minima: dict[str, int] = {}  # free dimension's variable name -> assumed minimum

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if isinstance(call, relax.Call) and getattr(call.op, "name", "") == "relax.strided_slice":
            resolved = _inbound_slice(call, self.minima)
            if resolved is not None:
                return resolved
        return call


def _inbound_slice(call: relax.Call, minima: dict[str, int]) -> relax.Expr | None:
    """The slice with begin and end resolved against its axes' extents, raising `minima` (the
    assumed least extent of each free dimension) as far as it must; None to leave it."""
    from tvm import tirx

    x = call.args[0]
    shape = x.ty.shape if isinstance(x.ty, relax.TensorType) else None
    if not isinstance(shape, relax.ShapeExpr) or all(
        isinstance(d, tirx.IntImm) for d in shape.values
    ):
        return None
    if len(call.args) != 5 or call.attrs.assume_inbound:
        return None
    axes, begin, end, strides = (call.args[k] for k in range(1, 5))
    if not all(isinstance(t, tvm.ir.Tuple) for t in (axes, begin, end, strides)):
        return None

    def value(e):
        return e if isinstance(e, tirx.IntImm) else None

    new_begin, new_end, raised = [], [], {}
    for a, b, e, st in zip(axes.fields, begin.fields, end.fields, strides.fields, strict=True):
        a, b, e, st = value(a), value(b), value(e), value(st)
        if not all(isinstance(v, tirx.IntImm) for v in (a, b, e, st)) or int(st) != 1:
            return None
        n = shape.values[int(a)]
        b_ = n + int(b) if int(b) < 0 else tirx.const(int(b), str(n.ty.dtype))
        e_ = (
            n
            if int(e) >= _TO_THE_END
            else n + int(e)
            if int(e) < 0
            else tirx.const(int(e), str(n.ty.dtype))
        )
        bounds = {**minima, **raised}
        analyzer = _bounded_analyzer(shape, bounds)
        b_, e_ = analyzer.simplify(b_), analyzer.simplify(e_)
        if not _inside(analyzer, b_, e_, n):
            # The least extent of the axis's one free variable that puts the slice inside it.
            free = tirx.analysis.undefined_vars(n)
            if len(free) != 1:
                return None
            name = str(free[0].name)
            least = _least_extent(shape, bounds, name, (b_, e_, n))
            if least is None:
                return None
            raised[name] = least
        new_begin.append(b_)
        new_end.append(e_)
    minima.update(raised)
    return relax.op.strided_slice(
        x, [int(value(a)) for a in axes.fields], new_begin, new_end, None, assume_inbound=True
    )


def _inside(analyzer, begin, end, extent) -> bool:
    return (
        analyzer.can_prove(begin >= 0)
        and analyzer.can_prove(begin <= end)
        and analyzer.can_prove(end <= extent)
    )


def _bounded_analyzer(shape: relax.ShapeExpr, minima: dict[str, int]):
    """An analyzer that knows each free variable of `shape` lies in [its minimum, INT_MAX)."""
    from tvm import tirx

    analyzer = tvm.sym.Analyzer()
    for dim in shape.values:
        for var in tirx.analysis.undefined_vars(dim):
            dtype = str(var.ty.dtype)
            least = minima.get(str(var.name), 0)
            analyzer.bind(
                var,
                tvm.ir.Range.from_min_extent(
                    tirx.const(least, dtype), tirx.const(_TO_THE_END - least, dtype)
                ),
            )
    return analyzer


def _least_extent(shape, minima: dict[str, int], name: str, slice_) -> int | None:
    """The least minimum of variable `name` (above its present one, at most
    _MAX_ASSUMED_EXTENT) that puts `slice_` (begin, end, extent) inside its axis; the
    conditions are monotone in it."""
    low = minima.get(name, 0)

    def ok(m: int) -> bool:
        return _inside(_bounded_analyzer(shape, {**minima, name: m}), *slice_)

    if not ok(_MAX_ASSUMED_EXTENT):
        return None
    high = _MAX_ASSUMED_EXTENT
    while low + 1 < high:  # ok(high) holds, ok(low) does not
        mid = (low + high) // 2
        if ok(mid):
            high = mid
        else:
            low = mid
    return high


def min_extents(mod: tvm.IRModule) -> tuple[tvm.IRModule, list[list[int]]]:
    """`mod` without InboundSlices' attribute on `main`, and what it says as [input index,
    axis, least extent] of each free input dimension it constrains."""
    main = mod["main"]
    minima = main.attrs.get(MIN_EXTENTS_ATTR) if main.attrs is not None else None
    if not minima:
        return mod, []
    least = {str(k): int(v) for k, v in minima.items()}
    found = []
    for index, param in enumerate(main.params):
        shape = param.ty.shape if isinstance(param.ty, relax.TensorType) else None
        if not isinstance(shape, relax.ShapeExpr):
            continue
        for axis, dim in enumerate(shape.values):
            if isinstance(dim, tvm.tirx.Var) and str(dim.name) in least:
                found.append([index, axis, least[str(dim.name)]])
    mod = mod.clone()  # the caller's module is left as it was
    mod["main"] = main.without_attr(MIN_EXTENTS_ATTR)
    return mod, found


@relax.transform.function_pass(opt_level=0, name="ReflectedPads")
class ReflectedPads:
    """A reflected pad (ONNX Pad mode="reflect", TF's MirrorPad REFLECT: TVM's importer writes
    topi's mirror_pad) mirrors about the axis's ends, so it reads inside the axis only where the
    axis is longer than each side's padding; topi's kernel checks nothing and reads past the
    tensor where it is not (TF raises "paddings must be less than the dimension size").

    A static extent too short: an InputError naming it, before anything compiles (the pass
    writes it on `main` as REFUSED_ATTR, import_onnx raises it). A free one (shape-generic
    models): its least extent recorded with InboundSlices' (MIN_EXTENTS_ATTR), so that a
    shorter input compiles its own executable, which then refuses it."""

    def transform_function(self, func, mod, ctx) -> relax.Function:
        if not isinstance(func, relax.Function):
            return func
        minima: dict[str, int] = {}
        if func.attrs is not None and MIN_EXTENTS_ATTR in func.attrs:
            minima = {str(k): int(v) for k, v in func.attrs[MIN_EXTENTS_ATTR].items()}
        found = dict(minima)
        try:
            for call in _mirror_pads(func, mod):
                _reflected_pad_minima(call, mod[call.args[0]], found)
        except InputError as err:
            return func.with_attr(REFUSED_ATTR, str(err))
        if found != minima and func.attrs is not None and "global_symbol" in func.attrs:
            func = func.with_attr(MIN_EXTENTS_ATTR, found)
        return func


# The attribute of `main` that carries ReflectedPads' refusal of a static shape.
REFUSED_ATTR = "gdp_refused"


def _mirror_pads(func: relax.Function, mod: tvm.IRModule) -> list[relax.Call]:
    calls = []

    def visit(expr):
        if (
            isinstance(expr, relax.Call)
            and getattr(expr.op, "name", "") == "relax.call_tir"
            and isinstance(expr.args[0], tvm.ir.GlobalVar)
            and expr.args[0].name_hint.startswith("mirror_pad")
            and isinstance(mod[expr.args[0]], tvm.tirx.PrimFunc)
        ):
            calls.append(expr)

    relax.analysis.post_order_visit(func, visit)
    return calls


def _reflected_pad_minima(call: relax.Call, prim: tvm.tirx.PrimFunc, minima: dict) -> None:
    """Raise `minima` (free dimension's name -> least extent) to what each padded axis of this
    mirror_pad call needs; an InputError where a static axis is too short."""
    from tvm import tirx

    (x,) = call.args[1].fields
    shape = x.ty.shape if isinstance(x.ty, relax.TensorType) else None
    out = call.ty.shape if isinstance(call.ty, relax.TensorType) else None
    if not isinstance(shape, relax.ShapeExpr) or not isinstance(out, relax.ShapeExpr):
        raise CompileError("a reflected pad of a tensor of unknown rank or shape")
    before = _pad_befores(prim)
    analyzer = tvm.sym.Analyzer()
    for axis, (n, m) in enumerate(zip(shape.values, out.values, strict=True)):
        total = analyzer.simplify(m - n)
        if not isinstance(total, tirx.IntImm):
            raise CompileError(f"a reflected pad whose axis {axis} grows by {total}")
        if int(total) == 0:
            continue
        # Each side must be shorter than the axis (REFLECT); where topi's kernel does not show
        # the side before, both sides are taken as the whole padding.
        side = int(total) if axis not in before else max(before[axis], int(total) - before[axis])
        need = side + 1
        if isinstance(n, tirx.IntImm):
            if int(n) < need:
                raise InputError(
                    f"a reflected pad of {side} on axis {axis} needs the axis longer than"
                    f" {side}, got an extent of {int(n)} (TF: paddings must be less than the"
                    " dimension size)"
                )
            continue
        free = tirx.analysis.undefined_vars(n)
        offset = analyzer.simplify(n - free[0]) if len(free) == 1 else None
        if not isinstance(offset, tirx.IntImm):
            raise CompileError(f"a reflected pad of an axis of extent {n}")
        name = str(free[0].name)
        minima[name] = max(minima.get(name, 0), need - int(offset))


def _pad_befores(prim: tvm.tirx.PrimFunc) -> dict[int, int]:
    """Each padded axis's padding before, read from topi's mirror_pad kernel (one block storing
    x[indices]): its index on that axis is `i - before` inside the axis, under a test
    `i < before`."""
    from tvm import tirx

    from gdp.runtime.backends.tvm.fusion import tir_operands

    sch = tvm.s_tir.Schedule(prim)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    if len(blocks) != 1:
        return {}
    block = sch.get(blocks[0])
    iters = [iv.var for iv in block.iter_vars]
    found: dict[int, int] = {}

    def visit(e):
        if isinstance(e, tirx.LT) and isinstance(e.b, tirx.IntImm):
            for axis, v in enumerate(iters):
                if e.a.same_as(v):
                    found[axis] = int(e.b)
        for child in tir_operands(e):
            visit(child)

    if isinstance(block.body, tirx.BufferStore):
        visit(block.body.value)
    return found


# Relax's indexing ops -> the ONNX op TVM's importer writes each for.
_INDEXED = {
    "relax.take": "Gather",
    "relax.gather_elements": "GatherElements",
    "relax.scatter_elements": "ScatterElements",
    "relax.gather_nd": "GatherND",
    "relax.scatter_nd": "ScatterND",
}
# TVM's OpPatternKind for an opaque kernel: never fused, so the check runs before its gather.
_OPAQUE = 8


@tvm.transform.module_pass(opt_level=0, name="CheckedIndices")
class CheckedIndices:
    """Every gather and scatter whose indices are not constants known to lie inside the data
    reads them through a check that raises where one does not.

    TVM builds take (Gather), gather_elements, scatter_elements, gather_nd and scatter_nd
    without bounds checks ("fast mode"): an index outside the data's axis read or wrote past its
    buffer (garbage out, memory overwritten) and a large one killed the process with SIGSEGV,
    where onnxruntime raises. The check is a small serial kernel (indices, data) -> indices
    that fails with IndexError (the run's ExecutionError) where an index lies outside [-n, n)
    of the axis it addresses, and writes each as its non-negative equal, which the gather then
    reads. Constant indices inside the data (gdp's own lowerings of TF's resizes) stay as they
    are, so the gathers that fuse stay fused."""

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        mutator = _CheckedIndexMutator(mod)
        changed = False
        for gvar, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                new = mutator.visit_expr(func)
                if not new.same_as(func):
                    mutator.builder_.update_func(gvar, new)
                    changed = True
        return mutator.builder_.get() if changed else mod


@relax.expr_functor.mutator
class _CheckedIndexMutator(relax.PyExprMutator):
    def __init__(self, mod=None) -> None:
        super().__init__(mod)
        self.checkers: dict[tuple, tvm.ir.GlobalVar] = {}
        self.params: dict[relax.Var, str] = {}  # main's parameters -> the graph input's name

    def visit_function_(self, func: relax.Function) -> relax.Expr:
        self.params = {p: str(p.name) for p in func.params}
        return super().visit_function_(func)

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        name = getattr(call.op, "name", "") if isinstance(call, relax.Call) else ""
        if name not in _INDEXED or (name == "relax.take" and str(call.attrs.mode) != "fast"):
            return call
        data, indices = call.args[0], call.args[1]
        axes = _indexed_axes(call, name)
        if axes is None or self._constant_inside(data, indices, axes):
            return call
        if self._bounded_inside(data, indices, axes):
            return call
        # The check reads the indices as the graph gave them: the importer's where(i < 0,
        # i + n, i) would make an index below -n look inside.
        raw = self._unnormalized(indices)
        source = self._source(raw)
        data, raw = self._shaped(data), self._shaped(raw)
        checker = self._checker(_INDEXED[name], data, raw, axes, source)
        # The data's extents go to the check as scalars, not the data itself: a kernel that
        # read the data (for its shape) would be a second consumer of it, which keeps the
        # gather from fusing with the data's producer (a resize's passes ran as six kernels).
        extents = [relax.prim_value(data.ty.shape.values[a]) for a in axes]
        checked = self.builder_.emit(relax.call_tir(checker, relax.Tuple([raw, *extents]), raw.ty))
        return relax.Call(call.op, [data, checked, *call.args[2:]], call.attrs)

    def _shaped(self, expr: relax.Expr) -> relax.Expr:
        """`expr` with a shape of its own variables where the importer knows only its rank (the
        sum of two inputs of run-time extents): the check kernel and the gather need one."""
        ty = expr.ty
        if isinstance(ty.shape, relax.ShapeExpr):
            return expr
        dims = [tvm.tirx.Var(f"gdp_n{k}", "int64") for k in range(ty.ndim)]
        return self.builder_.match_cast(expr, relax.TensorType(dims, ty.dtype))

    def _binding(self, expr: relax.Expr) -> relax.Expr:
        if isinstance(expr, relax.Var):
            bound = self.lookup_binding(expr)
            if bound is not None:
                return bound
        return expr

    def _unnormalized(self, indices: relax.Expr) -> relax.Expr:
        """The indices before the importer's where(i < 0, i + n, i)."""
        bound = self._binding(indices)
        if not (isinstance(bound, relax.Call) and getattr(bound.op, "name", "") == "relax.where"):
            return indices
        raw = bound.args[2]
        less, add = (self._binding(a) for a in bound.args[:2])
        if all(
            isinstance(c, relax.Call) and getattr(c.op, "name", "") == op and c.args[0].same_as(raw)
            for c, op in ((less, "relax.less"), (add, "relax.add"))
        ):
            return raw
        return indices

    def _constant_inside(self, data: relax.Expr, indices: relax.Expr, axes: list[int]) -> bool:
        """Whether the indices are a constant inside the extents of the data's axes."""
        values = self._binding(self._unnormalized(indices))
        shape = data.ty.shape if isinstance(data.ty, relax.TensorType) else None
        if not isinstance(values, tvm.ir.GenericConst) or not isinstance(shape, relax.ShapeExpr):
            return False
        extents = [shape.values[a] for a in axes]
        if not all(isinstance(n, tvm.tirx.IntImm) for n in extents):
            return False
        index = values.value.numpy()
        if len(axes) > 1:  # one coordinate per slot of the last axis
            if index.ndim == 0 or index.shape[-1] != len(axes):
                return False
            n = np.array([int(e) for e in extents]).reshape((1,) * (index.ndim - 1) + (-1,))
        else:
            n = int(extents[0])
        return bool(np.all((index >= -n) & (index < n)))

    def _bounded_inside(self, data: relax.Expr, indices: relax.Expr, axes: list[int]) -> bool:
        """Whether the indices' values, bounded through the integer arithmetic that computes
        them from their types (_value_range: a uint8 image cast and scaled into a table's
        index, as gdp.cv2's LUT and addWeighted compute it), lie inside the one static
        extent they address: no check needed, and the gather fuses with what computes its
        indices (a 1080p addWeighted's check alone took 2.9 ms)."""
        shape = data.ty.shape if isinstance(data.ty, relax.TensorType) else None
        if len(axes) != 1 or not isinstance(shape, relax.ShapeExpr):
            return False
        extent = shape.values[axes[0]]
        if not isinstance(extent, tvm.tirx.IntImm):
            return False
        bounds = self._value_range(self._unnormalized(indices), 0)
        return bounds is not None and bounds[0] >= 0 and bounds[1] < int(extent)

    def _value_range(self, expr: relax.Expr, depth: int) -> tuple[int, int] | None:
        """[low, high] bounding every value of the integer tensor `expr`: a constant's own
        values, a cast's or an input's type range, what a reshape or slice keeps of its
        operand, and add, subtract, multiply, minimum, maximum and clip of bounded operands;
        None where unknown."""
        ty = expr.ty if isinstance(expr.ty, relax.TensorType) else None
        own = _integer_range(str(ty.dtype.dtype)) if ty is not None else None
        if own is None or depth > _RANGE_DEPTH:
            return own
        if isinstance(expr, tvm.ir.GenericConst):
            values = expr.value.numpy()
            return (int(values.min()), int(values.max())) if values.size else own
        bound = self._binding(expr)
        if not isinstance(bound, relax.Call):
            return own
        name = getattr(bound.op, "name", "")
        if name in ("relax.argmin", "relax.argmax"):
            # A position along the reduced axis (of all elements, without one): knn's
            # gather of the nearest distance needs no check kernel.
            extent = _reduced_extent(bound)
            return (0, min(extent - 1, own[1])) if extent else own
        operands = [a for a in bound.args if isinstance(a.ty, relax.TensorType)]
        ranges = [self._value_range(a, depth + 1) for a in operands]
        if name not in _RANGE_OPS or any(r is None for r in ranges):
            return own
        if name in _RANGE_KEPT:
            return ranges[0]
        if name == "relax.astype":
            (inner,) = ranges
            # A value that does not fit the new type wraps to anywhere in it.
            fits = own[0] <= inner[0] and inner[1] <= own[1]
            return inner if fits else own
        if name == "relax.clip":
            limits = [getattr(a, "value", None) for a in bound.args[1:3]]
            if not all(isinstance(v, tvm.tirx.IntImm) for v in limits):
                return own
            inner = ranges[0]
            computed = (max(inner[0], int(limits[0])), min(inner[1], int(limits[1])))
        elif name in ("relax.minimum", "relax.maximum"):
            pick = min if name == "relax.minimum" else max
            computed = (pick(r[0] for r in ranges), pick(r[1] for r in ranges))
        elif name == "relax.multiply":
            (a0, a1), (b0, b1) = ranges
            products = [a0 * b0, a0 * b1, a1 * b0, a1 * b1]
            computed = (min(products), max(products))
        elif name == "relax.add":
            (a0, a1), (b0, b1) = ranges
            computed = (a0 + b0, a1 + b1)
        else:  # subtract
            (a0, a1), (b0, b1) = ranges
            computed = (a0 - b1, a1 - b0)
        # Arithmetic that could overflow its type wraps: bounded by the type alone then.
        return computed if own[0] <= computed[0] and computed[1] <= own[1] else own

    def _source(self, indices: relax.Expr) -> str | None:
        """The graph input the indices are, through the importer's normalization and casts."""
        expr = indices
        for _ in range(4):
            if isinstance(expr, relax.Var) and expr in self.params:
                return self.params[expr]
            bound = self._binding(expr)
            if not (isinstance(bound, relax.Call) and getattr(bound.op, "name", "") in _CASTS):
                return None
            expr = bound.args[0]
        return None

    def _checker(self, op: str, data, indices, axes: list[int], source) -> tvm.ir.GlobalVar:
        # The data's whole type: a static extent is part of the kernel's signature.
        key = (op, str(indices.ty), tuple(axes), source)
        if key not in self.checkers:
            func = _index_check(op, indices.ty, len(axes), axes, source)
            self.checkers[key] = self.builder_.add_func(func, INDEX_CHECK)
        return self.checkers[key]


# The name of the kernels that check a gather's or scatter's indices (IndexError on the cpu).
INDEX_CHECK = "gdp_check_indices"
_CASTS = ("relax.astype", "relax.wrap_param")
# Ops whose values are some of their first operand's (moved, repeated or dropped).
_RANGE_KEPT = (
    "relax.reshape",
    "relax.expand_dims",
    "relax.squeeze",
    "relax.permute_dims",
    "relax.broadcast_to",
    "relax.strided_slice",
)
# The ops _value_range bounds through, and how deep it looks.
_RANGE_OPS = (
    *_RANGE_KEPT,
    "relax.astype",
    "relax.add",
    "relax.subtract",
    "relax.multiply",
    "relax.minimum",
    "relax.maximum",
    "relax.clip",
)
_RANGE_DEPTH = 12


def _reduced_extent(call: relax.Call) -> int | None:
    """The static number of positions an argmin or argmax picks from: its axis's extent, or
    every element's where it has no axis; None where not static."""
    shape = call.args[0].ty.shape if isinstance(call.args[0].ty, relax.TensorType) else None
    if not isinstance(shape, relax.ShapeExpr):
        return None
    extents = list(shape.values)
    if call.attrs.axis is not None:
        extents = [extents[int(call.attrs.axis) % len(extents)]] if extents else []
    if not all(isinstance(e, tvm.tirx.IntImm) for e in extents):
        return None
    return int(np.prod([int(e) for e in extents], dtype=np.int64))


def _integer_range(dtype: str) -> tuple[int, int] | None:
    """The values an integer (or bool) dtype holds; None for any other."""
    if dtype == "bool":
        return (0, 1)
    if not dtype.startswith(("int", "uint")):
        return None
    info = np.iinfo(np.dtype(dtype))
    return (int(info.min), int(info.max))


def _indexed_axes(call: relax.Call, name: str) -> list[int] | None:
    """The data axis each index addresses: one for take, gather_elements and scatter_elements;
    for gather_nd and scatter_nd one per slot of the indices' last axis. None where unknown."""
    data, indices = call.args[0], call.args[1]
    if not isinstance(data.ty, relax.TensorType) or not isinstance(indices.ty, relax.TensorType):
        return None
    if data.ty.ndim < 0 or indices.ty.ndim < 0:
        return None
    if name in ("relax.take", "relax.gather_elements", "relax.scatter_elements"):
        axis = call.attrs.axis
        if axis is None:  # take from the flattened data: not what the importer writes
            return None
        return [int(axis) % data.ty.ndim]
    shape = indices.ty.shape
    if not isinstance(shape, relax.ShapeExpr) or not isinstance(shape.values[-1], tvm.tirx.IntImm):
        return None
    start = int(call.attrs.batch_dims) if name == "relax.gather_nd" else 0
    return [start + j for j in range(int(shape.values[-1]))]


def _index_check(op: str, indices_ty, count: int, axes: list[int], source) -> tvm.tirx.PrimFunc:
    """The PrimFunc (indices, n_0 .. n_count-1, checked): an IndexError where an index lies
    outside [-n, n) of the data axis it addresses (n its extent, the scalars given in the order
    of `axes`), else each index as its non-negative equal. Serial loops under the root block
    and no block of their own: no schedule touches it (an assertion in a parallel or vector
    loop would not stop the kernel cleanly)."""
    from tvm import s_tir, tirx

    def extents(ty, prefix):
        return [
            d if isinstance(d, tirx.IntImm) else tirx.Var(f"{prefix}{k}", "int64")
            for k, d in enumerate(ty.shape.values)
        ]

    dtype = str(indices_ty.dtype.dtype)
    shape = extents(indices_ty, "i")
    data_extents = [tirx.Var(f"n{j}", "int64") for j in range(count)]
    index = tirx.decl_buffer(shape, dtype, "indices")
    checked = tirx.decl_buffer(shape, dtype, "checked")
    loops = [tirx.Var(f"k{k}", "int64") for k in range(len(shape))]
    value = tirx.BufferLoad(index, loops)
    n = tirx.Cast(dtype, data_extents[-1])
    for j in reversed(range(count - 1)):  # gather_nd: the slot's axis
        n = tirx.Select(loops[-1] == j, tirx.Cast(dtype, data_extents[j]), n)
    unsigned = dtype.startswith("uint")
    inside = value < n if unsigned else tirx.all(-n <= value, value < n)
    named = f" (input {source!r})" if source else ""
    message = (
        f"an index of {op}{named} lies outside the data's axis "
        f"{', '.join(str(a) for a in axes)} (ONNX takes -n..n-1 on an axis of extent n)"
    )
    body = tirx.SeqStmt(
        [
            # The Python constructor's argument order differs from the FFI's in TVM 0.27.
            tirx._ffi_api.AssertStmt(
                inside, tvm.ir.StringImm("IndexError"), [tvm.ir.StringImm(message)], None
            ),
            tirx.BufferStore(
                checked,
                value if unsigned else tirx.Select(value < tirx.const(0, dtype), value + n, value),
                loops,
            ),
        ]
    )
    for var, extent in reversed(list(zip(loops, shape, strict=True))):
        body = tirx.For(
            var, tirx.const(0, "int64"), tirx.Cast("int64", extent), tirx.ForKind.SERIAL, body
        )
    root = s_tir.SBlockRealize([], True, s_tir.SBlock([], [], [], "root", body))
    func = tirx.PrimFunc([index, *data_extents, checked], root)
    return func.with_attrs({"tirx.noalias": True, "op_pattern": _OPAQUE})


# In the order the cpu backend has always applied them: min/max first, then the casts; the
# slices of run-time extents last (shape-generic models only), then the reflected pads' extents;
# the indices' checks after all.
IMPORT_PASSES = [
    FirstIndexOfTies(),
    PairwiseMinMax(),
    ImplicitBroadcasts(),
    PlainFloatToInt(),
    InboundSlices(),
    ReflectedPads(),
    CheckedIndices(),
]
