"""cv2.dnn's input preprocessing: blobFromImage and blobFromImages (resize or resize-and-crop,
BGR<->RGB, mean subtraction, scaling, HWC -> NCHW) as one compiled program."""

from __future__ import annotations

import cv2 as _cv2
import numpy as np

from gdp.cv2 import common, engine, geometry

ops_geometry = common.LazyModule("gdp.ops.geometry")
rt_resize = common.LazyModule("gdp.runtime.resize")


def _cover(w: int, h: int, size) -> tuple[float, int, int, int, int]:
    """blobFromImage's crop: (factor, resized width, resized height, left, top) of the resize
    that covers `size` keeping the aspect ratio, and of the centre cut out of it."""
    factor = float(np.float32(max(size[0] / np.float32(w), size[1] / np.float32(h))))
    rw, rh = int(round(w * factor)), int(round(h * factor))
    return factor, rw, rh, int(0.5 * (rw - size[0])), int(0.5 * (rh - size[1]))


def _blob(*images, size, crop, swap_rb, float_out, ipp=False, mean=None, scale=None):
    """The blob of `images`; `mean` (four values) and `scale` (for a float blob) are numbers
    or, in a compiled program, float64 scalar tensors given at run time; `ipp`: resized as
    OpenCV's Intel IPP resize (gdp.cv2.geometry.ipp_resizes)."""
    import tensorflow as tf

    planes = []
    for image in images:
        h, w = int(image.shape[0]), int(image.shape[1])
        x = image
        if size is not None and (w, h) != size:
            if crop:  # cover the size keeping the aspect ratio, then cut the centre out
                factor, rw, rh, left, top = _cover(w, h, size)
                x = ops_geometry.resize(
                    x, rw, rh, 1.0 / factor, 1.0 / factor, ops_geometry.INTER_LINEAR, ipp
                )
                x = x[top : top + size[1], left : left + size[0]]
            else:
                x = ops_geometry.resize(
                    x, size[0], size[1], w / size[0], h / size[1], ops_geometry.INTER_LINEAR, ipp
                )
        if x.shape.rank == 2:
            x = x[:, :, None]
        if float_out:
            # float32 (x - mean) * scale, as OpenCV: subtracting 0 and scaling by 1 change
            # nothing, so one program serves every mean and scale.
            x = tf.cast(x, tf.float32)
            channels = int(x.shape[2])
            m = tf.cast(tf.convert_to_tensor(mean, tf.float64)[:channels], tf.float32)
            x = (x - m) * tf.cast(tf.cast(scale, tf.float64), tf.float32)
        if swap_rb:  # BGR(A) -> RGB(A); no empty slice of a 3-channel image (a 0-extent loop)
            rgb = x[:, :, 2::-1]
            x = tf.concat([rgb, x[:, :, 3:]], axis=2) if int(x.shape[2]) > 3 else rgb
        planes.append(tf.transpose(x, [2, 0, 1]))
    return tf.stack(planes)


def _blob_call(func, images, scalefactor, size, mean, swapRB, crop, ddepth):
    images = [common.image(func, im, "image") for im in images]
    if not images:
        raise common.error(func, "!images_.empty()")
    first = images[0]
    if any(im.shape != first.shape or im.dtype != first.dtype for im in images):
        raise common.NotAccelerated("images of different shapes or dtypes are not accelerated")
    if ddepth not in (_cv2.CV_32F, _cv2.CV_8U):
        raise common.error(func, "ddepth == CV_32F || ddepth == CV_8U")
    mean4 = [*np.ravel(mean if mean is not None else 0.0).astype(np.float64).tolist(), 0, 0, 0, 0]
    if ddepth == _cv2.CV_8U and (scalefactor != 1.0 or any(mean4[:4])):
        raise common.error(
            func, "Scaling and mean subtraction is not supported for CV_8U blob depth"
        )
    if swapRB:  # OpenCV swaps the mean with the channels: it is given in the output's order
        mean4[0], mean4[2] = mean4[2], mean4[0]
    channels = 1 if first.ndim == 2 else first.shape[2]
    if (
        common.dtype_of(first) not in (np.uint8, np.float32)
        or channels not in (1, 3, 4)  # OpenCV refuses 2 channels itself
        or (swapRB and channels < 3)
    ):
        raise common.NotAccelerated(
            "only uint8/float32 images with 1, 3 or 4 channels are accelerated"
        )
    wanted = None if size is None or tuple(size) in ((0, 0), ()) else (int(size[0]), int(size[1]))
    float_out = ddepth == _cv2.CV_32F
    ipp = geometry.ipp_resizes(geometry.INTER_LINEAR, common.dtype_of(first), channels)
    params = dict(size=wanted, crop=bool(crop), swap_rb=bool(swapRB), float_out=float_out, ipp=ipp)
    # The mean and the scale are run-time inputs; the output size, crop and channel order are
    # structural. So is the source size in the program below, where the resize's tables are
    # constants; `_any_size` gives the program for every source size, its tables run-time
    # inputs, which serves a size until it is called often enough to get its own.
    values = {"mean": tuple(mean4[:4]), "scale": float(scalefactor)} if float_out else {}
    if engine.is_graph_call(*images):
        return _blob(*images, **params, **values)
    if float_out and first.dtype == np.uint8 and first.shape[1] >= 2:
        width, height = wanted or (first.shape[1], first.shape[0])
        out_bytes = len(images) * channels * height * width * 4
        if common.on_host(*images, out_bytes=out_bytes):
            return _blob_on_host(images, wanted, bool(crop), bool(swapRB), values)

    def generic():
        tables = _tables(first, wanted, bool(crop), ipp)
        if tables is not None:
            return _any_size(func, images, params, values, *tables)
        program = engine.program(f"dnn.{func}", _blob, images, params, values=values)
        return engine.execute(program, images, values=values)

    sized = engine.sized_program(
        f"dnn.{func}", _blob, images, params, values=values, generic=generic
    )
    return generic() if sized is None else engine.execute(sized, images, values=values)


def _blob_on_host(images, size, crop: bool, swap_rb: bool, values: dict) -> np.ndarray:
    """The float32 blob of uint8 images by gdp.runtime.resize's kernel (OpenCV's LINEAR resize
    bit for bit, then (level - mean) * scale into the planes), for every size."""
    h, w = images[0].shape[:2]
    channels = 1 if images[0].ndim == 2 else images[0].shape[2]
    width, height = size or (w, h)
    scale_x, scale_y, cut = 1.0 / (width / w), 1.0 / (height / h), None  # as cv::resize
    if crop and (width, height) != (w, h):
        factor, rw, rh, left, top = _cover(w, h, size)
        scale_x = scale_y = 1.0 / factor
        cut = (rw, rh, left, top)
    plan = geometry.linear_plan(h, w, channels, width, height, scale_x, scale_y, cut)
    out = np.empty((len(images), channels, height, width), np.float32)
    for image, planes in zip(images, out, strict=True):
        rt_resize.blob(image, plan, swap_rb, values["mean"], values["scale"], out=planes)
    return out


def _tables(image: np.ndarray, size, crop: bool, ipp: bool):
    """(structure, tables) of the resize inside a blob of `image`'s size, the crop cut out of
    the tables; None where the blob has no resize, or a crop with no pass to cut."""
    h, w = image.shape[:2]
    channels = 1 if image.ndim == 2 else image.shape[2]
    if size is None or (w, h) == size:
        return None
    if crop:
        factor, rw, rh, left, top = _cover(w, h, size)
        structure, tables = geometry.resize_plan(
            h,
            w,
            channels,
            rw,
            rh,
            1.0 / factor,
            1.0 / factor,
            geometry.INTER_LINEAR,
            image.dtype.name,
            ipp,
        )
        if len(structure["passes"]) < 2:
            return None
        cut = {
            "pass0": slice(top, top + size[1]),
            "pass1": slice(left * channels, (left + size[0]) * channels),
        }
        return structure, {n: np.ascontiguousarray(t[cut[n]]) for n, t in tables.items()}
    return geometry.resize_plan(
        h,
        w,
        channels,
        size[0],
        size[1],
        w / size[0],
        h / size[1],
        geometry.INTER_LINEAR,
        image.dtype.name,
        ipp,
    )


def _any_size(func, images, params, values, structure, tables):
    names = tuple(sorted(tables))
    flats = [im.reshape(im.shape[0], -1) for im in images]
    channels = 1 if images[0].ndim == 2 else images[0].shape[2]
    arrays = [*flats, *(tables[n] for n in names)]
    program = engine.program(
        f"dnn.{func}.any_size",
        _blob_by_plan,
        arrays,
        dict(params, structure=structure, names=names, channels=channels, count=len(images)),
        values=values,
        free=len(images),
        specialize="never",  # the per-size program is the specialisation
    )
    return engine.execute(program, arrays, values=values)


def _blob_by_plan(
    *arrays,
    structure,
    names,
    channels,
    count,
    size,
    crop,
    swap_rb,
    float_out,
    ipp,
    mean=None,
    scale=None,
):
    """_blob of (H, W*channels) images of any size, resized by the plan's tables (run-time
    inputs: the crop is cut out of them; `ipp` is in them)."""
    import tensorflow as tf

    tables = dict(zip(names, arrays[count:], strict=True))
    resized = [
        tf.reshape(ops_geometry.resize_by_plan(x, structure, tables), [size[1], size[0], channels])
        for x in arrays[:count]
    ]
    return _blob(
        *resized,
        size=None,
        crop=False,
        swap_rb=swap_rb,
        float_out=float_out,
        mean=mean,
        scale=scale,
    )


@common.accelerate("dnn.blobFromImage")
def blobFromImage(
    image,
    scalefactor=1.0,
    size=None,
    mean=None,
    swapRB=False,
    crop=False,
    ddepth=_cv2.CV_32F,
):
    return _blob_call("blobFromImage", [image], scalefactor, size, mean, swapRB, crop, ddepth)


@common.accelerate("dnn.blobFromImages")
def blobFromImages(
    images,
    scalefactor=1.0,
    size=None,
    mean=None,
    swapRB=False,
    crop=False,
    ddepth=_cv2.CV_32F,
):
    return _blob_call("blobFromImages", list(images), scalefactor, size, mean, swapRB, crop, ddepth)
