"""gdp's preprocessing as a Ray Serve deployment.

`Preprocess` loads a gdp model once per replica and serves it two ways:
- over HTTP (it is the application's ingress): `POST /` with an image, a .npy or a multipart
  form of named inputs -> the outputs as .npy / .npz / JSON; `GET /healthz`; `GET /metadata`;
- to other deployments through a `DeploymentHandle`: `await handle.preprocess.remote(x)` ->
  {output name: array}, so that preprocessing and the model it feeds scale apart.

Both paths meet in one `@serve.batch` method: requests that arrive within `batch_wait_ms` of
each other (up to `max_batch_size`) run as one ragged gdp batch, each image resized by the
model's own graph. Decoding runs in a thread pool beside it, so the event loop keeps taking
requests while a batch runs."""

from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from ray import serve
from ray.serve.metrics import Counter, Histogram
from starlette.requests import Request
from starlette.responses import Response

from gdp.errors import GdpError, InputError
from gdp.serving.codec import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_PIXELS,
    JSON_TYPE,
    RequestError,
    encode_outputs,
    error_body,
)
from gdp.serving.stage import Stage, model_source

log = logging.getLogger("ray.serve")

DEFAULT_MAX_BATCH_SIZE = 8
DEFAULT_BATCH_WAIT_MS = 5.0


def _json(doc: Any, status: int = 200) -> Response:
    return Response(json.dumps(doc), status_code=status, media_type=JSON_TYPE)


def _error(err: RequestError) -> Response:
    return Response(error_body(err), status_code=err.status, media_type=JSON_TYPE)


@serve.deployment(name="Preprocess", max_ongoing_requests=32, ray_actor_options={"num_cpus": 1})
class Preprocess:
    """A Ray Serve deployment that runs a gdp model on requests.

    `model` is a saved gdp model or ONNX file path, a bundle directory, a `gdp.Model` or a
    `gdp.serving.stage.ModelSource`; `stage` (instead) is a zero-argument factory of a
    Stage-like object (what the benchmark's OpenCV + NumPy stage is)."""

    def __init__(
        self,
        model: Any = None,
        *,
        target: str | None = None,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        batch_wait_ms: float = DEFAULT_BATCH_WAIT_MS,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        channel_order: str = "rgb",
        stage: Any = None,
    ) -> None:
        if (model is None) == (stage is None):
            raise GdpError("Preprocess: give a model (a path or gdp.Model) or a stage factory")
        self.stage = (
            stage()
            if stage is not None
            else Stage(model, target=target, max_pixels=max_pixels, channel_order=channel_order)
        )
        self.max_body_bytes = int(max_body_bytes)
        self.max_batch_size = int(max_batch_size)
        self.batch_wait_s = float(batch_wait_ms) / 1000.0
        self._run_batch.set_max_batch_size(self.max_batch_size)
        self._run_batch.set_batch_wait_timeout_s(self.batch_wait_s)
        # Decoding and batches off the event loop: OpenCV's decoders and gdp's kernels release
        # the GIL, so decoding the next requests overlaps the batch that runs.
        self._decoders = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gdp-decode")
        self._runner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gdp-run")
        self._requests = Counter(
            "gdp_preprocess_requests",
            description="requests answered by the gdp preprocess stage, by HTTP status",
            tag_keys=("status",),
        )
        self._batch_sizes = Histogram(
            "gdp_preprocess_batch_size",
            description="entries in each batch the gdp preprocess stage ran",
            boundaries=[1, 2, 4, 8, 16, 32, 64],
        )

    # -- the batched core ---------------------------------------------------------------------

    @serve.batch(max_batch_size=DEFAULT_MAX_BATCH_SIZE, batch_wait_timeout_s=0.005)
    async def _run_batch(self, entries: list[list[np.ndarray]]) -> list:
        self._batch_sizes.observe(len(entries))
        loop = asyncio.get_running_loop()
        results = await loop.run_in_executor(self._runner, self.stage.run, entries)
        return [(r, len(entries)) for r in results]

    async def _outputs(self, arrays: list[np.ndarray]) -> tuple[dict[str, np.ndarray], int]:
        """The outputs of one entry, and the size of the batch it ran in."""
        result, size = await self._run_batch(arrays)
        if isinstance(result, Exception):
            raise result
        return result, size

    # -- composition: called through a DeploymentHandle ----------------------------------------

    async def preprocess(self, inputs: Any) -> dict[str, np.ndarray]:
        """`inputs`: an array (one-input model), a dict by input name or a sequence in input
        order, of arrays or encoded images/.npy bytes -> {output name: array}. A bad input
        raises RequestError (a gdp.InputError) in the caller."""
        loop = asyncio.get_running_loop()
        arrays = await loop.run_in_executor(self._decoders, self.stage.coerce, inputs)
        outputs, _ = await self._outputs(arrays)
        return outputs

    def metadata(self) -> dict:
        doc = self.stage.metadata()
        doc["max_batch_size"] = self.max_batch_size
        doc["batch_wait_ms"] = self.batch_wait_s * 1000.0
        doc["max_body_bytes"] = self.max_body_bytes
        return doc

    def check_health(self) -> None:
        """Ray Serve's replica health check: the model is loaded."""
        if self.stage is None:
            raise RuntimeError("gdp preprocess: no model loaded")

    # -- HTTP ---------------------------------------------------------------------------------

    async def __call__(self, request: Request) -> Response:
        response = await self._http(request)
        self._requests.inc(tags={"status": str(response.status_code)})
        return response

    async def _http(self, request: Request) -> Response:
        # The path under the application's route prefix (Serve sets it as the ASGI root_path).
        path = request.scope.get("path", "/")
        root = request.scope.get("root_path", "").rstrip("/")
        if root and path.startswith(root):
            path = path[len(root) :]
        path = path.rstrip("/") or "/"
        method = request.method
        if path == "/healthz":
            if method != "GET":
                return _error(RequestError(405, f"/healthz: expected GET, got {method}"))
            return _json({"status": "ok"})
        if path == "/metadata":
            if method != "GET":
                return _error(RequestError(405, f"/metadata: expected GET, got {method}"))
            return _json(self.metadata())
        if path != "/":
            return _error(
                RequestError(
                    404, f"no route {path!r}: expected POST /, GET /healthz or GET /metadata"
                )
            )
        if method != "POST":
            return _error(RequestError(405, f"/: expected POST with an image, got {method}"))
        try:
            body = await self._body(request)
            loop = asyncio.get_running_loop()
            arrays = await loop.run_in_executor(
                self._decoders, self.stage.decode, body, request.headers.get("content-type", "")
            )
            outputs, size = await self._outputs(arrays)
            content, media = encode_outputs(outputs, request.headers.get("accept", ""))
        except RequestError as err:
            return _error(err)
        except InputError as err:
            return _error(RequestError(422, str(err)))
        except GdpError as err:
            log.warning("gdp preprocess: %s: %s", type(err).__name__, err)
            return _json({"error": f"{type(err).__name__}: {err}", "status": 500}, 500)
        # The size of the batch this request ran in (dynamic batching made visible).
        return Response(content, media_type=media, headers={"X-Gdp-Batch-Size": str(size)})

    async def _body(self, request: Request) -> bytes:
        """The body, refused with 413 as soon as it passes max_body_bytes (Content-Length is
        checked first; a body without one is counted as it streams)."""
        limit = self.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                raise RequestError(400, f"Content-Length: expected a number, got {declared!r}")
            if int(declared) > limit:
                raise RequestError(
                    413, f"body of {declared} bytes: over the limit of {limit} (max_body_bytes)"
                )
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestError(413, f"body over the limit of {limit} bytes (max_body_bytes)")
            chunks.append(chunk)
        return b"".join(chunks)


def app(
    model: Any,
    *,
    replicas: int = 1,
    num_cpus: float = 1.0,
    target: str | None = None,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    batch_wait_ms: float = DEFAULT_BATCH_WAIT_MS,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    channel_order: str = "rgb",
    name: str = "Preprocess",
):
    """The Serve application of `gdp serve`: a Preprocess deployment bound to `model` (read on
    this process and shipped to the replicas, see ModelSource), `replicas` copies of
    `num_cpus` each, taking up to 4 batches' worth of requests at a time."""
    source = model_source(model, target)
    return Preprocess.options(
        name=name,
        num_replicas=replicas,
        max_ongoing_requests=max(32, 4 * max_batch_size),
        ray_actor_options={"num_cpus": num_cpus},
    ).bind(
        source,
        target=target,
        max_batch_size=max_batch_size,
        batch_wait_ms=batch_wait_ms,
        max_pixels=max_pixels,
        max_body_bytes=max_body_bytes,
        channel_order=channel_order,
    )
