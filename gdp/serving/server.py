"""`gdp serve`: Ray Serve on this machine (or a cluster given by address) serving one model."""

from __future__ import annotations

import signal
import threading
from typing import Any

from gdp.serving.codec import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_PIXELS
from gdp.serving.deployment import DEFAULT_BATCH_WAIT_MS, DEFAULT_MAX_BATCH_SIZE, app
from gdp.serving.stage import load_model, model_source

APP_NAME = "gdp"


def init_ray(**options: Any) -> None:
    """ray.init(**options), called from a new thread that then stays parked (a daemon).

    Written when ray.init, forking Ray's helper processes (with preexec_fn, so Python's at-fork
    handlers run in the child), hung in a process whose TVM thread pool had gone idle: a core
    bug since fixed (runtime/backends/tvm/thread_pool.py, docs/serving.md). A thread of its own
    is kept: it has no pool of its own to carry through the fork. The thread must outlive Ray:
    Ray's helpers die with the thread that started them (PR_SET_PDEATHSIG)."""
    failure: list[BaseException] = []
    ready = threading.Event()

    def start() -> None:
        import ray

        try:
            ray.init(**options)
        except BaseException as err:  # re-raised in the caller's thread
            failure.append(err)
        ready.set()
        if not failure:
            threading.Event().wait()  # parked for the life of the process

    threading.Thread(target=start, name="gdp-ray-init", daemon=True).start()
    ready.wait()
    if failure:
        raise failure[0]


def run(
    model: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    replicas: int = 1,
    replica_cpus: float = 1.0,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    batch_wait_ms: float = DEFAULT_BATCH_WAIT_MS,
    target: str | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    channel_order: str = "rgb",
    address: str | None = None,
    num_cpus: int | None = None,
    metrics_port: int | None = None,
    check: bool = True,
    block: bool = True,
):
    """Serve `model` over HTTP on host:port with Ray Serve and return the application's
    DeploymentHandle (with `block`, first wait for Ctrl-C or SIGTERM, then shut Serve and
    Ray down).

    Ray is started here unless this process is connected already: a new local instance
    (`num_cpus`, no dashboard; Ray's metrics on `metrics_port`, where Serve's own request,
    latency and replica metrics and gdp's are exported for Prometheus), or the cluster at
    `address` ("auto" for the one `ray start` made on this machine).

    The model is read here (and shipped to the replicas, gdp.serving.stage.ModelSource); with
    `check` it is also loaded here once before Ray starts: a model gdp cannot load fails now,
    with its error, rather than in every replica, and the compiled code is in this machine's
    cache when the replicas start."""
    import ray
    from ray import serve

    source = model_source(model, target)
    started = False
    if not ray.is_initialized():
        init: dict[str, Any] = {"include_dashboard": False}
        if address is not None:
            init["address"] = address
        else:
            # A new instance, never one that happens to run on this machine already.
            init["address"] = "local"
            init["num_cpus"] = num_cpus
            if metrics_port is not None:
                init["_metrics_export_port"] = metrics_port
        init_ray(**init)
        started = True
    if check:
        try:
            load_model(source)
        except Exception:
            if started:
                ray.shutdown()
            raise
    serve.start(http_options={"host": host, "port": port})
    handle = serve.run(
        app(
            source,
            replicas=replicas,
            num_cpus=replica_cpus,
            target=target,
            max_batch_size=max_batch_size,
            batch_wait_ms=batch_wait_ms,
            max_pixels=max_pixels,
            max_body_bytes=max_body_bytes,
            channel_order=channel_order,
        ),
        name=APP_NAME,
        route_prefix="/",
    )
    if not block:
        return handle
    done = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: done.set())
    print(
        f"gdp serve: POST images to http://{host}:{port}/ (GET /metadata, /healthz); Ctrl-C stops",
        flush=True,
    )
    try:
        while not done.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        serve.shutdown()
        if started:
            ray.shutdown()
    return handle
