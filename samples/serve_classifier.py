"""An image classifier served with Ray Serve: gdp's preprocessing (a tf.function compiled for
the cpu, saved, loaded by each replica without TensorFlow) in front of an ONNX classifier run
by onnxruntime, as two deployments that scale apart. JPEG in, class id out.

    .venv/bin/python samples/serve_classifier.py [--port 8000] [--keep-serving]

The classifier is a small convolutional network this file builds with onnx itself (seeded
weights, 10 classes: the point is the serving path, not the accuracy); nothing is downloaded.
The sample posts real photos (scikit-image's) and checks every class id and logit against the
same steps run directly in this process: OpenCV's decode, `model(x)`, onnxruntime.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import cv2
import numpy as np
import onnx
import onnxruntime as ort
import skimage.data
from onnx import TensorProto, helper

import gdp

SIZE = 224
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
CLASSES = 10


def compile_preprocess():
    """uint8 RGB HxWx3 of any size -> 224x224 bilinear -> ImageNet mean/std -> CHW float32."""
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="image")])
    def preprocess(image):
        x = tf.image.resize(tf.cast(image, tf.float32)[None], (SIZE, SIZE), antialias=False)[0]
        return {"tensor": tf.transpose((x / 255.0 - MEAN) / STD, [2, 0, 1])}

    return gdp.compile(preprocess, target="cpu")


def classifier_onnx() -> bytes:
    """(N, 3, 224, 224) float32 -> conv 3x3/2 (16) -> relu -> global average pool -> linear
    (10) -> logits (N, 10); seeded weights."""
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.2, (16, 3, 3, 3)).astype(np.float32)
    fc = rng.normal(0, 0.5, (CLASSES, 16)).astype(np.float32)
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 3, SIZE, SIZE])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", CLASSES])]
    consts = [
        helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel().tolist()),
        helper.make_tensor("b", TensorProto.FLOAT, [16], np.linspace(-0.1, 0.1, 16).tolist()),
        helper.make_tensor("fc", TensorProto.FLOAT, fc.shape, fc.ravel().tolist()),
        helper.make_tensor("fcb", TensorProto.FLOAT, [CLASSES], [0.0] * CLASSES),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "w", "b"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(nodes, "classifier", inputs, outputs, consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def build_app(preprocess_path, classifier: bytes, preprocess_replicas: int = 1):
    """The Serve application: Classifier (HTTP ingress, onnxruntime) calling gdp's Preprocess
    through a DeploymentHandle."""
    from ray import serve
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    from gdp.serving import Preprocess, RequestError

    @serve.deployment(ray_actor_options={"num_cpus": 0.5}, max_ongoing_requests=32)
    class Classifier:
        def __init__(self, preprocess, model: bytes) -> None:
            self.preprocess = preprocess
            self.session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])

        async def __call__(self, request: Request) -> JSONResponse:
            body = await request.body()
            try:
                tensors = await self.preprocess.preprocess.remote(body)
            except RequestError as err:  # a bad image: the preprocess stage's 4xx, passed on
                cause = getattr(err, "cause", err)  # Ray wraps it in a RayTaskError
                status = getattr(cause, "status", 400)
                return JSONResponse({"error": str(cause)}, status_code=status)
            logits = self.session.run(None, {"input": tensors["tensor"][None]})[0][0]
            return JSONResponse({"class_id": int(np.argmax(logits)), "logits": logits.tolist()})

    preprocess = Preprocess.options(
        num_replicas=preprocess_replicas, ray_actor_options={"num_cpus": 0.5}
    ).bind(str(preprocess_path))
    return Classifier.bind(preprocess, classifier)


def photos() -> list[bytes]:
    """Five scikit-image photos at five sizes, as JPEG."""
    out = []
    for name, (h, w) in zip(
        ["astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry"],
        [(97, 131), (240, 320), (480, 640), (600, 400), (720, 1280)],
        strict=True,
    ):
        rgb = cv2.resize(getattr(skimage.data, name)(), (w, h), interpolation=cv2.INTER_AREA)
        ok, data = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
        assert ok
        out.append(data.tobytes())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--keep-serving", action="store_true", help="serve until Ctrl-C")
    args = parser.parse_args()

    import httpx
    import ray
    from ray import serve

    # Ray first: a process forked after gdp's kernels ran and went idle hangs in TVM's thread
    # pool reset (docs/serving.md), and ray.init forks its helper processes.
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        folder = Path(tempfile.mkdtemp(prefix="gdp-classifier-"))
        model = compile_preprocess()  # verified against TensorFlow by gdp.compile
        model.save(folder / "preprocess.onnx")
        classifier = classifier_onnx()
        session = ort.InferenceSession(classifier, providers=["CPUExecutionProvider"])
        serve.start(http_options={"host": "127.0.0.1", "port": args.port})
        serve.run(build_app(folder / "preprocess.onnx", classifier), route_prefix="/")
        url = f"http://127.0.0.1:{args.port}/"
        with httpx.Client(timeout=60) as http:
            for data in photos():
                answer = http.post(url, content=data).json()
                bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
                tensor = model(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
                logits = session.run(None, {"input": tensor[None]})[0][0]
                np.testing.assert_allclose(answer["logits"], logits, rtol=1e-5, atol=1e-5)
                assert answer["class_id"] == int(np.argmax(logits))
                print(f"{bgr.shape[1]}x{bgr.shape[0]} JPEG -> class {answer['class_id']}")
            bad = http.post(url, content=b"not a picture")
            print(f"a text body -> {bad.status_code}: {bad.json()['error']}")
            assert bad.status_code == 415
        print("every answer equals decode + model(x) + onnxruntime run here")
        if args.keep_serving:
            print(f"serving on {url} (POST a JPEG); Ctrl-C stops")
            try:
                while True:
                    input()
            except (KeyboardInterrupt, EOFError):
                pass
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
