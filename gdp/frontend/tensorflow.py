"""Front ends for TensorFlow: a tf.function (or a Python function plus an input signature), and the
GDPNPU form, Keras symbolic inputs and outputs. Both become one ONNX graph through tf2onnx.

TensorFlow is imported inside the functions, so `import gdp` and running a cached model never
load it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sysconfig
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.shape_inference
import onnx_ir as ir

from gdp.errors import FrontendError, UnsupportedOpError
from gdp.frontend.common import OPSET, finalize
from gdp.frontend.tf_lowerings import DEFERRED_DOMAIN, Lowerings, has_deferred, resolve_deferred
from gdp.rewrites.specialize import specialize_shapes
from gdp.startup import quiet_tensorflow


def _quiet_tensorflow():
    """TensorFlow, its first import without start-up notices (gdp.startup)."""
    quiet_tensorflow()  # done by `import gdp` already; here for the reader
    import tensorflow as tf

    return tf


def is_tf_function(obj: Any) -> bool:
    return callable(obj) and hasattr(obj, "get_concrete_function")


def is_keras_tensor(obj: Any) -> bool:
    cls = type(obj)
    return cls.__name__ == "KerasTensor" and cls.__module__.split(".")[0] in ("keras", "tf_keras")


def from_tf_function(
    fn: Callable, input_signature: Sequence | None = None, opset: int = OPSET
) -> onnx.ModelProto:
    """Convert a tf.function, or a plain function with `input_signature` (tf.TensorSpec list)."""
    tf = _quiet_tensorflow()
    import tf2onnx

    if input_signature is None:
        input_signature = getattr(fn, "input_signature", None)
    if input_signature is None:
        raise FrontendError(
            f"{getattr(fn, '__name__', fn)!r} has no input_signature: pass a tf.function with "
            "input_signature=[tf.TensorSpec(shape, dtype, name=...)] or give input_signature="
        )
    specs = list(input_signature)
    for i, spec in enumerate(specs):
        if not isinstance(spec, tf.TensorSpec):
            raise FrontendError(
                f"input_signature[{i}]: expected tf.TensorSpec, got {type(spec).__name__}"
            )
    if not is_tf_function(fn):
        fn = tf.function(fn, input_signature=specs)
    origin = f"tf.function {getattr(fn, '__name__', 'fn')!r}"
    try:
        concrete = fn.get_concrete_function(*specs)
    except Exception as err:
        raise FrontendError(f"{origin} could not be traced: {err}") from err
    captured = _captured_constants(tf, concrete)
    lowerings = Lowerings()
    with _CONVERSION_LOCK, _Tf2onnxLog() as log:
        try:
            model, _ = tf2onnx.convert.from_function(
                fn,
                input_signature=specs,
                opset=opset,
                custom_op_handlers=lowerings.custom_op_handlers(),
            )
        except Exception as err:
            _raise_refusals(None, concrete, lowerings, log)
            raise FrontendError(f"{origin} could not be converted to ONNX: {err}") from err
    _raise_refusals(model, concrete, lowerings, log)
    model = _freeze(model, captured)
    if has_deferred(model):
        model = _lower_deferred(model, concrete)
    model = _resize_to_sizes(model)
    return finalize(_name_positional_outputs(model), origin)


# tf2onnx keeps global state (its name counter, its op registry) and gdp captures its log.
_CONVERSION_LOCK = threading.Lock()


class _Tf2onnxLog(logging.Handler):
    """tf2onnx's error records during one conversion, kept rather than printed: an op it cannot
    map, or one whose handler failed (logged with a stack trace), becomes gdp's error instead."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> _Tf2onnxLog:
        logger = logging.getLogger("tf2onnx")
        self._saved = logger.propagate, logger.level
        logger.addHandler(self)
        logger.propagate = False
        logger.setLevel(min(logger.getEffectiveLevel(), logging.ERROR))
        return self

    def __exit__(self, *exc: object) -> None:
        logger = logging.getLogger("tf2onnx")
        logger.removeHandler(self)
        logger.propagate, level = self._saved
        logger.setLevel(level)

    def failed_nodes(self) -> list[tuple[str, str]]:
        """(node name, error) of every node whose tf2onnx handler raised."""
        out = []
        for record in self.records:
            if record.msg.startswith("Failed to convert node") and record.args:
                error = record.exc_info[1] if record.exc_info else None
                out.append((str(record.args[0]), f"{type(error).__name__}: {error}"))
        return out


def _raise_refusals(model, concrete, lowerings: Lowerings, log: _Tf2onnxLog) -> None:
    """Raise UnsupportedOpError for the first TF op the conversion could not take, naming its
    type, its name and the user's source line: a gdp lowering's refusal, a tf2onnx handler that
    failed, or an op left unconverted (tf2onnx has no handler, gdp no lowering)."""
    refusals: list[tuple[str, str, str]] = []  # (TF op type, op name, why)
    for err in lowerings.errors:
        detail = str(err).split(": ", 1)[1] if isinstance(err, UnsupportedOpError) else str(err)
        refusals.append((getattr(err, "op", "?"), getattr(err, "node", "?"), detail))
    lowered = {r[1] for r in refusals}
    for name, error in log.failed_nodes():
        if name not in lowered:
            op = _find_op(concrete.graph, name)
            refusals.append(
                (
                    op.type if op is not None else "?",
                    name,
                    f"tf2onnx failed to convert it ({error})",
                )
            )
    for node in model.graph.node if model is not None else ():
        deferred = node.domain == DEFERRED_DOMAIN
        if (
            not deferred
            and not onnx.defs.has(node.op_type, node.domain)
            and node.name not in lowered
        ):
            refusals.append(
                (
                    node.op_type,
                    node.name,
                    "tf2onnx has no ONNX conversion for this TensorFlow op and gdp has no "
                    "lowering of it",
                )
            )
    if not refusals:
        return
    op_type, name, detail = refusals[0]
    where = _source_line(concrete.graph, name)
    if where:
        detail += f"; the op comes from {where}"
    others = sorted({f"{t} ({n})" for t, n, _ in refusals[1:]})
    if others:
        detail += f"; also refused: {', '.join(others)}"
    raise UnsupportedOpError(op_type, name, detail)


def _lower_deferred(model: onnx.ModelProto, concrete) -> onnx.ModelProto:
    """The lowerings that needed a static fact TF's shape inference did not know (a resize's
    input height and width behind a tf.cond with a constant predicate): the graph specialised
    to the signature's static shapes, where ONNX folds what TF did not, then lowered."""
    shapes: dict[str, tuple[int, ...]] | None = {}
    for value in model.graph.input:
        dims = value.type.tensor_type.shape.dim
        if not all(d.HasField("dim_value") for d in dims):
            shapes = None
            break
        shapes[value.name] = tuple(d.dim_value for d in dims)
    if shapes is None:
        node = next(n for n in model.graph.node if n.domain == DEFERRED_DOMAIN)
        raise _located(
            UnsupportedOpError(
                node.op_type,
                node.name,
                "gdp lowers this op where its input's height and width are static; the "
                "function's input signature has free dimensions: give it a static shape "
                "(tf.TensorSpec([H, W, C]) or [N, H, W, C])",
            ),
            concrete,
        )
    if not any(e.domain == DEFERRED_DOMAIN for e in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(DEFERRED_DOMAIN, 1))
    model = specialize_shapes(model, shapes)
    try:
        return resolve_deferred(model)
    except UnsupportedOpError as err:
        raise _located(err, concrete) from None


def _located(err: UnsupportedOpError, concrete) -> UnsupportedOpError:
    """`err` with the user's source line of its op appended."""
    where = _source_line(concrete.graph, err.node)
    if not where:
        return err
    detail = str(err).split(": ", 1)[1] if ": " in str(err) else ""
    return UnsupportedOpError(err.op, err.node, f"{detail}; the op comes from {where}")


def _find_op(graph, name: str):
    """The op `name` of the traced graph; inside a called tf.function ("call/op"), the op of
    the callee's graph where TF keeps it, else the call."""
    try:
        return graph.get_operation_by_name(name)
    except (KeyError, ValueError):
        pass
    parts = name.split("/")
    for i in range(len(parts) - 1, 0, -1):
        try:
            call = graph.get_operation_by_name("/".join(parts[:i]))
        except (KeyError, ValueError):
            continue
        try:
            callee = graph._functions[call.get_attr("f").name].graph
            return _find_op(callee, "/".join(parts[i:])) or call
        except Exception:
            return call
    return None


def _library_dirs() -> tuple[str, ...]:
    """Folders whose frames are never the user's: TensorFlow, Keras, tf2onnx, gdp, the
    standard library."""
    dirs = [sysconfig.get_paths()["stdlib"]]
    for package in (
        "tensorflow",
        "keras",
        "tf_keras",
        "tf2onnx",
        "gdp",
        "gdp.ops",
        "gdp.rewrites",
        "gdp.runtime",
    ):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            continue
        if spec is not None:
            dirs.extend(spec.submodule_search_locations or ())
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs)


def _source_line(graph, name: str) -> str | None:
    """file:line of the innermost frame outside the libraries where TF created the op."""
    op = _find_op(graph, name)
    if op is None:
        return None
    libraries = _library_dirs()
    try:
        frames = list(op.traceback)
    except Exception:
        return None
    for frame in reversed(frames):
        path = os.path.realpath(frame.filename)
        if not path.startswith(libraries):
            where = f"{frame.filename}:{frame.lineno}"
            return f"{where} (in {frame.name})" if frame.name else where
    return None


def _captured_constants(tf, concrete) -> dict:
    """The tensors a traced function captured from outside (a `tf.constant` defined beside it,
    a mean or a std): the name of the placeholder standing for each inside the graph -> its
    value. tf2onnx freezes captured variables but turns these into graph inputs, which the
    user never passes."""
    out = {}
    for external, internal in concrete.graph.captures:
        if internal.dtype == tf.resource or not hasattr(external, "numpy"):
            continue
        out[internal.name] = external.numpy()
    return out


def _freeze(model: onnx.ModelProto, captured: dict) -> onnx.ModelProto:
    """The graph inputs that stand for captured constants replaced by initializers holding
    their values, so that the model's inputs are the function's signature."""
    frozen = [v for v in model.graph.input if v.name in captured]
    for value in frozen:
        model.graph.input.remove(value)
        model.graph.initializer.append(
            onnx.numpy_helper.from_array(np.asarray(captured[value.name]), value.name)
        )
    return model


# How far in * scale may be from a whole number and still be a size written as a float32 scale.
_SCALE_SLACK = 1e-3


def _resize_to_sizes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Resizes to a size TF knew, as sizes: tf2onnx writes `tf.image.resize(x, (224, 224))` on a
    static input as float32 scales (224 / 1080 = 0.2074074), and ONNX takes floor(1080 *
    0.2074074) = 223 rows, one short of TF's. Every tf.image resize is to a whole size, so a
    constant scale whose product with a static input dimension is within _SCALE_SLACK of a
    whole number is that size."""
    resizes = [
        n
        for n in model.graph.node
        if n.op_type == "Resize" and n.domain in ("", "ai.onnx") and len(n.input) == 3
    ]
    if not resizes:
        return model
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {
        v.name: [
            d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim
        ]
        for v in (*inferred.graph.input, *inferred.graph.value_info)
    }
    constants = {t.name: t for t in model.graph.initializer}
    for node in resizes:
        shape, scales = shapes.get(node.input[0]), constants.get(node.input[2])
        if not shape or scales is None or None in shape:
            continue
        values = onnx.numpy_helper.to_array(scales)
        if values.shape != (len(shape),):
            continue
        exact = np.asarray(shape, np.float64) * values
        sizes = np.rint(exact)
        if np.any(np.abs(exact - sizes) > _SCALE_SLACK):
            continue
        name = f"{node.name}_sizes"
        model.graph.initializer.append(onnx.numpy_helper.from_array(sizes.astype(np.int64), name))
        node.input[2] = ""
        node.input.append(name)
    return model


def _name_positional_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """A function that returns a tensor or a tuple gets outputs named output_0, output_1, ...

    tf2onnx names them after internal TF nodes ("Identity:0"), which say nothing to a user; a
    function returning a dict keeps its keys as names. The values are renamed, not the strings
    that name them: a value the function returns and also branches on (tf.image.rot90's cond)
    is read inside an If's subgraph too, which kept the old name and made the graph invalid.
    """
    if not any(":" in o.name for o in model.graph.output):
        return model
    graph = ir.serde.deserialize_model(model)
    for i, value in enumerate(graph.graph.outputs):
        value.name = f"output_{i}"
    return ir.serde.serialize_model(graph)


def from_keras(
    inputs: Sequence, outputs: Sequence | Mapping[str, Any], opset: int = OPSET
) -> onnx.ModelProto:
    """The GDPNPU form: `gdp.compile([a, b], [c])` with tf.keras.Input symbolic tensors.

    Keras 3 tensors (`a + b`, `keras.ops.*`, layers) and, under TF_USE_LEGACY_KERAS=1, tf-keras
    tensors built from raw TF ops (`tf.add(a, b, name="c")`) both work. Outputs are named by the
    dict keys when a dict is given, else by the op's `name=` or the Keras layer name.
    """
    function, specs = keras_function(inputs, outputs)
    return from_tf_function(function, specs, opset)


def keras_function(inputs: Sequence, outputs: Sequence | Mapping[str, Any]) -> tuple[Any, list]:
    """Keras symbolic inputs and outputs as the tf.function (and its input signature) that
    from_keras converts; gdp.frontend.verify runs the same function as TensorFlow's answer."""
    tf = _quiet_tensorflow()
    inputs = list(inputs)
    if isinstance(outputs, Mapping):
        out_names, out_tensors = list(outputs.keys()), list(outputs.values())
    else:
        out_tensors = list(outputs)
        out_names = None
    for kind, tensors in (("inputs", inputs), ("outputs", out_tensors)):
        for i, t in enumerate(tensors):
            if not is_keras_tensor(t):
                raise FrontendError(
                    f"{kind}[{i}]: expected a Keras symbolic tensor (tf.keras.Input or an op on "
                    f"one), got {type(t).__name__}"
                )
    legacy = type(inputs[0]).__module__.startswith("tf_keras")
    if legacy:
        import tf_keras as keras_mod
    else:
        import keras as keras_mod
    try:
        kmodel = keras_mod.Model(inputs, out_tensors)
    except Exception as err:
        raise FrontendError(f"the Keras inputs and outputs do not form a model: {err}") from err
    if out_names is None:
        out_names = _keras_output_names(kmodel, out_tensors, legacy)
    in_names = [_keras_input_name(t, i) for i, t in enumerate(inputs)]
    specs = [
        tf.TensorSpec(t.shape, tf.as_dtype(_dtype_name(t.dtype)), name=n)
        for t, n in zip(inputs, in_names, strict=True)
    ]

    def run(*args):
        result = kmodel(list(args))
        if not isinstance(result, list | tuple):
            result = [result]
        return {name: tf.identity(r) for name, r in zip(out_names, result, strict=True)}

    return tf.function(run, input_signature=specs), specs


def _dtype_name(dtype: Any) -> str:
    return getattr(dtype, "name", dtype)


def _keras_input_name(tensor: Any, index: int) -> str:
    name = getattr(tensor, "name", None) or f"input_{index}"
    return name.split(":")[0]


def _keras_output_names(kmodel: Any, tensors: list, legacy: bool) -> list[str]:
    names = list(kmodel.output_names)
    if legacy:
        # tf.add(a, b, name="c") on tf-keras tensors becomes a TFOpLambda layer named after the TF
        # symbol ("tf.math.add"); the user's name= survives in the call arguments.
        for i, t in enumerate(tensors):
            node = getattr(t, "node", None)
            given = (getattr(node, "call_kwargs", None) or {}).get("name")
            if given:
                names[i] = given
    unique: list[str] = []
    for name in names:
        candidate, k = name, 1
        while candidate in unique:
            candidate, k = f"{name}_{k}", k + 1
        unique.append(candidate)
    return unique
