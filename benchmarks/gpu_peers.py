"""GPU peers of gdp's workloads (samples/*.py): each computes what the workload's NumPy/OpenCV
peer computes, on CUDA tensors, with torch, torchvision.transforms.v2 or kornia.

    PEERS[workload][label](**inputs) -> {output name: tensor}

The inputs are the workload's `inputs()` arrays moved to the GPU unchanged (dtype, HWC/NHWC
layout); the outputs are named and laid out as the workload's `peer` returns them. Labels name the
library; a library that is not installed has no entries. The pairs in NOT_COMPARABLE compute a
different result (time them, do not check them). SERVER[label](bgr) is the server case: uint8 BGR
HWC -> 224x224 bilinear -> RGB -> /255 -> ImageNet mean/std -> CHW float16.

cuDNN runs float32 convolutions in TF32 by default (Ampere and later): the conv-based peers
(gaussian, sharpness) then miss the workloads' float32 tolerances. Call exact_float32() first.

CV-CUDA has no peer: its cu13 wheel is ~122 MiB (one 187 MB library), too big to carry.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable

import torch
import torch.nn.functional as tnf

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
SIZE = 224  # dnn_resize, SERVER
LB_SIZE, LB_H, LB_W, LB_PAD = 640, 360, 640, 114.0  # dnn_letterbox
LB_TOP = (LB_SIZE - LB_H) // 2
TONE = (2.51, 0.03, 2.43, 0.59, 0.14)
KSIZE = 5
# OpenCV's sigma for ksize 5 when sigma is 0 (1.1); but cv2.getGaussianKernel(5, 0) does not use
# it: for ksize <= 7 and sigma <= 0 it takes a fixed table, the binomial kernel below.
SIGMA = 0.3 * ((KSIZE - 1) * 0.5 - 1) + 0.8
BINOMIAL5 = (1 / 16, 4 / 16, 6 / 16, 4 / 16, 1 / 16)
LAPLACIAN = (0.0, 1.0, 0.0, 1.0, -4.0, 1.0, 0.0, 1.0, 0.0)  # cv2.Laplacian, ksize=1
GRAY = (0.299, 0.587, 0.114)  # cv2.COLOR_RGB2GRAY
CANNY_LOW, CANNY_HIGH = 50.0, 150.0

NOT_COMPARABLE = {("canny", "kornia"), ("gaussian", "torchvision.v2")}


def exact_float32() -> None:
    """float32 convolutions and matmuls in float32 (IEEE), not TF32."""
    try:
        torch.backends.cudnn.conv.fp32_precision = "ieee"
        torch.backends.cuda.matmul.fp32_precision = "ieee"
    except AttributeError:  # torch < 2.9
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False


@functools.cache
def _tvf():
    import torchvision.transforms.v2.functional as tvf

    return tvf


@functools.cache
def _kornia():
    import kornia

    return kornia


@functools.cache
def _const(values: tuple, shape: tuple, device: torch.device) -> torch.Tensor:
    """A float32 constant on the device, made once (no host-to-device copy per call)."""
    return torch.tensor(values, dtype=torch.float32, device=device).reshape(shape)


def _nchw(hwc: torch.Tensor) -> torch.Tensor:
    return hwc.permute(2, 0, 1)[None]  # a view: NCHW in channels_last memory


def _hwc(nchw: torch.Tensor) -> torch.Tensor:
    return nchw[0].permute(1, 2, 0).contiguous()


def _gray(rgb: torch.Tensor) -> torch.Tensor:
    """uint8 RGB HWC -> float32 gray 1x1xHxW, cv2.cvtColor's weights."""
    x = rgb.float()
    return (x[..., 0] * GRAY[0] + x[..., 1] * GRAY[1] + x[..., 2] * GRAY[2])[None, None]


# tone


def tone_torch(rgb):
    a, b, c, d, e = TONE  # the peer's expression, float32 elementwise
    return {"mapped": rgb * (a * rgb + b) / (rgb * (c * rgb + d) + e)}


# gaussian: cv2.GaussianBlur(rgb, (5, 5), 0), BORDER_REFLECT_101 (= torch's "reflect")


def gaussian_torch(rgb):
    # OpenCV's kernel (binomial), separable depthwise conv2d
    k = _const(BINOMIAL5, (1, 1, 1, KSIZE), rgb.device).expand(3, 1, 1, KSIZE)
    x = tnf.pad(_nchw(rgb), (2, 2, 2, 2), mode="reflect")
    x = tnf.conv2d(tnf.conv2d(x, k, groups=3), k.transpose(2, 3), groups=3)
    return {"blurred": _hwc(x)}


def gaussian_torchvision(rgb):
    # a true Gaussian of sigma 1.1, not OpenCV's binomial table: differs by up to ~1e-2
    x = _tvf().gaussian_blur(rgb.permute(2, 0, 1), [KSIZE, KSIZE], [SIGMA, SIGMA])
    return {"blurred": x.permute(1, 2, 0).contiguous()}


def gaussian_kornia(rgb):
    # OpenCV's kernel through filter2d_separable (gaussian_blur2d would take a sigma)
    k = _const(BINOMIAL5, (1, KSIZE), rgb.device)
    x = _kornia().filters.filter2d_separable(_nchw(rgb), k, k, border_type="reflect")
    return {"blurred": _hwc(x)}


# sharpness: variance of cv2.Laplacian(gray, ksize=1), BORDER_REFLECT_101


def sharpness_torch(rgb):
    # float32 variance (Welford) where OpenCV's meanStdDev sums in float64
    k = _const(LAPLACIAN, (1, 1, 3, 3), rgb.device)
    lap = tnf.conv2d(tnf.pad(_gray(rgb), (1, 1, 1, 1), mode="reflect"), k)
    return {"sharpness": lap.var(correction=0)}


def sharpness_kornia(rgb):
    # kornia.filters.laplacian's 3x3 kernel is [[1,1,1],[1,-8,1],[1,1,1]]: filter2d with OpenCV's
    kornia = _kornia()
    gray = kornia.color.rgb_to_grayscale(_nchw(rgb).float())
    k = _const(LAPLACIAN, (1, 3, 3), rgb.device)
    lap = kornia.filters.filter2d(gray, k, border_type="reflect")
    return {"sharpness": lap.var(correction=0)}


# canny


def canny_kornia(rgb):
    # timing only: true Gaussian (sigma 1.1) on float gray, L2 magnitude (OpenCV: L1 on uint8),
    # its own NMS; hysteresis loops until nothing changes, one host sync per round
    _, edges = _kornia().filters.canny(_nchw(rgb), CANNY_LOW, CANNY_HIGH, KSIZE, (SIGMA, SIGMA))
    return {"edges": edges[0, 0].to(torch.uint8) * 255}


# mean_std


def mean_std_torch(images):
    x = images.reshape(-1, 3)  # float64 Welford, where the peer sums in float64
    std, mean = torch.std_mean(x.double(), dim=0, correction=0)
    low, high = torch.aminmax(x, dim=0)
    return {"mean": mean, "std": std, "min": low, "max": high}


# knn


def knn_torch(features, query):
    diff = features - query
    distances = (diff * diff).sum(1)
    index = torch.argmin(distances)
    return {"index": index, "distance": distances[index]}


# dnn_resize: bilinear on float (half-pixel centres, no antialias), as the peer's cv2.resize


def dnn_resize_torch(bgr):
    x = tnf.interpolate(_nchw(bgr).float(), (SIZE, SIZE), mode="bilinear", align_corners=False)
    mean, std = _const(MEAN, (3, 1, 1), bgr.device), _const(STD, (3, 1, 1), bgr.device)
    return {"tensor": ((x[0].flip(0) / 255.0 - mean) / std).contiguous()}


def dnn_resize_torchvision(bgr):
    tvf = _tvf()
    x = tvf.resize(bgr.permute(2, 0, 1).float(), [SIZE, SIZE], antialias=False)
    return {"tensor": tvf.normalize(x.flip(0) / 255.0, MEAN, STD).contiguous()}


def dnn_resize_kornia(bgr):
    kornia = _kornia()
    x = kornia.geometry.transform.resize(
        _nchw(bgr).float(), (SIZE, SIZE), "bilinear", align_corners=False, antialias=False
    )
    mean, std = _const(MEAN, (3,), bgr.device), _const(STD, (3,), bgr.device)
    return {"tensor": kornia.enhance.normalize(x.flip(1) / 255.0, mean, std)[0].contiguous()}


# dnn_letterbox: resize to 640x360 on float, 114 bars above and below, RGB, /255, CHW


def dnn_letterbox_torch(bgr):
    x = tnf.interpolate(_nchw(bgr).float(), (LB_H, LB_W), mode="bilinear", align_corners=False)
    bars = (0, 0, LB_TOP, LB_SIZE - LB_H - LB_TOP)
    return {"tensor": tnf.pad(x[0].flip(0), bars, value=LB_PAD) / 255.0}


def dnn_letterbox_torchvision(bgr):
    tvf = _tvf()
    x = tvf.resize(bgr.permute(2, 0, 1).float(), [LB_H, LB_W], antialias=False)
    bars = [0, LB_TOP, 0, LB_SIZE - LB_H - LB_TOP]  # left, top, right, bottom
    return {"tensor": tvf.pad(x.flip(0), bars, fill=LB_PAD) / 255.0}


# the server case: CHW float16


def server_torch(bgr):
    return dnn_resize_torch(bgr)["tensor"].half()


def server_torchvision(bgr):
    # v2's usual Resize -> ToDtype -> Normalize: resizes the uint8 image (on CUDA: in float,
    # rounded back to uint8, as the OpenCV + NumPy server path does), so ~0.5 grey level off
    tvf = _tvf()
    x = tvf.resize(bgr.permute(2, 0, 1), [SIZE, SIZE], antialias=False)
    x = tvf.to_dtype(x.flip(0), torch.float32, scale=True)
    return tvf.normalize(x, MEAN, STD).half().contiguous()


def server_kornia(bgr):
    return dnn_resize_kornia(bgr)["tensor"].half()


def _installed(label: str) -> bool:
    module = {"torch": "torch", "torchvision.v2": "torchvision", "kornia": "kornia"}[label]
    return importlib.util.find_spec(module) is not None


def _keep(peers: dict[str, Callable]) -> dict[str, Callable]:
    return {label: fn for label, fn in peers.items() if _installed(label)}


PEERS: dict[str, dict[str, Callable]] = {
    name: _keep(peers)
    for name, peers in {
        "tone": {"torch": tone_torch},
        "gaussian": {
            "torch": gaussian_torch,
            "torchvision.v2": gaussian_torchvision,
            "kornia": gaussian_kornia,
        },
        "sharpness": {"torch": sharpness_torch, "kornia": sharpness_kornia},
        "canny": {"kornia": canny_kornia},
        "mean_std": {"torch": mean_std_torch},
        "knn": {"torch": knn_torch},
        "dnn_resize": {
            "torch": dnn_resize_torch,
            "torchvision.v2": dnn_resize_torchvision,
            "kornia": dnn_resize_kornia,
        },
        "dnn_letterbox": {
            "torch": dnn_letterbox_torch,
            "torchvision.v2": dnn_letterbox_torchvision,
        },
    }.items()
}

SERVER: dict[str, Callable] = _keep(
    {"torch": server_torch, "torchvision.v2": server_torchvision, "kornia": server_kornia}
)
