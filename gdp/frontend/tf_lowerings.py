"""gdp's own ONNX lowerings of TensorFlow ops that tf2onnx converts wrongly or refuses.

Each lowering is a tf2onnx custom op handler (`custom_op_handlers=` of
`tf2onnx.convert.from_function`): it receives tf2onnx's graph and the TF node and writes standard
ONNX nodes in its place. They follow TF's CPU kernels formula for formula:

- AdjustSaturation, AdjustHue (tensorflow/core/kernels/image/adjust_saturation_op.cc,
  adjust_hue_op.cc) and RGBToHSV, HSVToRGB (colorspace_op.h): elementwise ONNX math, each case
  of the kernels' branches a `Where`. tf2onnx's AdjustSaturation was off by up to 0.61 on a 0-1
  image; it has no RGBToHSV or HSVToRGB.
- ExtractImagePatches: padding and two constant-index Gathers (tf2onnx wrote an identity-kernel
  Conv, undefined for uint8 in ONNX and K*K multiplies per value).
- ResizeBilinear of a non-float image: a Cast to float32 first, then tf2onnx's own Resize
  (tf2onnx resized uint8 in uint8 and declared a float result: an ill-typed graph).
- ResizeArea, ResizeBicubic and ScaleAndTranslate (lanczos3/5, gaussian, mitchellcubic, and every
  antialiased resize): each is a separable linear map. At conversion time the weights of every
  output row and column are asked of TensorFlow itself (the very same op and attributes applied
  to an identity basis), and the resize is written as, per axis, `Gather` of the K input rows an
  output row reads, times their weights, summed over K. tf2onnx's ResizeArea was off by up to
  184/255 and its bicubic by 3e-4 of the range; it has no ScaleAndTranslate. These need static
  input and output sizes. Where TF's shape inference lost a size that is static (a tf.cond
  with a constant predicate), the handler defers the node (domain DEFERRED_DOMAIN) and
  `resolve_deferred` lowers it once the graph is specialised to the signature's shapes; a
  size that stays dynamic is refused with UnsupportedOpError, never approximated.

- CropAndResize (crop_and_resize_op.cc): per-box source positions in float32, then Gathers of
  the image flattened to pixels; tf2onnx wrote a Loop over the boxes, which TVM's importer has
  no converter for. Box indices must be constants within the batch (TF raises on others).

- Dilation2D (dilation_ops.cc; tf.nn.erosion2d too): the taps' strided Slices plus the filter,
  masked outside the image, and their Max; tf2onnx has no conversion for it.

- HistogramFixedWidth: TF's bin formula (in double) and a ScatterElements add; tf2onnx has no
  conversion for it.

- OneHot: an Equal against the classes and a Where (TVM's importer failed on tf2onnx's ONNX
  OneHot, or made it float64).

- Log1p, Expm1, Erfc (tf.nn.gelu's and Keras' exact gelu), Xlogy, Xdivy and MulNoNan: ONNX has
  none of them and tf2onnx no conversion. Written so that they keep the digits the plain
  formulas lose (log(1 + x) of a small x, 1 - erf(x) in the tail): within a few units in the
  last place of the true values.

- Invert (tf.bitwise.invert): the type's all-ones minus the value (ONNX's BitwiseNot is opset
  18; gdp converts at 17).

- Bucketize (keras.layers.Discretization, keras.ops.digitize): comparisons with the boundaries
  and their count.

- Select and SelectV2 (tf.where of three arguments): ONNX's Where. tf2onnx wrote a float one as
  cond * x + (1 - cond) * y, NaN wherever the branch not taken was infinite or NaN.

A lowering that cannot take a node raises UnsupportedOpError; tf2onnx catches handler errors, so
`Lowerings` records them for the front end to raise once conversion ends.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper
import onnx.shape_inference
from onnx import TensorProto

from gdp.errors import GdpError, UnsupportedOpError

# Input rows per TensorFlow call when the resize weights are asked of TF (bounds the basis
# tensor to rows x 1024 floats).
_BASIS_CHUNK = 1024
# The separable weights must reproduce TF's op on a random image to this (max abs, values in
# [0, 1)); float32 sums in a different order differ by a few ulps.
_SELF_CHECK_TOL = 2e-5
# How much faster a resize's pass along the rows (whole rows weighed and summed, vectorised)
# runs per multiply-add than one along the columns (single pixels gathered): orders the passes.
_ROW_PASS_SPEEDUP = 8


@dataclass
class Lowerings:
    """The handlers for one conversion, and the errors they raised (tf2onnx catches them)."""

    errors: list[GdpError] = field(default_factory=list)

    def custom_op_handlers(self) -> dict[str, tuple[Callable, list]]:
        """tf2onnx's `custom_op_handlers=` form: TF op type -> (handler(ctx, node, name, args),
        [])."""
        return {op: (self._wrap(op, fn), []) for op, fn in LOWERINGS.items()}

    def _wrap(self, op: str, fn: Callable) -> Callable:
        def handler(ctx, node, name, args):
            try:
                fn(_Emitter(ctx, node))
            except GdpError as err:
                self.errors.append(err)
                raise
            except Exception as err:
                wrapped = UnsupportedOpError(op, node.name, f"gdp's lowering failed: {err}")
                self.errors.append(wrapped)
                raise wrapped from err

        return handler


class _Emitter:
    """Writes ONNX nodes into tf2onnx's graph in place of one TF node."""

    def __init__(self, ctx: Any, node: Any) -> None:
        from tf2onnx import utils

        self.ctx, self.node, self._utils = ctx, node, utils
        self.op_type, self.name = node.type, node.name
        self.inputs = list(node.input)

    # -- facts about the node
    def shape(self, index: int = 0) -> list[int] | None:
        shape = self.ctx.get_shape(self.inputs[index])
        return None if shape is None else [int(d) for d in shape]

    def dtype(self, index: int = 0) -> int:
        return self.ctx.get_dtype(self.inputs[index])

    def const_input(self, index: int) -> np.ndarray | None:
        if index >= len(self.inputs):
            return None
        producer = self.node.inputs[index]
        if producer is None or not producer.is_const():
            return None
        return np.asarray(producer.get_tensor_value(as_list=False))

    def attr(self, name: str, default: Any = None) -> Any:
        value = self.node.get_attr_value(name, default)
        return value.decode() if isinstance(value, bytes) else value

    def refuse(self, detail: str) -> UnsupportedOpError:
        return UnsupportedOpError(self.op_type, self.name, detail)

    # A static fact TF's shape inference did not know here may be known once the ONNX graph is
    # specialised to the signature's shapes (Keras' Resizing(pad_to_aspect_ratio=True) pads
    # inside a tf.cond whose predicate is a constant): the node is left for resolve_deferred.
    can_defer = True

    def defer(self) -> None:
        self.node.domain = DEFERRED_DOMAIN

    # -- writing nodes
    def op(self, op_type: str, *inputs: str, outputs: int = 1, **attrs: Any) -> Any:
        node = self.ctx.make_node(
            op_type, list(inputs), attr=attrs, output_count=outputs, op_name_scope=self.name
        )
        return node.output[0] if outputs == 1 else list(node.output)

    def const(self, value: Any, dtype: Any = np.float32) -> str:
        array = np.asarray(value, dtype=dtype)
        return self.ctx.make_const(self._utils.make_name(f"{self.name}/const"), array).output[0]

    def reduce_sum(self, x: str, axis: int) -> str:
        if self.ctx.opset >= 13:
            return self.op("ReduceSum", x, self.const([axis], np.int64), keepdims=0)
        return self.op("ReduceSum", x, axes=[axis], keepdims=0)

    def finish(self, *results: str) -> None:
        """Replace the TF node by the values `results`, under the node's own output names (its
        first outputs, in order)."""
        node = self.node
        shapes, dtypes, outputs = node.output_shapes, node.output_dtypes, list(node.output)
        self.ctx.remove_node(node.name)
        for i, result in enumerate(results):
            self.ctx.make_node(
                "Identity",
                [result],
                outputs=[outputs[i]],
                name=node.name if i == 0 else f"{node.name}/output_{i}",
                shapes=[shapes[i]],
                dtypes=[dtypes[i]],
            )


class _ProtoEmitter:
    """The same interface over an ONNX graph whose shapes are inferred: lowers a node
    `_Emitter.defer` left, once the graph is specialised to static shapes."""

    can_defer = False

    def __init__(self, model: onnx.ModelProto, node: onnx.NodeProto, facts: _GraphFacts) -> None:
        self.model, self.node, self.facts = model, node, facts
        self.op_type, self.name = node.op_type, node.name or node.output[0]
        self.inputs = list(node.input)
        self.new_nodes: list[onnx.NodeProto] = []
        self._count = 0

    def shape(self, index: int = 0) -> list[int] | None:
        return self.facts.shapes.get(self.inputs[index])

    def dtype(self, index: int = 0) -> int:
        return self.facts.dtypes.get(self.inputs[index], TensorProto.UNDEFINED)

    def const_input(self, index: int) -> np.ndarray | None:
        if index >= len(self.inputs):
            return None
        return self.facts.constants.get(self.inputs[index])

    def attr(self, name: str, default: Any = None) -> Any:
        for a in self.node.attribute:
            if a.name == name:
                value = onnx.helper.get_attribute_value(a)
                return value.decode() if isinstance(value, bytes) else value
        return default

    def refuse(self, detail: str) -> UnsupportedOpError:
        return UnsupportedOpError(self.op_type, self.name, detail)

    def _fresh(self, what: str) -> str:
        self._count += 1
        return f"{self.name}/gdp_{what}_{self._count}"

    def op(self, op_type: str, *inputs: str, outputs: int = 1, **attrs: Any) -> Any:
        names = [self._fresh(op_type) for _ in range(outputs)]
        self.new_nodes.append(
            onnx.helper.make_node(op_type, list(inputs), names, name=names[0], **attrs)
        )
        return names[0] if outputs == 1 else names

    def const(self, value: Any, dtype: Any = np.float32) -> str:
        name = self._fresh("const")
        self.model.graph.initializer.append(
            onnx.numpy_helper.from_array(np.asarray(value, dtype=dtype), name)
        )
        return name

    def reduce_sum(self, x: str, axis: int) -> str:
        return self.op("ReduceSum", x, self.const([axis], np.int64), keepdims=0)

    def finish(self, *results: str) -> None:
        for i, result in enumerate(results):
            name = self.name if i == 0 else f"{self.name}/output_{i}"
            self.new_nodes.append(
                onnx.helper.make_node("Identity", [result], [self.node.output[i]], name=name)
            )


@dataclass
class _GraphFacts:
    """Static shapes, dtypes and constant values of a model's values, from ONNX inference."""

    shapes: dict[str, list[int] | None]
    dtypes: dict[str, int]
    constants: dict[str, np.ndarray]

    @classmethod
    def of(cls, model: onnx.ModelProto) -> _GraphFacts:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
        shapes, dtypes = {}, {}
        for v in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
            t = v.type.tensor_type
            dtypes[v.name] = t.elem_type
            if t.HasField("shape"):
                shapes[v.name] = [
                    d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim
                ]
        constants = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
        for i in model.graph.initializer:
            shapes[i.name], dtypes[i.name] = list(i.dims), i.data_type
        return cls(shapes, dtypes, constants)


DEFERRED_DOMAIN = "gdp.tf_lowering"


def has_deferred(model: onnx.ModelProto) -> bool:
    return any(n.domain == DEFERRED_DOMAIN for n in model.graph.node)


def resolve_deferred(model: onnx.ModelProto) -> onnx.ModelProto:
    """Lower the nodes the tf2onnx handlers deferred, in a graph specialised to static input
    shapes; a node whose facts are still unknown is refused (UnsupportedOpError)."""
    while has_deferred(model):
        facts = _GraphFacts.of(model)
        nodes = list(model.graph.node)
        index, node = next((i, n) for i, n in enumerate(nodes) if n.domain == DEFERRED_DOMAIN)
        emitter = _ProtoEmitter(model, node, facts)
        LOWERINGS[node.op_type](emitter)
        del model.graph.node[:]
        model.graph.node.extend(nodes[:index] + emitter.new_nodes + nodes[index + 1 :])
    for entry in list(model.opset_import):
        if entry.domain == DEFERRED_DOMAIN:
            model.opset_import.remove(entry)
    return model


# ---------------------------------------------------------------------------------------------
# Colour: elementwise lowerings of TF's per-pixel kernels.


class _Pixels:
    """Elementwise arithmetic on one dtype; scalars become constants of that dtype."""

    def __init__(self, e: _Emitter, np_dtype: Any) -> None:
        self.e, self.np_dtype = e, np_dtype
        self._consts: dict[float, str] = {}

    def c(self, value: float) -> str:
        if value not in self._consts:
            self._consts[value] = self.e.const(value, self.np_dtype)
        return self._consts[value]

    def _v(self, x: str | float) -> str:
        return x if isinstance(x, str) else self.c(float(x))

    def add(self, a, b):
        return self.e.op("Add", self._v(a), self._v(b))

    def sub(self, a, b):
        return self.e.op("Sub", self._v(a), self._v(b))

    def mul(self, a, b):
        return self.e.op("Mul", self._v(a), self._v(b))

    def div(self, a, b):
        return self.e.op("Div", self._v(a), self._v(b))

    def max(self, a, b):
        return self.e.op("Max", self._v(a), self._v(b))

    def min(self, a, b):
        return self.e.op("Min", self._v(a), self._v(b))

    def abs(self, a):
        return self.e.op("Abs", a)

    def floor(self, a):
        return self.e.op("Floor", a)

    def eq(self, a, b):
        return self.e.op("Equal", self._v(a), self._v(b))

    def lt(self, a, b):
        return self.e.op("Less", self._v(a), self._v(b))

    def gt(self, a, b):
        return self.e.op("Greater", self._v(a), self._v(b))

    def where(self, cond, a, b):
        return self.e.op("Where", cond, self._v(a), self._v(b))

    def any_of(self, x: str, values: tuple[float, ...]) -> str:
        """x == values[0] or x == values[1] ..."""
        mask = self.eq(x, values[0])
        for value in values[1:]:
            mask = self.e.op("Or", mask, self.eq(x, value))
        return mask

    def pick(self, x: str, cases: list[tuple[tuple[float, ...], str | float]], default) -> str:
        """`cases` as a switch on the whole number x: the value of the first case listing x."""
        out = default
        for values, value in reversed(cases):
            out = self.where(self.any_of(x, values), value, out)
        return self._v(out)


def _colour_channels(e: _Emitter) -> tuple[_Pixels, str, str, str, Callable[[str], str]]:
    """The input's R, G, B planes ([..., 1] each) in the dtype the arithmetic runs in, and the
    function that casts a result back to the input's dtype."""
    shape = e.shape(0)
    if shape is not None and shape and shape[-1] not in (3, -1):
        raise e.refuse(f"the last dimension must be 3 channels, got shape {shape}")
    dtype = e.dtype(0)
    x = e.inputs[0]
    if dtype == TensorProto.DOUBLE:
        np_dtype = np.float64
    elif dtype == TensorProto.FLOAT:
        np_dtype = np.float32
    elif dtype in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
        np_dtype = np.float32  # TF's half kernels compute in float and round the result
        x = e.op("Cast", x, to=TensorProto.FLOAT)
    else:
        raise e.refuse(f"expected a float image, got ONNX dtype {TensorProto.DataType.Name(dtype)}")
    px = _Pixels(e, np_dtype)
    axis = e.const([-1], np.int64)
    planes = [
        e.op("Slice", x, e.const([k], np.int64), e.const([k + 1], np.int64), axis) for k in range(3)
    ]

    def back(value: str) -> str:
        return value if x == e.inputs[0] else e.op("Cast", value, to=dtype)

    return px, *planes, back


def _concat(e: _Emitter, r: str, g: str, b: str) -> str:
    return e.op("Concat", r, g, b, axis=-1)


def _lower_rgb_to_hsv(e: _Emitter) -> None:
    """colorspace_op.h RGBToHSV: V = max, S = range / V (0 where V = 0), H from the channel that
    is the max (R first, then G), 0 where range = 0, wrapped into [0, 1)."""
    px, r, g, b, back = _colour_channels(e)
    v = px.max(px.max(r, g), b)
    rng = px.sub(v, px.min(px.min(r, g), b))
    s = px.where(px.gt(v, 0.0), px.div(rng, v), 0.0)
    norm = px.mul(e.op("Reciprocal", rng), float(np.float32(1) / np.float32(6)))
    h = px.where(
        px.eq(r, v),
        px.mul(norm, px.sub(g, b)),
        px.where(
            px.eq(g, v),
            px.add(px.mul(norm, px.sub(b, r)), float(np.float32(2) / np.float32(6))),
            px.add(px.mul(norm, px.sub(r, g)), float(np.float32(4) / np.float32(6))),
        ),
    )
    h = px.where(px.gt(rng, 0.0), h, 0.0)
    h = px.where(px.lt(h, 0.0), px.add(h, 1.0), h)
    e.finish(back(_concat(e, h, s, v)))


def _lower_hsv_to_rgb(e: _Emitter) -> None:
    """colorspace_op.h HSVToRGB: each channel (1 - S + S * d) * V with d a clipped triangle of
    6H."""
    px, h, s, v, back = _colour_channels(e)
    dh = px.mul(h, 6.0)

    def clip01(x: str) -> str:
        return px.min(px.max(x, 0.0), 1.0)

    dr = clip01(px.sub(px.abs(px.sub(dh, 3.0)), 1.0))
    dg = clip01(px.add(e.op("Neg", px.abs(px.sub(dh, 2.0))), 2.0))
    db = clip01(px.add(e.op("Neg", px.abs(px.sub(dh, 4.0))), 2.0))
    one_s = px.add(e.op("Neg", s), 1.0)
    out = [px.mul(px.add(one_s, px.mul(s, d)), v) for d in (dr, dg, db)]
    e.finish(back(_concat(e, *out)))


def _scalar_input(e: _Emitter, index: int, what: str) -> str:
    """The op's scalar float32 argument (the saturation factor, the hue delta) as a value."""
    shape = e.shape(index)
    if shape not in (None, []):
        raise e.refuse(f"{what} must be a scalar, got shape {shape}")
    name = e.inputs[index]
    if e.dtype(index) != TensorProto.FLOAT:
        name = e.op("Cast", name, to=TensorProto.FLOAT)
    return name


def _float32_image(e: _Emitter) -> tuple[_Pixels, str, str, str, Callable[[str], str]]:
    if e.dtype(0) not in (TensorProto.FLOAT, TensorProto.FLOAT16):
        raise e.refuse(
            f"TF's CPU kernel takes float32, got {TensorProto.DataType.Name(e.dtype(0))}"
        )
    return _colour_channels(e)


def _lower_adjust_saturation(e: _Emitter) -> None:
    """adjust_saturation_op.cc: its own rgb_to_hsv, S scaled and clamped to [0, 1], then its
    hsv_to_rgb (the six-case switch on int(6H), case 6 (H = 1) giving grey)."""
    px, r, g, b, back = _float32_image(e)
    scale = _scalar_input(e, 1, "scale")
    vv = px.max(r, px.max(g, b))
    rng = px.sub(vv, px.min(r, px.min(g, b)))
    s = px.where(px.gt(vv, 0.0), px.div(rng, vv), 0.0)
    norm = px.div(1.0, px.mul(6.0, rng))
    hh = px.where(
        px.eq(r, vv),
        px.mul(norm, px.sub(g, b)),
        px.where(
            px.eq(g, vv),
            px.add(px.mul(norm, px.sub(b, r)), 2.0 / 6.0),
            px.add(px.mul(norm, px.sub(r, g)), 4.0 / 6.0),
        ),
    )
    hh = px.where(px.gt(rng, 0.0), hh, 0.0)  # TF: range <= 0 -> 0
    hh = px.where(px.lt(hh, 0.0), px.add(hh, 1.0), hh)
    s = px.min(1.0, px.max(0.0, px.mul(s, scale)))
    # hsv_to_rgb
    c = px.mul(s, vv)
    m = px.sub(vv, c)
    dh = px.mul(hh, 6.0)
    category = px.floor(dh)  # static_cast<int> of a value >= 0
    fmodu = px.sub(dh, px.mul(px.floor(px.mul(dh, 0.5)), 2.0))  # dh mod 2, exact
    x = px.mul(c, px.sub(1.0, px.abs(px.sub(fmodu, 1.0))))
    rr = px.pick(category, [((0.0, 5.0), c), ((1.0, 4.0), x)], 0.0)
    gg = px.pick(category, [((1.0, 2.0), c), ((0.0, 3.0), x)], 0.0)
    bb = px.pick(category, [((3.0, 4.0), c), ((2.0, 5.0), x)], 0.0)
    e.finish(back(_concat(e, px.add(rr, m), px.add(gg, m), px.add(bb, m))))


def _lower_adjust_hue(e: _Emitter) -> None:
    """adjust_hue_op.cc: the hue as a category 0..5 (from the channels' order) plus a ratio,
    shifted by 6 * delta and wrapped into [0, 6), then back through the category's switch."""
    px, r, g, b, back = _float32_image(e)
    delta = _scalar_input(e, 1, "delta")
    r_lt_g = px.lt(r, g)
    # rgb_to_hv_range: the branches on r < g, then b against r and g.
    b_lt_r, b_gt_g = px.lt(b, r), px.gt(b, g)
    b_lt_g, b_gt_r = px.lt(b, g), px.gt(b, r)
    category = px.where(
        r_lt_g,
        px.where(b_lt_r, 1.0, px.where(b_gt_g, 3.0, 2.0)),
        px.where(b_lt_g, 0.0, px.where(b_gt_r, 4.0, 5.0)),
    )
    v_mid = px.where(
        r_lt_g,
        px.where(b_lt_r, r, px.where(b_gt_g, g, b)),
        px.where(b_lt_g, g, px.where(b_gt_r, r, b)),
    )
    v_max = px.max(px.max(r, g), b)  # the branches pick the max and min exactly
    v_min = px.min(px.min(r, g), b)
    span = px.sub(v_max, v_min)
    ratio = px.div(px.sub(v_mid, v_min), span)
    odd = px.eq(px.sub(category, px.mul(px.floor(px.mul(category, 0.5)), 2.0)), 1.0)
    h = px.add(category, px.where(odd, px.sub(1.0, ratio), ratio))
    h = px.where(px.eq(v_max, v_min), 0.0, h)
    # h += delta * 6, wrapped into [0, 6); a value that rounds up to 6 lands in the default
    # case below, which gives what TF's category 0 gives there.
    h = px.add(h, px.mul(delta, 6.0))
    h = px.sub(h, px.mul(px.floor(px.div(h, 6.0)), 6.0))
    # hv_range_to_rgb
    category = px.floor(h)
    ratio = px.sub(h, category)
    odd = px.eq(px.sub(category, px.mul(px.floor(px.mul(category, 0.5)), 2.0)), 1.0)
    ratio = px.where(odd, px.sub(1.0, ratio), ratio)
    mid = px.add(v_min, px.mul(ratio, span))
    rr = px.pick(category, [((1.0, 4.0), mid), ((2.0, 3.0), v_min)], v_max)
    gg = px.pick(category, [((0.0, 3.0), mid), ((1.0, 2.0), v_max)], v_min)
    bb = px.pick(category, [((0.0, 1.0), v_min), ((3.0, 4.0), v_max)], mid)
    e.finish(back(_concat(e, rr, gg, bb)))


# ---------------------------------------------------------------------------------------------
# Resizes: separable linear maps, the weights asked of TensorFlow.


@dataclass(frozen=True)
class _Taps:
    """One axis of a separable resize: output i = sum_k weight[i, k] * input[index[i, k]]."""

    index: np.ndarray  # [out, K] int64
    weight: np.ndarray  # [out, K] float32

    @classmethod
    def from_matrix(cls, matrix: np.ndarray) -> _Taps:
        """The nonzero entries of each row of the dense [out, in] map, padded to the widest
        row with weight 0."""
        nonzero = [np.flatnonzero(row) for row in matrix]
        k = max([1, *(len(cols) for cols in nonzero)])
        index = np.zeros((len(matrix), k), np.int64)
        weight = np.zeros((len(matrix), k), np.float32)
        for i, cols in enumerate(nonzero):
            index[i, : len(cols)] = cols
            index[i, len(cols) :] = cols[-1] if len(cols) else 0
            weight[i, : len(cols)] = matrix[i, cols]
        return cls(index, weight)

    def is_identity(self, n_in: int) -> bool:
        return (
            self.index.shape == (n_in, 1)
            and np.array_equal(self.index[:, 0], np.arange(n_in))
            and np.all(self.weight == 1)
        )

    def apply(self, x: np.ndarray, axis: int) -> np.ndarray:
        """This map along `axis` of `x`, in float64."""
        gathered = np.take(x.astype(np.float64), self.index, axis=axis)  # [.., out, K, ..]
        shape = [1] * gathered.ndim
        shape[axis : axis + 2] = self.weight.shape
        return (gathered * self.weight.reshape(shape)).sum(axis=axis + 1)


def _run_tf_resize(op_type: str, attrs: dict, images: np.ndarray, size, scale, translation):
    """TF's own op on `images`, run in a graph of its own (the conversion runs inside
    tf2onnx's default graph, where an eager call would only add nodes)."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default(), tf.device("/cpu:0"):
        op = getattr(tf.raw_ops, op_type)
        size_t = tf.constant(np.asarray(size, np.int32))
        if op_type == "ScaleAndTranslate":
            out = op(
                images=images,
                size=size_t,
                scale=tf.constant(np.asarray(scale, np.float32)),
                translation=tf.constant(np.asarray(translation, np.float32)),
                **attrs,
            )
        else:
            out = op(images=images, size=size_t, **attrs)
    with tf.compat.v1.Session(graph=graph) as session:
        return session.run(out)


@functools.lru_cache(maxsize=64)
def _axis_taps(
    op_type: str,
    attrs: tuple[tuple[str, Any], ...],
    axis: int,
    n_in: int,
    n_out: int,
    scale: float,
    translation: float,
) -> _Taps:
    """The taps of the map TF's op applies along `axis` (1 = rows, 2 = columns): the op applied
    to one-hot images, the other axis 1 pixel wide and unscaled, gives the dense [n_out, n_in]
    map column by column."""
    attrs = dict(attrs)
    columns = []
    for start in range(0, n_in, _BASIS_CHUNK):
        count = min(_BASIS_CHUNK, n_in - start)
        basis = np.zeros((1, n_in, 1, count), np.float32)
        basis[0, start + np.arange(count), 0, np.arange(count)] = 1.0
        size, scales, shifts = [n_out, 1], [scale, 1.0], [translation, 0.0]
        if axis == 2:
            basis = basis.transpose(0, 2, 1, 3)
            size, scales, shifts = size[::-1], scales[::-1], shifts[::-1]
        out = _run_tf_resize(op_type, attrs, basis, size, scales, shifts)
        columns.append(out[0, :, 0, :] if axis == 1 else out[0, 0, :, :])
    return _Taps.from_matrix(np.concatenate(columns, axis=1))


_RESIZE_ATTRS = {
    "ResizeArea": ("align_corners",),
    "ResizeBicubic": ("align_corners", "half_pixel_centers"),
    "ScaleAndTranslate": ("kernel_type", "antialias"),
}


def _lower_separable_resize(e: _Emitter) -> None:
    """ResizeArea, ResizeBicubic, ScaleAndTranslate on a static NHWC image to a static size."""
    shape, size = e.shape(0), e.const_input(1)
    scale_c, shift_c = e.const_input(2), e.const_input(3)
    static = (
        shape is not None
        and len(shape) == 4
        and min(shape[1:3]) >= 1
        and size is not None
        and (e.op_type != "ScaleAndTranslate" or (scale_c is not None and shift_c is not None))
    )
    if not static:
        if e.can_defer:
            e.defer()
            return
        shown = None if shape is None else [None if d < 0 else d for d in shape]
        raise e.refuse(
            "gdp lowers this resize where the input height and width, the output size (and "
            "ScaleAndTranslate's scale and translation) are known when the function is "
            f"converted; here the input's shape is {shown} and the output size "
            f"{size.tolist() if size is not None else 'is computed at run time'}: give the "
            "function a static input shape (tf.TensorSpec([H, W, C]) or [N, H, W, C])"
        )
    _, height, width, _ = shape
    out_h, out_w = (int(v) for v in size.reshape(-1))
    scale, translation = [out_h / height, out_w / width], [0.0, 0.0]
    if e.op_type == "ScaleAndTranslate":
        scale = [float(v) for v in scale_c.reshape(-1)]
        translation = [float(v) for v in shift_c.reshape(-1)]
    attrs = {a: e.attr(a) for a in _RESIZE_ATTRS[e.op_type] if e.attr(a) is not None}
    for a in ("align_corners", "half_pixel_centers", "antialias"):
        if a in attrs:
            attrs[a] = bool(attrs[a])  # tf2onnx keeps TF's bools as ints
    taps = [
        _axis_taps(
            e.op_type,
            tuple(sorted(attrs.items())),
            axis,
            n_in,
            n_out,
            scale[axis - 1],
            translation[axis - 1],
        )
        for axis, n_in, n_out in ((1, height, out_h), (2, width, out_w))
    ]
    _self_check(e, attrs, (height, width), (out_h, out_w), scale, translation, taps)

    x = e.inputs[0]
    if e.dtype(0) != TensorProto.FLOAT:  # TF's resizes compute in float and return float32
        x = e.op("Cast", x, to=TensorProto.FLOAT)
    # The order that does fewer multiply-adds goes first, counting a rows pass's at 1/8: it
    # reads whole image rows, which the cpu's schedule runs as vectors, where a columns pass
    # gathers single pixels (measured on lanczos3 antialias 1080p -> 224: rows first 2x faster
    # though the columns-first order does fewer multiply-adds).
    cost_rows_first = (
        out_h * taps[0].index.shape[1] * width / _ROW_PASS_SPEEDUP
        + out_h * out_w * taps[1].index.shape[1]
    )
    cost_cols_first = (
        height * out_w * taps[1].index.shape[1]
        + out_h * out_w * taps[0].index.shape[1] / _ROW_PASS_SPEEDUP
    )
    order = (1, 2) if cost_rows_first <= cost_cols_first else (2, 1)
    for axis in order:
        x = _apply_taps(e, x, axis, taps[axis - 1], (height, width)[axis - 1])
    e.finish(x)


def _apply_taps(e: _Emitter, x: str, axis: int, taps: _Taps, n_in: int) -> str:
    """Gather the K input rows (axis 1) or columns (axis 2) of every output one, weigh, sum."""
    if taps.is_identity(n_in):
        return x
    n_out, k = taps.index.shape
    if k == 1 and np.all(taps.weight == 1):
        return e.op("Gather", x, e.const(taps.index[:, 0], np.int64), axis=axis)
    # One Gather of the [out, K] taps, weighed and summed over K. (K Gathers of [out] summed
    # is no faster on TVM, which runs every Gather as a kernel of its own, and compiles slower.)
    gathered = e.op("Gather", x, e.const(taps.index, np.int64), axis=axis)  # [.., out, K, ..]
    weight_shape = (n_out, k, 1, 1) if axis == 1 else (n_out, k, 1)
    weighted = e.op("Mul", gathered, e.const(taps.weight.reshape(weight_shape), np.float32))
    return e.reduce_sum(weighted, axis + 1)


def _self_check(e: _Emitter, attrs: dict, size_in, size_out, scale, translation, taps) -> None:
    """The separable weights against TF's op on a random image: a kernel that were not
    separable, or an attribute the basis run did not reproduce, is an error, not an answer."""
    rng = np.random.default_rng(0)
    image = rng.random((1, *size_in, 1), dtype=np.float32)
    want = _run_tf_resize(e.op_type, attrs, image, size_out, scale, translation)[0, :, :, 0]
    got = taps[1].apply(taps[0].apply(image[0, :, :, 0], 0), 1)
    err = float(np.max(np.abs(got - want))) if want.size else 0.0
    if not err <= _SELF_CHECK_TOL:
        raise e.refuse(
            f"gdp's separable form of this resize differs from TF's by {err:.3g} (over "
            f"{_SELF_CHECK_TOL}) on a random {size_in[0]}x{size_in[1]} image; attributes {attrs}"
        )


def _lower_resize_nearest(e: _Emitter) -> None:
    """ResizeNearestNeighbor as TF's CPU kernel picks each output's source pixel
    (resize_nearest_neighbor_op.cc), in float32 like it, for static and free sizes alike:
    scale = in / out ((in - 1) / (out - 1) with align_corners and out > 1); source =
    floor((i + 0.5) * scale) with half_pixel_centers, roundf(i * scale) with align_corners, else
    floor(i * scale); clamped to the image; one Gather per axis. tf2onnx writes an ONNX Resize,
    which computes (i + 0.5) / (out / in) and picked other pixels on a 1080p downscale."""
    align = bool(e.attr("align_corners", False))
    half = bool(e.attr("half_pixel_centers", False))
    x = e.inputs[0]
    shape = e.op("Shape", x)
    size = e.op("Cast", e.inputs[1], to=TensorProto.INT64)
    for axis in (1, 2):
        n_in = e.op("Gather", shape, e.const(axis, np.int64), axis=0)
        n_out = e.op("Gather", size, e.const(axis - 1, np.int64), axis=0)
        f_in = e.op("Cast", n_in, to=TensorProto.FLOAT)
        f_out = e.op("Cast", n_out, to=TensorProto.FLOAT)
        scale = e.op("Div", f_in, f_out)
        if align:
            one = e.const(1.0)
            corners = e.op("Div", e.op("Sub", f_in, one), e.op("Sub", f_out, one))
            scale = e.op("Where", e.op("Greater", f_out, one), corners, scale)
        at = e.op(
            "Cast",
            e.op("Range", e.const(0, np.int64), n_out, e.const(1, np.int64)),
            to=TensorProto.FLOAT,
        )
        if half:
            at = e.op("Add", at, e.const(0.5))
        position = e.op("Mul", at, scale)
        source = e.op("Floor", position)
        if align:  # roundf: half away from zero (positions are not negative)
            frac = e.op("Sub", position, source)
            up = e.op("Cast", e.op("GreaterOrEqual", frac, e.const(0.5)), to=TensorProto.FLOAT)
            source = e.op("Add", source, up)
        index = e.op("Cast", source, to=TensorProto.INT64)
        last = e.op("Sub", n_in, e.const(1, np.int64))
        index = e.op("Max", e.op("Min", index, last), e.const(0, np.int64))
        x = e.op("Gather", x, index, axis=axis)
    e.finish(x)


def _lower_resize_bilinear(e: _Emitter) -> None:
    """ResizeBilinear as tf2onnx writes it, on a float32 image: TF's op returns float32 for
    every input type and interpolates in float, but tf2onnx resizes a uint8 (or other) image in
    its own type and declares a float result, an ill-typed graph onnxruntime and TVM reject.
    A Cast to float32 first makes it TF's computation.

    On a static image tf2onnx gives the Resize float32 scales (21 / 30 = 0.69999999), from which
    its own shape inference takes floor(30 * 0.69999999) = 20 columns, and its optimizer then
    bakes that wrong extent into the constant shapes of what follows (a Transpose it turns into
    a Reshape: `tf.image.flip_up_down` after a resize to 5x21 was an invalid graph). The Resize
    is given its sizes instead, and its output their shape."""
    from tf2onnx.onnx_opset.nn import Resize

    if e.dtype(0) != TensorProto.FLOAT:
        cast = e.ctx.insert_new_node_on_input(e.node, "Cast", e.inputs[0], to=TensorProto.FLOAT)
        e.ctx.set_dtype(cast.output[0], TensorProto.FLOAT)
        shape = e.ctx.get_shape(e.inputs[0])
        if shape is not None:
            e.ctx.set_shape(cast.output[0], shape)
    shape, size = e.shape(0), e.const_input(1)
    Resize.version_11(e.ctx, e.node)
    # tf2onnx wrote scales where the image's height and width and the size are static
    resize = e.ctx.get_node_by_name(e.name).inputs[0]
    if len(resize.input) == 3 and size is not None and shape and -1 not in shape:
        n, _, _, c = shape
        height, width = (int(v) for v in size)
        sizes = e.const([n, c, height, width], np.int64)
        e.ctx.replace_inputs(resize, [*resize.input[:2], "", sizes])
        e.ctx.set_shape(resize.output[0], [n, c, height, width])


def _lower_depthwise_conv(e: _Emitter) -> None:
    """DepthwiseConv2dNative as tf2onnx writes it, once its filter's input-channel extent is
    known: TF requires it to equal the image's channel count, but where the filter is built at
    run time (tf.image.ssim tiles its Gaussian window by the image's channels, read from
    tf.shape) TF's shape inference leaves it unknown, and tf2onnx refused the op ("input
    channel must be positive"). It is taken from the image's shape."""
    from tf2onnx.onnx_opset.nn import DepthwiseConv2d

    image, kernel = e.shape(0), e.shape(1)
    if kernel is not None and len(kernel) == 4 and kernel[2] < 1:
        channel_axis = 1 if e.attr("data_format", "NHWC") == "NCHW" else 3
        channels = image[channel_axis] if image is not None and len(image) == 4 else -1
        if channels < 1:
            raise e.refuse(
                "gdp converts a depthwise convolution whose image's channel count is known when"
                f" the function is converted; here the image's shape is {image} and the"
                f" filter's {kernel}: give the function a static channel count"
            )
        e.ctx.set_shape(e.inputs[1], [*kernel[:2], channels, kernel[3]])
    DepthwiseConv2d.version_1(e.ctx, e.node)


def _lower_shape_n(e: _Emitter) -> None:
    """ShapeN (TF's grappler merges the tf.shape calls of several tensors into one: tf.image.ssim
    has two) as one Shape per input, in its out_type; tf2onnx has no conversion for it."""
    out_type = e.ctx.get_dtype(e.node.output[0])
    e.finish(*(e.op("Cast", e.op("Shape", x), to=out_type) for x in e.inputs))


# ---------------------------------------------------------------------------------------------
# Division: TF's integer and floor semantics (tensorflow/core/kernels/cwise_ops.h).

_SIGNED = {TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64}
_UNSIGNED = {TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64}


def _lower_division(e: _Emitter) -> None:
    """Div, TruncateDiv, FloorDiv, FloorMod and TruncateMod as TF's CPU kernels compute them.

    tf2onnx wrote an integer FloorDiv as ONNX's Div, which truncates (TF floors: -3 // 2 is
    -2, it gave -1, so Keras' CenterCrop of an image smaller than the crop kept 1 row where TF
    keeps 2); FloorMod as a - Div(a, b) * b, truncated for integers (-7 % 3 gave -1, TF 2) and
    rounded for floats (-0.3 % 0.1 gave -7e-9, TF 0.1; 1e8 % 3 gave -2, TF 1); and a float
    TruncateDiv as a plain Div (TF truncates it too). Here a float FloorMod is fmod with TF's
    sign fix; an integer FloorDiv a truncated Div, less one where the signs differ and it was
    inexact (never overflowing); an integer FloorMod or TruncateMod a - Div(a, b) * b, the
    first with the sign fix.

    An integer divisor must be a constant without zeros: TF raises on a zero at run time,
    which compiled code cannot (an integer division by zero traps and kills the process), so
    a divisor known only at run time is refused. A constant -1 is divided as a negation (the
    CPU traps on INT_MIN / -1; TF wraps to INT_MIN)."""
    dtype = e.dtype(0)
    op = e.op_type
    a, b = e.inputs[0], e.inputs[1]
    if dtype not in _SIGNED and dtype not in _UNSIGNED:
        if op in ("FloorMod", "TruncateMod"):
            r = e.op("Mod", a, b, fmod=1)
            if op == "FloorMod":  # fmod's sign is a's; TF's floor mod takes b's
                zero = e.const(0, onnx.helper.tensor_dtype_to_np_dtype(dtype))
                r = e.op("Where", _signs_differ(e, r, b, zero), e.op("Add", r, b), r)
            e.finish(r)
        elif op == "FloorDiv":
            e.finish(e.op("Floor", e.op("Div", a, b)))
        elif op == "TruncateDiv":  # toward zero (tf2onnx wrote a plain Div: -7.5 / 2 = -3.75)
            q = e.op("Div", a, b)
            zero = e.const(0, onnx.helper.tensor_dtype_to_np_dtype(dtype))
            e.finish(e.op("Where", e.op("Less", q, zero), e.op("Ceil", q), e.op("Floor", q)))
        else:
            e.finish(e.op("Div", a, b))
        return
    divisor = e.const_input(1)
    if divisor is None:
        raise e.refuse(
            "gdp divides integers by a constant only: TF raises 'Integer division by zero' on"
            " a zero divisor at run time, which compiled code cannot; here the divisor is"
            " computed at run time (divide by a constant, or in float: tf.cast)"
        )
    if np.any(divisor == 0):
        raise e.refuse("the divisor is zero: TF raises 'Integer division by zero'")
    np_dtype = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    minus_one = dtype in _SIGNED and bool(np.any(divisor == -1))
    safe = e.const(np.where(divisor == -1, 1, divisor), np_dtype) if minus_one else b
    q = e.op("Div", a, safe)  # ONNX's integer Div truncates, as TF's Div and TruncateDiv
    if minus_one:
        q = e.op("Where", e.const(divisor == -1, np.bool_), e.op("Neg", a), q)
    if op in ("Div", "TruncateDiv"):
        e.finish(q)
        return
    if dtype in _UNSIGNED:  # nothing negative: floor is truncation
        e.finish(q if op == "FloorDiv" else e.op("Sub", a, e.op("Mul", q, b)))
        return
    zero = e.const(0, np_dtype)
    r = e.op("Sub", a, e.op("Mul", q, b))  # a's sign, |r| < |b|
    if op == "TruncateMod":
        e.finish(r)
        return
    # Truncation was not the floor where r is nonzero and its sign is not b's; for a divisor
    # of one sign (the usual constant), one comparison says so.
    if np.all(divisor > 0):
        wrong = e.op("Less", r, zero)
    elif np.all(divisor < 0):
        wrong = e.op("Greater", r, zero)
    else:
        wrong = _signs_differ(e, r, b, zero)
    if op == "FloorDiv":
        e.finish(e.op("Sub", q, e.op("Cast", wrong, to=dtype)))
    else:
        e.finish(e.op("Where", wrong, e.op("Add", r, b), r))


def _signs_differ(e: _Emitter, r: str, b: str, zero: str) -> str:
    """Where a truncated remainder `r` is not the floored one: nonzero, its sign not b's."""
    nonzero = e.op("Not", e.op("Equal", r, zero))
    return e.op("And", nonzero, e.op("Xor", e.op("Less", r, zero), e.op("Less", b, zero)))


def _lower_mean(e: _Emitter) -> None:
    """Mean (tf.reduce_mean) as tf2onnx writes it, but for integers: TF sums them in 64 bits
    (a 64-bit input wraps) and truncates the quotient toward zero, so the mean of uint8
    [200, 255, 250, 1] is 176. tf2onnx wrote ReduceMean in the input's type: the cpu summed in
    uint8 and gave 48 (onnxruntime refuses the graph). An empty reduction's integer mean is 0,
    as TF's; no axes (axis=[]) reduce nothing, as TF's."""
    from tf2onnx.onnx_opset.reduction import ReduceOpBase

    dtype = e.dtype(0)
    if dtype not in _SIGNED and dtype not in _UNSIGNED:
        e.node.type = "ReduceMean"
        ReduceOpBase.version_13(e.ctx, e.node)
        return
    axes = e.const_input(1)
    if axes is None:
        raise e.refuse("gdp lowers an integer mean over constant axes only")
    shape = e.shape(0)
    rank = len(shape) if shape is not None else None
    axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    if rank is None and any(a < 0 for a in axes):
        raise e.refuse("an integer mean over negative axes of an input of unknown rank")
    axes = sorted({a + rank if a < 0 else a for a in axes}) if rank is not None else axes
    # int64 holds any sum of up to 2**31 values of 32 bits (onnxruntime has no uint64 sum)
    wide = TensorProto.UINT64 if dtype == TensorProto.UINT64 else TensorProto.INT64
    wide_np = onnx.helper.tensor_dtype_to_np_dtype(wide)
    keep = int(bool(e.attr("keep_dims", False)))
    x = e.op("Cast", e.inputs[0], to=wide)
    total = e.op("ReduceSum", x, e.const(axes, np.int64), keepdims=keep, noop_with_empty_axes=1)
    extents = [shape[a] for a in axes] if shape is not None else [-1]
    if all(n >= 0 for n in extents):
        count = e.const(max(int(np.prod(extents)), 1), wide_np)
    else:  # a free extent: the count at run time (a constant once compiled per shape)
        sizes = e.op("Gather", e.op("Shape", e.inputs[0]), e.const(axes, np.int64))
        count = e.op("Cast", e.op("ReduceProd", sizes, keepdims=0), to=wide)
        count = e.op("Max", count, e.const(1, wide_np))
    e.finish(e.op("Cast", e.op("Div", total, count), to=dtype))


def _static_image(e: _Emitter, what: str) -> list[int] | None:
    """The NHWC image's shape where its height and width are known; None where the node is
    deferred until they are (resolve_deferred), and a refusal where they stay unknown."""
    shape = e.shape(0)
    if shape is not None and len(shape) == 4 and min(shape[1:3]) >= 1:
        return shape
    if e.can_defer:
        e.defer()
        return None
    raise e.refuse(
        f"gdp lowers {what} of an image whose height and width are known when the function is"
        f" converted; here the input's shape is {shape}: give the function a static input shape"
    )


def _patch_axis(size: int, k: int, stride: int, rate: int, same: bool) -> tuple[int, int, int]:
    """One axis of TF's ExtractImagePatches: (output extent, padding before, padding after)."""
    span = (k - 1) * rate + 1
    if not same:
        return max(-(-(size - span + 1) // stride), 0), 0, 0
    out = -(-size // stride)
    total = max((out - 1) * stride + span - size, 0)
    return out, total // 2, total - total // 2


def _lower_extract_patches(e: _Emitter) -> None:
    """ExtractImagePatches as the gathers it is: zero padding (SAME), one Gather of the rows
    every (output row, kernel row) reads, one of the columns, then the (kernel row, kernel
    column, channel) axes moved last and flattened, TF's order. Exact in every dtype; tf2onnx
    wrote an identity-kernel Conv, which ONNX does not define for uint8 and which multiplies
    K*K zeros per value."""
    shape = _static_image(e, "extract_patches")
    if shape is None:
        return
    same = e.attr("padding") == "SAME"
    ksizes, strides, rates = (list(e.attr(a)) for a in ("ksizes", "strides", "rates"))
    x, pads = e.inputs[0], [[0, 0] for _ in range(4)]
    indices = {}
    for axis in (1, 2):
        k, stride, rate = ksizes[axis], strides[axis], rates[axis]
        out, before, after = _patch_axis(shape[axis], k, stride, rate, same)
        if out == 0:
            raise e.refuse(f"the patches of a {shape[1]}x{shape[2]} image are empty")
        pads[axis] = [before, after]
        indices[axis] = np.arange(out)[:, None] * stride + np.arange(k)[None, :] * rate
    if any(p for pair in pads for p in pair):
        starts, ends = (list(p) for p in zip(*pads, strict=True))
        zero = e.const(0, onnx.helper.tensor_dtype_to_np_dtype(e.dtype(0)))
        x = e.op("Pad", x, e.const(starts + ends, np.int64), zero, mode="constant")
    # [N, H, W, C] -> [N, oh, kr, W, C] -> [N, oh, kr, ow, kc, C] -> [N, oh, ow, kr, kc, C]
    x = e.op("Gather", x, e.const(indices[1], np.int64), axis=1)
    x = e.op("Gather", x, e.const(indices[2], np.int64), axis=3)
    x = e.op("Transpose", x, perm=[0, 1, 3, 2, 4, 5])
    oh, ow = len(indices[1]), len(indices[2])
    e.finish(e.op("Reshape", x, e.const([0, oh, ow, -1], np.int64)))


def _crop_positions(e: _Emitter, lo: str, hi: str, n_out: str, n_in: str) -> tuple[str, str]:
    """One axis of TF's CropAndResize (crop_and_resize_op.cc), in float32 like its kernel: the
    source position of every output row of every box ([B, n_out]) and whether it lies in the
    image. With more than one output row, lo * (n_in - 1) + i * ((hi - lo) * (n_in - 1) /
    (n_out - 1)); with one, 0.5 * (lo + hi) * (n_in - 1). lo and hi are [B, 1]."""
    one, zero = e.const(1.0), e.const(0.0)
    last = e.op("Sub", e.op("Cast", n_in, to=TensorProto.FLOAT), one)
    count = e.op("Cast", n_out, to=TensorProto.FLOAT)
    several = e.op("Greater", count, one)
    # One row: TF's scale is 0. The divisor is kept from 0 even there, where Where discards
    # the quotient: TVM folds a constant division by zero into a compile error.
    scale = e.op(
        "Div", e.op("Mul", e.op("Sub", hi, lo), last), e.op("Max", e.op("Sub", count, one), one)
    )
    scale = e.op("Where", several, scale, zero)
    at = e.op("Range", e.const(0, np.int64), n_out, e.const(1, np.int64))
    spread = e.op(
        "Add", e.op("Mul", lo, last), e.op("Mul", e.op("Cast", at, to=TensorProto.FLOAT), scale)
    )
    middle = e.op("Mul", e.op("Mul", e.op("Add", lo, hi), e.const(0.5)), last)
    position = e.op("Where", several, spread, middle)
    outside = e.op("Or", e.op("Less", position, zero), e.op("Greater", position, last))
    return position, e.op("Not", outside)


def _lower_crop_and_resize(e: _Emitter) -> None:
    """CropAndResize as TF's CPU kernel computes it (crop_and_resize_op.cc): each box's output
    pixel reads the image at a float32 source position per axis (_crop_positions); bilinear
    weighs the four pixels around it (top + (bottom - top) * y_lerp of the row lerps, TF's
    order), nearest takes roundf of each position; a position outside the image gives
    extrapolation_value. The pixels are gathered from the image flattened to [N * H * W, C].
    tf2onnx wrote an ONNX Loop over the boxes, which TVM's importer has no converter for.

    The box indices must be a constant within the batch: TF raises on one outside it at run
    time, which compiled code cannot (it would read another image, or outside this one)."""
    shape, box_index = e.shape(0), e.const_input(2)
    if box_index is None:
        raise e.refuse(
            "gdp takes crop_and_resize's box_indices as a constant: TF raises on an index"
            " outside the batch at run time, which compiled code cannot; here they are computed"
            " at run time"
        )
    batch = shape[0] if shape is not None and len(shape) == 4 else -1
    box_index = box_index.astype(np.int64).reshape(-1)
    if (
        np.any(box_index < 0)
        or (batch > 0 and np.any(box_index >= batch))
        or (batch < 1 and np.any(box_index > 0))
    ):
        raise e.refuse(
            f"box_indices {box_index.tolist()} are not all within the image batch of"
            f" {batch if batch > 0 else 'unknown size'}: TF raises on that"
        )
    nearest = e.attr("method", "bilinear") == "nearest"
    fill = e.const(float(e.attr("extrapolation_value", 0.0)))
    image = e.inputs[0]
    if e.dtype(0) != TensorProto.FLOAT:  # TF reads every pixel as float
        image = e.op("Cast", image, to=TensorProto.FLOAT)
    dims = e.op("Shape", image)
    height = e.op("Gather", dims, e.const(1, np.int64), axis=0)
    width = e.op("Gather", dims, e.const(2, np.int64), axis=0)
    pixels = e.op(
        "Reshape",
        image,
        e.op(
            "Concat",
            e.const([-1], np.int64),
            e.op("Slice", dims, e.const([3], np.int64), e.const([4], np.int64)),
            axis=0,
        ),
    )
    size = e.op("Cast", e.inputs[3], to=TensorProto.INT64)
    boxes = e.inputs[1]

    def corner(k: int) -> str:  # boxes[:, k:k+1]
        return e.op(
            "Slice",
            boxes,
            e.const([k], np.int64),
            e.const([k + 1], np.int64),
            e.const([1], np.int64),
        )

    y, y_in = _crop_positions(
        e, corner(0), corner(2), e.op("Gather", size, e.const(0, np.int64), axis=0), height
    )
    x, x_in = _crop_positions(
        e, corner(1), corner(3), e.op("Gather", size, e.const(1, np.int64), axis=0), width
    )
    # [B, n] -> [B, n, 1] (rows) and [B, 1, n] (columns); the image's first row of box b is
    # box_index[b] * H
    first = e.op("Mul", e.const(box_index.reshape(-1, 1, 1), np.int64), height)

    def index(position: str, size: str, axis: int, up: bool) -> str:
        """Clamped integer index (floor, or ceil where up) of a [B, n] position, as [B, n, 1]
        (axis 1) or [B, 1, n] (axis 2). Positions outside the image are clamped here only to
        keep the gathers inside it: their values are replaced by extrapolation_value."""
        i = e.op("Cast", e.op("Ceil" if up else "Floor", position), to=TensorProto.INT64)
        i = e.op(
            "Max", e.op("Min", i, e.op("Sub", size, e.const(1, np.int64))), e.const(0, np.int64)
        )
        return e.op("Unsqueeze", i, e.const([3 - axis], np.int64))

    def gather(row: str, col: str) -> str:  # [B, h, 1] and [B, 1, w] -> [B, h, w, C]
        flat = e.op("Add", e.op("Mul", e.op("Add", first, row), width), col)
        return e.op("Gather", pixels, flat, axis=0)

    def expand(v: str, axis: int) -> str:  # [B, n] -> [B, n, 1, 1] or [B, 1, n, 1]
        return e.op("Unsqueeze", v, e.const([3 - axis, 3] if axis == 1 else [1, 3], np.int64))

    if nearest:  # roundf: half away from zero, on positions inside the image (not negative)

        def rounded(position: str) -> str:
            down = e.op("Floor", position)
            up = e.op("GreaterOrEqual", e.op("Sub", position, down), e.const(0.5))
            return e.op("Add", down, e.op("Cast", up, to=TensorProto.FLOAT))

        out = gather(index(rounded(y), height, 1, False), index(rounded(x), width, 2, False))
    else:
        top, bottom = index(y, height, 1, False), index(y, height, 1, True)
        left, right = index(x, width, 2, False), index(x, width, 2, True)
        y_lerp = expand(e.op("Sub", y, e.op("Floor", y)), 1)
        x_lerp = expand(e.op("Sub", x, e.op("Floor", x)), 2)

        def lerp(a: str, b: str, t: str) -> str:
            return e.op("Add", a, e.op("Mul", e.op("Sub", b, a), t))

        upper = lerp(gather(top, left), gather(top, right), x_lerp)
        lower = lerp(gather(bottom, left), gather(bottom, right), x_lerp)
        out = lerp(upper, lower, y_lerp)
    inside = e.op("And", expand(y_in, 1), expand(x_in, 2))
    e.finish(e.op("Where", inside, out, fill))


def _lower_dilation2d(e: _Emitter) -> None:
    """Dilation2D (tf.nn.dilation2d, and erosion2d, which negates around it) as TF's CPU kernel
    computes it (dilation_ops.cc): out[b, y, x, c] is the largest input[b, y * stride + i *
    rate - top, x * stride + j * rate - left, c] + filter[i, j, c] over the taps (i, j) that
    fall inside the image, in the image's dtype (uint8 sums wrap, as TF's do), and the dtype's
    lowest value where none does. One strided Slice of the padded image per tap, its filter
    value added, the taps outside the image masked to the lowest value per row and column, and
    an elementwise Max. tf2onnx has no conversion for it."""
    shape, kernel = _static_image(e, "dilation2d"), e.shape(1)
    if shape is None:
        return
    if kernel is None or len(kernel) != 3 or min(kernel[:2]) < 1:
        raise e.refuse(f"the filter's height and width must be known; its shape is {kernel}")
    same = e.attr("padding") == "SAME"
    strides, rates = list(e.attr("strides")), list(e.attr("rates"))
    np_dtype = onnx.helper.tensor_dtype_to_np_dtype(e.dtype(0))
    lowest = np.finfo(np_dtype).min if np_dtype.kind == "f" else np.iinfo(np_dtype).min
    low = e.const(lowest, np_dtype)
    axes = {}
    for axis in (1, 2):
        k, stride, rate = kernel[axis - 1], strides[axis], rates[axis]
        out, before, after = _patch_axis(shape[axis], k, stride, rate, same)
        if out == 0:
            raise e.refuse(f"the output of dilation2d of a {shape[1]}x{shape[2]} image is empty")
        axes[axis] = (k, stride, rate, out, before, after)
    x = e.inputs[0]
    pads = [axes[1][4], axes[2][4], axes[1][5], axes[2][5]]
    if any(pads):
        x = e.op("Pad", x, e.const([0, pads[0], pads[1], 0, 0, pads[2], pads[3], 0], np.int64), low)
    result = None
    for i in range(axes[1][0]):
        for j in range(axes[2][0]):
            starts, ends, steps, masks = [], [], [], []
            for axis, tap in ((1, i), (2, j)):
                k, stride, rate, out, before, _ = axes[axis]
                starts.append(tap * rate)
                ends.append(tap * rate + (out - 1) * stride + 1)
                steps.append(stride)
                at = np.arange(out) * stride + tap * rate - before
                inside = (at >= 0) & (at < shape[axis])
                if not inside.all():
                    mask_shape = [1, out, 1, 1] if axis == 1 else [1, 1, out, 1]
                    masks.append(inside.reshape(mask_shape))
            tap_values = e.op(
                "Slice",
                x,
                e.const(starts, np.int64),
                e.const(ends, np.int64),
                e.const([1, 2], np.int64),
                e.const(steps, np.int64),
            )
            weight = e.op(
                "Slice",
                e.inputs[1],
                e.const([i, j], np.int64),
                e.const([i + 1, j + 1], np.int64),
                e.const([0, 1], np.int64),
            )
            tap_values = e.op("Add", tap_values, weight)
            for mask in masks:
                tap_values = e.op("Where", e.const(mask, np.bool_), tap_values, low)
            result = tap_values if result is None else e.op("Max", result, tap_values)
    e.finish(result)


def _lower_histogram(e: _Emitter) -> None:
    """HistogramFixedWidth (tf.histogram_fixed_width) as TF's CPU kernel bins values
    (histogram_op.cc): bin = int(min((max(x, lo) - lo) [in x's dtype] / step [in double],
    nbins - 1)), step = double(hi - lo) / nbins, and the bins counted by a ScatterElements
    add. tf2onnx has no conversion for it.

    The range and nbins must be constants: nbins is the output's extent, and TF raises on a
    range with lo >= hi at run time, which compiled code cannot."""
    value_range, nbins = e.const_input(1), e.const_input(2)
    if value_range is None or nbins is None:
        raise e.refuse(
            "gdp takes histogram_fixed_width's value_range and nbins as constants (nbins is"
            " the output's size; TF raises on an empty range at run time, which compiled code"
            " cannot); here one is computed at run time"
        )
    lo, hi = value_range.reshape(-1)[:2]
    nbins = int(nbins)
    if not lo < hi or nbins < 1:
        raise e.refuse(
            f"TF raises on this histogram: value_range must rise and nbins be positive,"
            f" got value_range [{lo}, {hi}] and nbins {nbins}"
        )
    np_dtype = value_range.dtype
    step = float(np.asarray(hi - lo, np_dtype)) / nbins  # hi - lo in the values' dtype, as TF
    low = e.const(lo, np_dtype)
    offset = e.op("Cast", e.op("Sub", e.op("Max", e.inputs[0], low), low), to=TensorProto.DOUBLE)
    position = e.op(
        "Min", e.op("Div", offset, e.const(step, np.float64)), e.const(nbins - 1.0, np.float64)
    )
    bins = e.op("Reshape", e.op("Cast", position, to=TensorProto.INT64), e.const([-1], np.int64))
    out_type = e.attr("dtype", TensorProto.INT32)
    count_np = onnx.helper.tensor_dtype_to_np_dtype(out_type)
    ones = e.op(
        "ConstantOfShape",
        e.op("Shape", bins),
        value=onnx.numpy_helper.from_array(np.ones(1, count_np)),
    )
    zeros = e.const(np.zeros(nbins, count_np), count_np)
    e.finish(e.op("ScatterElements", zeros, bins, ones, axis=0, reduction="add"))


def _lower_one_hot(e: _Emitter) -> None:
    """OneHot (tf.one_hot) as TF defines it: on_value where the index equals the class, else
    off_value, the classes along `axis`, an index outside [0, depth) all off; written as an
    Equal against the classes and a Where. tf2onnx wrote ONNX's OneHot, which TVM's importer
    failed on (a one-element depth) or gave float64 for float32 (its on and off values as
    Python floats), and refused indices of rank above 1 with an integer result."""
    depth, shape = e.const_input(1), e.shape(0)
    if depth is None or shape is None:
        raise e.refuse(
            "gdp lowers tf.one_hot of a constant depth (the output's extent) and indices of a"
            f" known rank; here the depth is {'not ' if depth is None else ''}a constant and"
            f" the indices' shape is {shape}"
        )
    rank, axis = len(shape), int(e.attr("axis", -1))
    axis = rank if axis == -1 else axis
    classes_shape = [1] * (rank + 1)
    classes_shape[axis] = int(depth)
    index_type = onnx.helper.tensor_dtype_to_np_dtype(e.dtype(0))
    classes = e.const(np.arange(int(depth)).reshape(classes_shape), index_type)
    indices = e.op("Unsqueeze", e.inputs[0], e.const([axis], np.int64))
    e.finish(e.op("Where", e.op("Equal", indices, classes), e.inputs[2], e.inputs[3]))


# ---------------------------------------------------------------------------------------------
# Elementwise math TF has and ONNX does not: written with ONNX's, as accurate as TF's kernels.


def _float_operands(e: _Emitter, dtypes=(TensorProto.FLOAT, TensorProto.DOUBLE)) -> _Pixels:
    if e.dtype(0) not in dtypes:
        names = " or ".join(TensorProto.DataType.Name(d).lower() for d in dtypes)
        raise e.refuse(
            f"gdp lowers {e.op_type} of {names}, got {TensorProto.DataType.Name(e.dtype(0))}"
        )
    return _Pixels(e, onnx.helper.tensor_dtype_to_np_dtype(e.dtype(0)))


# Below |x| = 1/4, log1p(x) = 2 atanh(w), w = x / (2 + x), as atanh's odd series: |w| < 1/7,
# and w^21 / 21 is below 1e-17 of the sum (float64's precision).
_LOG1P_SERIES_BELOW = 0.25
_ATANH_TERMS = 10


def _lower_log1p(e: _Emitter) -> None:
    """Log1p: log(1 + x) loses the digits of a small x that 1 + x rounds away (log1p(1e-8)
    = 1e-8 gave 0). Below |x| = 1/4 it is 2 atanh(x / (2 + x)) as a series
    (_LOG1P_SERIES_BELOW), whose terms are computed to full precision; above, log(1 + x), off
    by a unit or two. (Goldberg's log(u) x / (u - 1), u = 1 + x, needs u - 1 computed as
    written: TVM's simplifier turns (x + 1) - 1 into x.)"""
    p, x = _float_operands(e), e.inputs[0]
    w = p.div(x, p.add(x, 2.0))
    w2 = p.mul(w, w)
    series = p.c(1.0 / (2 * _ATANH_TERMS - 1))
    for k in reversed(range(_ATANH_TERMS - 1)):
        series = p.add(p.mul(series, w2), 1.0 / (2 * k + 1))
    small = p.mul(p.mul(w, 2.0), series)
    e.finish(p.where(p.lt(p.abs(x), _LOG1P_SERIES_BELOW), small, e.op("Log", p.add(x, 1.0))))


def _lower_expm1(e: _Emitter) -> None:
    """Expm1: (u - 1) * (x / log(u)), u = e^x (Kahan's: the rounding of u cancels out, where
    e^x - 1 loses the digits of a small x); x where u is 1, -1 where u - 1 is, inf at inf."""
    p, x = _float_operands(e), e.inputs[0]
    u = e.op("Exp", x)
    d = p.sub(u, 1.0)
    exact = p.mul(d, p.div(x, e.op("Log", u)))
    out = p.where(p.eq(d, -1.0), -1.0, p.where(p.eq(u, np.inf), u, exact))
    e.finish(p.where(p.eq(u, 1.0), x, out))


# erfc(z) for z >= 0 as t * exp(-z^2 + P(t)), t = 1 / (1 + z/2): Numerical Recipes' erfcc
# (Chebyshev fit, relative error below 1.2e-7 everywhere), P's coefficients from t^0 up.
_ERFC_FIT = (
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)


def _lower_erfc(e: _Emitter) -> None:
    """Erfc (tf.math.erfc, and tf.nn.gelu's and Keras' exact gelu): for float32, to float32's
    precision in the tail where 1 - erf(z) is 0 (erfc(4) = 1.5e-8), see _ERFC_FIT; 2 -
    erfc(-z) below 0. float64 is refused: the fit holds 7 digits."""
    p, x = _float_operands(e, (TensorProto.FLOAT,)), e.inputs[0]
    z = p.abs(x)
    t = p.div(1.0, p.add(p.mul(z, 0.5), 1.0))
    poly = p.c(_ERFC_FIT[-1])
    for c in reversed(_ERFC_FIT[:-1]):
        poly = p.add(p.mul(poly, t), c)
    # e^(-z^2) with z^2 = h^2 + (z - h)(z + h), h = z to 1/256 (its square exact in float32
    # up to z = 16): z^2 rounded whole was off by 4e-6 near 9, and e^(-z^2) by as much.
    h = p.div(p.floor(p.mul(z, 256.0)), 256.0)
    rest = p.add(p.mul(p.sub(h, z), p.add(z, h)), poly)
    tail = p.mul(p.mul(t, e.op("Exp", p.mul(p.sub(0.0, h), h))), e.op("Exp", rest))
    tail = p.where(p.gt(z, 10.5), 0.0, tail)  # below float32's least (and inf - inf at inf)
    e.finish(p.where(p.lt(x, 0.0), p.sub(2.0, tail), tail))


def _zero_where(e: _Emitter, p: _Pixels, which: str, value: str) -> None:
    """`value`, 0 where the input `which` is 0 (TF's Xlogy, Xdivy, MulNoNan: even where the
    other operand is NaN or infinite), broadcast as the op broadcasts."""
    zero = p.c(0.0)
    e.finish(e.op("Where", p.eq(which, zero), zero, value))


def _lower_xlogy(e: _Emitter) -> None:
    p, (x, y) = _float_operands(e), e.inputs[:2]
    _zero_where(e, p, x, p.mul(x, e.op("Log", y)))


def _lower_xdivy(e: _Emitter) -> None:
    p, (x, y) = _float_operands(e), e.inputs[:2]
    _zero_where(e, p, x, p.div(x, y))


def _lower_mul_no_nan(e: _Emitter) -> None:
    p, (x, y) = _float_operands(e), e.inputs[:2]
    _zero_where(e, p, y, p.mul(x, y))


def _lower_invert(e: _Emitter) -> None:
    """Invert (tf.bitwise.invert, ~x): the type's all-ones minus x, which is ~x in two's
    complement and never overflows (ONNX's BitwiseNot is opset 18; gdp converts at 17)."""
    dtype = e.dtype(0)
    if dtype not in _SIGNED and dtype not in _UNSIGNED:
        raise e.refuse(f"Invert of integers, got {TensorProto.DataType.Name(dtype)}")
    np_dtype = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    ones = np.iinfo(np_dtype).max if dtype in _UNSIGNED else -1
    e.finish(e.op("Sub", e.const(ones, np_dtype), e.inputs[0]))


def _lower_bucketize(e: _Emitter) -> None:
    """Bucketize (keras.layers.Discretization, keras.ops.digitize, tf.raw_ops.Bucketize): TF's
    std::upper_bound over its float boundaries, the count of boundaries the value is not below,
    written as their number less the count it is below (so a NaN, below none, gets the last
    bucket as in TF). Values compare as C++ compares them with a float: integers converted to
    float32, float64 against the float32 boundaries widened."""
    boundaries = np.asarray(e.attr("boundaries", []), np.float32)
    dtype = e.dtype(0)
    if dtype == TensorProto.DOUBLE:
        x, boundaries = e.inputs[0], boundaries.astype(np.float64)
    elif dtype == TensorProto.FLOAT:
        x = e.inputs[0]
    else:
        x = e.op("Cast", e.inputs[0], to=TensorProto.FLOAT)
    if boundaries.size == 0:
        e.finish(e.op("Cast", e.op("Less", x, x), to=TensorProto.INT32))  # every value: 0
        return
    below = e.op(
        "Less", e.op("Unsqueeze", x, e.const([-1], np.int64)), e.const(boundaries, boundaries.dtype)
    )
    under = e.reduce_sum(e.op("Cast", below, to=TensorProto.INT32), -1)
    e.finish(e.op("Sub", e.const(boundaries.size, np.int32), under))


def _lower_select(e: _Emitter) -> None:
    """Select and SelectV2 (tf.where(cond, x, y)) as ONNX's Where. tf2onnx wrote a float select
    as cond * x + (1 - cond) * y (faster on onnxruntime, its comment says) unless it spotted a
    NaN guard: an infinity or NaN in the branch not taken then made the result NaN, so
    tf.where(x > 0, tf.math.log(x), 0) gave NaN at every x <= 0 where TF gives 0, and a
    selected -0.0 lost its sign. tf.compat.v1.where's rank-1 condition picks whole rows of a
    higher-rank x, as TF's Select does."""
    cond = e.inputs[0]
    cond_shape, shape = e.shape(0), e.shape(1) or e.shape(2)
    if e.op_type == "Select" and cond_shape is not None and len(cond_shape) == 1:
        if shape is None:
            raise e.refuse("a rank-1 condition over values of unknown rank")
        if len(shape) != 1:
            rows = e.const([cond_shape[0]] + [1] * (len(shape) - 1), np.int64)
            cond = e.op("Reshape", cond, rows)
    x, y = e.inputs[1], e.inputs[2]
    if e.dtype(1) == TensorProto.BOOL:  # onnxruntime has no boolean Where
        e.finish(e.op("Or", e.op("And", cond, x), e.op("And", e.op("Not", cond), y)))
        return
    e.finish(e.op("Where", cond, x, y))


LOWERINGS: dict[str, Callable[[_Emitter], None]] = {
    "ExtractImagePatches": _lower_extract_patches,
    "ResizeBilinear": _lower_resize_bilinear,
    "AdjustSaturation": _lower_adjust_saturation,
    "AdjustHue": _lower_adjust_hue,
    "RGBToHSV": _lower_rgb_to_hsv,
    "HSVToRGB": _lower_hsv_to_rgb,
    "ResizeNearestNeighbor": _lower_resize_nearest,
    "ResizeArea": _lower_separable_resize,
    "ResizeBicubic": _lower_separable_resize,
    "ScaleAndTranslate": _lower_separable_resize,
    "DepthwiseConv2dNative": _lower_depthwise_conv,
    "ShapeN": _lower_shape_n,
    "Div": _lower_division,
    "TruncateDiv": _lower_division,
    "FloorDiv": _lower_division,
    "FloorMod": _lower_division,
    "TruncateMod": _lower_division,
    "Mean": _lower_mean,
    "CropAndResize": _lower_crop_and_resize,
    "Dilation2D": _lower_dilation2d,
    "HistogramFixedWidth": _lower_histogram,
    "OneHot": _lower_one_hot,
    "Log1p": _lower_log1p,
    "Expm1": _lower_expm1,
    "Erfc": _lower_erfc,
    "Xlogy": _lower_xlogy,
    "Xdivy": _lower_xdivy,
    "MulNoNan": _lower_mul_no_nan,
    "Invert": _lower_invert,
    "Bucketize": _lower_bucketize,
    "Select": _lower_select,
    "SelectV2": _lower_select,
}
