"""gdp's preprocessing stage on the real engine: one local Ray instance for the module
(num_cpus=2, no dashboard), `gdp.serving.run` serving a saved model over HTTP on 127.0.0.1 with
two replicas, real HTTP clients (httpx), Ray Data over images read from files.

The oracle of every response is the direct `model(x)` of this process on the request's own
image (decoded here with OpenCV); the model itself is checked against OpenCV + NumPy and
onnxruntime."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time

import numpy as np
import onnxruntime as ort
import pytest

ray = pytest.importorskip("ray")
httpx = pytest.importorskip("httpx")
from ray import serve  # noqa: E402

import gdp  # noqa: E402
import gdp.ray  # noqa: E402
from gdp.serving import codec  # noqa: E402
from gdp.serving.server import APP_NAME, init_ray, run  # noqa: E402
from tests.serving import helpers  # noqa: E402

REPLICAS = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children() -> list[int]:
    """This process's live child processes."""
    me, found = str(os.getpid()), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me and fields[0] != "Z":
            found.append(int(entry))
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(base url, saved model path, the model in this process); Ray and Serve shut down after,
    with no process left behind."""
    folder = tmp_path_factory.mktemp("serve")
    path = folder / "preprocess.onnx"
    # "never": the replicas serve every size from the shape-generic kernels (no background
    # compiles of hot shapes while the tests load the two cores).
    model = gdp.compile(helpers.preprocess_graph(), target="cpu", specialize="never")
    model.save(path)
    before = set(children())
    # From a new thread (gdp.serving.server.init_ray): earlier test modules ran gdp's kernels
    # in this process, and a fork from their thread hangs (docs/serving.md, the fork caveat).
    init_ray(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="warning",
    )
    port = free_port()
    try:
        # 0.25 CPU a replica: Ray Data's read tasks and actor get the rest of the two.
        run(path, port=port, replicas=REPLICAS, replica_cpus=0.25, block=False)
        yield f"http://127.0.0.1:{port}", path, model
    finally:
        serve.shutdown()
        ray.shutdown()
        deadline = time.monotonic() + 30
        while set(children()) - before and time.monotonic() < deadline:
            time.sleep(0.2)
        left = set(children()) - before
        assert not left, f"Ray left processes behind: {sorted(left)}"


@pytest.fixture(scope="module")
def photos():
    return helpers.photos()


@pytest.fixture(scope="module")
def load200(photos):
    """The 200 requests of the load tests and their images (encoded once for the module)."""
    return good_requests(photos, 200)


def post_all(
    base: str, requests: list[dict], clients: int, retry: bool = False, done: list | None = None
):
    """Send `requests` ({"content", "headers"}) from `clients` concurrent HTTP clients; return
    [(index, response, attempts)] in request order (also appended to `done` as they come).
    With `retry`, a 5xx or a broken connection is sent again (what a client behind a load
    balancer does)."""
    done = [] if done is None else done

    async def main():
        queue: asyncio.Queue = asyncio.Queue()
        for n, req in enumerate(requests):
            queue.put_nowait((n, req))

        async def client():
            async with httpx.AsyncClient(base_url=base, timeout=60) as http:
                while not queue.empty():
                    n, req = queue.get_nowait()
                    attempts = 0
                    while True:
                        attempts += 1
                        try:
                            response = await http.request(
                                req.get("method", "POST"),
                                req.get("path", "/"),
                                content=req.get("content"),
                                headers=req.get("headers", {}),
                            )
                        except httpx.TransportError:
                            if retry and attempts < 20:
                                await asyncio.sleep(0.2)
                                continue
                            raise
                        if retry and response.status_code >= 500 and attempts < 20:
                            await asyncio.sleep(0.2)
                            continue
                        break
                    done.append((n, response, attempts))

        await asyncio.gather(*(client() for _ in range(clients)))
        return sorted(done, key=lambda d: d[0])

    return asyncio.run(main())


def good_requests(photos, count: int):
    """`count` requests cycling through the five photos in JPEG, PNG, WebP and .npy, every
    fourth asking for JSON; with each request's own expected image (what the server must
    decode it to). Each photo is encoded once per format."""
    formats = [".jpg", ".png", ".webp", ".npy"]
    bodies: dict[tuple[int, str], tuple[bytes, np.ndarray]] = {}
    requests, images = [], []
    for n in range(count):
        key = (n % len(photos), formats[(n // len(photos)) % len(formats)])
        if key not in bodies:
            rgb = photos[key[0]]
            if key[1] == ".npy":
                bodies[key] = (codec.npy_bytes(rgb), rgb)
            else:
                body = helpers.encode(rgb, key[1])
                bodies[key] = (body, helpers.decode(body))
        body, image = bodies[key]
        headers = {"accept": codec.JSON_TYPE} if n % 4 == 3 else {}
        requests.append({"content": body, "headers": headers})
        images.append(image)
    return requests, images


def check_response(response, image, model, expected=None):
    """The response holds model(image) (computed once per distinct image in `expected`)."""
    assert response.status_code == 200, response.text
    got = codec.decode_outputs(response.content, response.headers["content-type"], ["tensor"])
    if expected is None:
        want = model(image)
    else:
        if id(image) not in expected:
            expected[id(image)] = model(image)
        want = expected[id(image)]
    np.testing.assert_allclose(got["tensor"], want, rtol=0, atol=1e-6)


def test_the_model_matches_opencv_and_onnxruntime(server, photos):
    _, path, model = server
    session = ort.InferenceSession(
        helpers.preprocess_graph().SerializeToString(), providers=["CPUExecutionProvider"]
    )
    loaded = gdp.load(path)
    for rgb in photos:
        got = model(rgb)
        assert got.shape == (3, 224, 224) and got.dtype == np.float32
        np.testing.assert_allclose(got, helpers.reference(rgb), atol=helpers.REFERENCE_ATOL)
        # onnxruntime's and gdp's bilinear weights round differently: up to 1.3e-4 here, 0.008
        # grey levels once /255 and /std are undone (as OpenCV's).
        ours = session.run(None, {"image": rgb})[0]
        np.testing.assert_allclose(got, ours, atol=helpers.REFERENCE_ATOL)
        np.testing.assert_array_equal(loaded(rgb), got)


def test_healthz_and_metadata(server):
    base, _, _ = server
    with httpx.Client(base_url=base, timeout=30) as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        meta = http.get("/metadata").json()
        assert meta["inputs"] == [{"name": "image", "dtype": "uint8", "shape": [None, None, 3]}]
        assert meta["outputs"] == [{"name": "tensor", "dtype": "float32", "shape": [3, 224, 224]}]
        assert (meta["target"], meta["precision"]) == ("cpu", "fp32")
        assert meta["max_pixels"] == codec.DEFAULT_MAX_PIXELS
        wrong = http.post("/metadata")
        assert wrong.status_code == 405 and "expected GET" in wrong.json()["error"]


def test_200_requests_from_16_clients(server, load200):
    base, _, model = server
    requests, images = load200
    t0 = time.perf_counter()
    done = post_all(base, requests, clients=16)
    print(f"200 requests: {time.perf_counter() - t0:.2f} s")
    assert [n for n, _, _ in done] == list(range(200))
    expected: dict = {}
    for n, response, _ in done:
        check_response(response, images[n], model, expected)
    sizes = [int(r.headers["x-gdp-batch-size"]) for _, r, _ in done]
    assert max(sizes) > 1, "16 concurrent clients never shared a batch"
    assert max(sizes) <= 8


def bad_requests(photos):
    """(request, expected status, words its error must hold)."""
    jpeg = helpers.encode(photos[1])
    bomb = helpers.encode(photos[0], ".png")
    bomb = bomb[:16] + (100_000).to_bytes(4, "big") * 2 + bomb[24:]
    form, form_type = codec.encode_multipart({"picture": jpeg})
    return [
        ({"content": b"just some text"}, 415, ["not an image", "text starting"]),
        ({"content": jpeg[: len(jpeg) // 2]}, 400, ["truncated JPEG"]),
        ({"content": bomb}, 413, ["100000x100000", "limit of 50000000"]),
        (
            {"content": form, "headers": {"content-type": form_type}},
            422,
            ["unknown input 'picture'", "['image']"],
        ),
        (
            {"content": codec.npy_bytes(photos[2].astype(np.float32))},
            422,
            ["expected dtype uint8", "float32"],
        ),
        ({"content": codec.npy_bytes(photos[2][:, :, :2].copy())}, 422, ["expected shape"]),
        ({"content": b"/etc/passwd"}, 415, ["not an image", "'/etc/passwd'"]),
        ({"method": "GET", "path": "/nope"}, 404, ["no route '/nope'"]),
        ({"method": "GET", "path": "/"}, 405, ["expected POST"]),
    ]


def test_bad_requests_get_4xx_and_the_good_ones_around_them_succeed(server, photos):
    base, _, model = server
    bad = bad_requests(photos)
    good, images = good_requests(photos, 3 * len(bad))
    requests, expect = [], []
    for n, (req, status, words) in enumerate(bad):  # good, bad, good, good, bad, ...
        for k in range(3):
            requests.append(good[3 * n + k])
            expect.append(("good", images[3 * n + k]))
            if k == 0:
                requests.append(req)
                expect.append((status, words))
    done = post_all(base, requests, clients=8)
    for (n, response, _), want in zip(done, expect, strict=True):
        if want[0] == "good":
            check_response(response, want[1], model)
            continue
        status, words = want
        assert response.status_code == status, (n, response.status_code, response.text)
        error = response.json()
        assert error["status"] == status
        for word in words:
            assert word in error["error"], (word, error["error"])
    # the replicas lived through it
    with httpx.Client(base_url=base, timeout=30) as http:
        check_response(http.post("/", content=good[0]["content"]), images[0], model)


def test_a_deployment_handle_serves_other_deployments(server, photos):
    _, _, model = server
    handle = serve.get_app_handle(APP_NAME)
    rgb = photos[3]
    got = handle.preprocess.remote(rgb).result(timeout_s=60)
    assert set(got) == {"tensor"}
    np.testing.assert_allclose(got["tensor"], model(rgb), rtol=0, atol=1e-6)
    by_name = handle.preprocess.remote({"image": helpers.encode(rgb, ".png")}).result(timeout_s=60)
    np.testing.assert_allclose(by_name["tensor"], model(rgb), rtol=0, atol=1e-6)
    with pytest.raises(gdp.InputError, match="expected dtype uint8, got float64"):
        handle.preprocess.remote(rgb.astype(np.float64)).result(timeout_s=60)


def test_ray_data_over_64_images_equals_a_loop_over_the_model(server, photos, tmp_path):
    import cv2

    _, path, model = server
    want = {}
    for n in range(64):
        rgb = photos[n % 5]
        rgb = np.ascontiguousarray(np.rot90(rgb, n // 5 % 4)) if n >= 5 else rgb
        rgb = np.ascontiguousarray(rgb[:, ::-1]) if n % 3 == 1 else rgb
        file = tmp_path / f"{n:02d}.png"
        assert cv2.imwrite(str(file), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
        want[str(file)] = model(rgb)
    ds = ray.data.read_images(str(tmp_path), include_paths=True, mode="RGB")
    rows = gdp.ray.map_batches(ds, path, batch_size=16, concurrency=1, num_cpus=0.5).take_all()
    assert len(rows) == 64
    assert {len({r["tensor"].shape for r in rows})} == {1}
    for row in rows:
        assert set(row) == {"path", "tensor"}
        np.testing.assert_array_equal(row["tensor"], want[row["path"]])


def replicas() -> set[str]:
    """The names of the Preprocess replica actors alive now."""
    return {
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith("SERVE_REPLICA::") and "Preprocess" in a["name"]
    }


def running_replicas() -> int:
    status = serve.status().applications[APP_NAME].deployments["Preprocess"]
    return status.replica_states.get("RUNNING", 0)


@pytest.mark.slow
def test_a_killed_replica_is_replaced_and_no_request_is_lost(server, load200):
    """ray.kill on one replica while 16 clients send 200 requests: the requests that got a 200
    are all correct, the others (in flight on the dead replica) succeed when the client sends
    them again, and Serve starts a new replica in its place."""
    base, _, model = server
    before = replicas()
    assert len(before) == REPLICAS
    requests, images = load200
    progress: list = []
    result: dict = {}
    load = threading.Thread(
        target=lambda: result.update(done=post_all(base, requests, 16, True, progress))
    )
    load.start()
    deadline = time.monotonic() + 120
    while len(progress) < 40 and load.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    victim = sorted(before)[0]
    ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
    load.join(timeout=300)
    assert not load.is_alive()
    done = result["done"]
    assert [n for n, _, _ in done] == list(range(200)), "a request was lost"
    expected: dict = {}
    for n, response, _ in done:
        check_response(response, images[n], model, expected)
    retried = sum(1 for _, _, attempts in done if attempts > 1)
    print(f"kill test: {retried} of 200 requests were sent again")
    while time.monotonic() < deadline and not (
        running_replicas() == REPLICAS and victim not in replicas() and len(replicas()) == 2
    ):
        time.sleep(0.5)
    now = replicas()
    assert victim not in now and len(now) == REPLICAS, (before, now)
    assert now - before, "no new replica replaced the killed one"
    with httpx.Client(base_url=base, timeout=30) as http:
        for n in range(4):  # both replicas answer, the new one included
            check_response(http.post("/", content=requests[n]["content"]), images[n], model)
