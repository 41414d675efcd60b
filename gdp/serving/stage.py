"""The preprocessing stage without Ray: where its model comes from, loading it once, turning a
request or a handle call into validated inputs, and running a batch of them.

`Stage` is what a Ray Serve replica (gdp.serving.Preprocess) or a Ray Data actor (gdp.ray)
holds; it is plain Python so that it can be tested and reused without a cluster."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gdp.errors import GdpError, InputError
from gdp.serving.codec import (
    CHANNEL_ORDERS,
    DEFAULT_MAX_PIXELS,
    RequestError,
    decode_request,
    decode_value,
)
from gdp.signature import check_input


@dataclass(frozen=True)
class ModelSource:
    """What a replica or an actor loads, made on the driver so that it travels with the
    deployment: a saved model's or ONNX file's bytes (no node needs the file), a compiled
    model's graph and options (a `gdp.Model` given in memory), or a bundle directory's path
    (executables, not copied: every node needs the directory)."""

    kind: str  # "file", "graph" or "bundle"
    name: str
    data: bytes | None = None
    path: str | None = None
    target: str | None = None
    options: dict = field(default_factory=dict)


def model_source(model: Any, target: str | None = None) -> ModelSource:
    """A path (saved model, ONNX file or bundle directory), a `gdp.Model` or a ModelSource ->
    a ModelSource."""
    if isinstance(model, ModelSource):
        return model
    from gdp.model import Model

    if isinstance(model, Model):
        return ModelSource(
            "graph",
            "model",
            data=model.source_onnx.SerializeToString(),
            target=target or model.target.name,
            options=dict(model.options),
        )
    if isinstance(model, str | os.PathLike):
        path = Path(model).expanduser().resolve()
        if path.is_dir():
            return ModelSource("bundle", path.name, path=str(path), target=target)
        if not path.is_file():
            raise GdpError(
                f"model {str(model)!r}: expected a saved gdp model, an ONNX file or a"
                " bundle directory, got no such file"
            )
        return ModelSource("file", path.name, data=path.read_bytes(), target=target)
    raise GdpError(
        f"model: expected a path, a gdp.Model or a ModelSource, got {type(model).__name__}"
    )


def load_model(source: ModelSource):
    """The source as a runnable gdp.Model (compiled code from the cache where it is there)."""
    import gdp

    if source.kind == "bundle":
        return gdp.load(source.path, target=source.target)
    if source.kind == "graph":
        import onnx

        return gdp.compile(
            onnx.load_from_string(source.data), target=source.target, **source.options
        )
    # gdp.load reads a path (it checks a saved model's SHA-256): the bytes go to a private
    # directory of this process for the time of the load.
    folder = tempfile.mkdtemp(prefix="gdp-serve-")
    try:
        path = Path(folder) / (Path(source.name).name or "model.onnx")
        path.write_bytes(source.data)
        return gdp.load(path, target=source.target)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _sig_json(sig) -> dict:
    return {"name": sig.name, "dtype": sig.dtype.name, "shape": list(sig.shape)}


class Stage:
    """A gdp model loaded once, with what a server needs around it: request decoding under
    limits, validation against the model's inputs, batches that run every image of its own
    size through the model's graph, and the model's metadata."""

    def __init__(
        self,
        model: Any,
        *,
        target: str | None = None,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        channel_order: str = "rgb",
    ) -> None:
        if channel_order not in CHANNEL_ORDERS:
            raise GdpError(
                f"channel_order: expected one of {list(CHANNEL_ORDERS)}, got {channel_order!r}"
            )
        if isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or max_pixels < 1:
            raise GdpError(f"max_pixels: expected an integer >= 1, got {max_pixels!r}")
        self.source = model_source(model, target)
        self.model = load_model(self.source)
        self.inputs = list(self.model.inputs)
        self.outputs = list(self.model.outputs)
        self.max_pixels = max_pixels
        self.channel_order = channel_order

    @property
    def output_names(self) -> list[str]:
        return [s.name for s in self.outputs]

    def metadata(self) -> dict:
        report = self.model.report()
        return {
            "model": self.source.name,
            "inputs": [_sig_json(s) for s in self.inputs],
            "outputs": [_sig_json(s) for s in self.outputs],
            "target": report["target"],
            "precision": report["precision"],
            "shapes_mode": report["shapes_mode"],
            "channel_order": self.channel_order,
            "max_pixels": self.max_pixels,
        }

    def decode(self, body: bytes, content_type: str) -> list[np.ndarray]:
        """An HTTP body -> validated inputs in input order (RequestError on a bad one)."""
        return decode_request(
            body,
            content_type,
            self.inputs,
            max_pixels=self.max_pixels,
            channel_order=self.channel_order,
        )

    def coerce(self, value: Any) -> list[np.ndarray]:
        """A handle call's argument -> validated inputs in input order: an array (one-input
        model), a dict by input name or a sequence in input order, of arrays or of encoded bytes
        (an image or a .npy, as over HTTP)."""
        names = [s.name for s in self.inputs]
        if isinstance(value, Mapping):
            unknown = [k for k in value if k not in names]
            if unknown:
                raise RequestError(422, f"unknown input {unknown[0]!r}: the model takes {names}")
            missing = [n for n in names if n not in value]
            if missing:
                raise RequestError(422, f"missing input(s) {missing}: the model takes {names}")
            values = [value[n] for n in names]
        elif len(self.inputs) == 1 and not isinstance(value, list | tuple):
            values = [value]
        elif isinstance(value, list | tuple):
            if len(value) != len(names):
                raise RequestError(
                    422, f"expected {len(names)} inputs {names}, got a sequence of {len(value)}"
                )
            values = list(value)
        else:
            raise RequestError(
                422, f"the model takes {names}: expected a dict by name, got {type(value).__name__}"
            )
        arrays = []
        for sig, v in zip(self.inputs, values, strict=True):
            if isinstance(v, bytes | bytearray | memoryview):
                arrays.append(
                    decode_value(
                        bytes(v), sig, max_pixels=self.max_pixels, channel_order=self.channel_order
                    )
                )
                continue
            try:
                arrays.append(check_input(sig, v))
            except InputError as err:
                raise RequestError(422, str(err)) from None
        return arrays

    def run(self, entries: Sequence[list[np.ndarray]]) -> list[dict[str, np.ndarray] | Exception]:
        """Each entry's outputs by name, or the exception its run raised. The batch runs as one
        ragged batch (each image of its own size through the model's graph); where that fails
        (an output whose shape depends on the input size, or one bad entry), each entry runs on
        its own, so one entry's error is only its own."""
        if len(entries) > 1:
            items = [e[0] if len(e) == 1 else tuple(e) for e in entries]
            try:
                stacked = self.model.run_batch(items)
            except GdpError:
                pass
            else:
                if not isinstance(stacked, dict):
                    stacked = {self.output_names[0]: stacked}
                return [{k: v[n] for k, v in stacked.items()} for n in range(len(entries))]
        results: list[dict[str, np.ndarray] | Exception] = []
        for arrays in entries:
            try:
                results.append(self.model.submit(list(arrays), None, wait=True).result())
            except Exception as err:  # reported to that entry's caller
                results.append(err)
        return results
