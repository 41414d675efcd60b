"""Colour conversions as TF functions over HWC tensors, reproducing cv2.cvtColor.

The uint8 paths use OpenCV's own integer arithmetic (fixed-point weights, its division tables),
so they agree bit for bit; float32 paths use OpenCV's float weights (Lab: its interpolation
table). `bidx` is the index of the blue channel in the input (0 for BGR order, 2 for RGB
order). They import nothing of gdp.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from gdp.ops.color_tables import (
    CB_FIXED,
    CR_FIXED,
    HSV_SHIFT,
    LAB_BASE,
    LAB_SHIFT,
    LAB_SHIFT2,
    NV_CUB,
    NV_CUG,
    NV_CVG,
    NV_CVR,
    NV_CY,
    NV_SHIFT,
    Y_FIXED,
    YUV_SHIFT,
    lab_corner_table,
    lab_u8_tables,
)
from gdp.ops.image import GRAY_WEIGHTS_RGB, rgb_to_gray_u8


def _to_u8(x: tf.Tensor) -> tf.Tensor:
    """saturate_cast<uchar> of a float tensor: round half to even (cvRound), clamp, cast."""
    return tf.cast(tf.clip_by_value(tf.round(x), 0.0, 255.0), tf.uint8)


def _int_to_u8(x: tf.Tensor) -> tf.Tensor:
    return tf.cast(tf.clip_by_value(x, 0, 255), tf.uint8)


def _floor_div(x: tf.Tensor, shift: int, low: int) -> tf.Tensor:
    """floor(x / 2**shift) (OpenCV's arithmetic >>) for int32 x >= low, computed on a
    non-negative value as an unsigned shift. (ONNX shifts only unsigned types; and a floor
    division the compiler cannot prove non-negative becomes a division and two corrections that
    each copy x: HSV's program held its numerators three times.)"""
    k = (-low >> shift) + 1 if low < 0 else 0
    shifted = tf.bitwise.right_shift(tf.cast(x + (k << shift), tf.uint32), np.uint32(shift))
    return tf.cast(shifted, tf.int32) - k


def _rgb(image: tf.Tensor, bidx: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """The R, G, B planes (HW) of an HWC image whose blue channel is `bidx`."""
    return image[..., 2 - bidx], image[..., 1], image[..., bidx]


def _stack(first, second, third, bidx: int) -> tf.Tensor:
    """Stack (r, g, b) planes in the order whose blue channel is `bidx`."""
    planes = [first, second, third] if bidx == 2 else [third, second, first]
    return tf.stack(planes, axis=-1)


def _one(dtype: tf.DType):
    return 255 if dtype == tf.uint8 else 1.0


# --- channel shuffles ------------------------------------------------------------------------


def reorder(image: tf.Tensor, swap: bool, dcn: int) -> tf.Tensor:
    """BGR<->RGB (swap) and adding (alpha = max) or dropping the alpha channel (dcn 3 or 4)."""
    planes = [image[..., c] for c in range(3)]
    if swap:
        planes = planes[::-1]
    if dcn == 4:
        if image.shape[-1] == 4:
            planes.append(image[..., 3])
        else:
            planes.append(tf.fill(tf.shape(planes[0]), tf.constant(_one(image.dtype), image.dtype)))
    return tf.stack(planes, axis=-1)


def gray_to_color(image: tf.Tensor, dcn: int) -> tf.Tensor:
    """GRAY2BGR / GRAY2BGRA: HW or HW1 -> HW3 / HW4 (alpha = max)."""
    gray = image[..., 0] if image.shape.rank == 3 else image
    planes = [gray, gray, gray]
    if dcn == 4:
        planes.append(tf.fill(tf.shape(gray), tf.constant(_one(image.dtype), image.dtype)))
    return tf.stack(planes, axis=-1)


# --- gray ------------------------------------------------------------------------------------


def to_gray(image: tf.Tensor, bidx: int) -> tf.Tensor:
    """BGR2GRAY / RGB2GRAY (3 or 4 channels) -> HW, as OpenCV 5 (15-bit fixed point on uint8)."""
    r, g, b = _rgb(image, bidx)
    if image.dtype == tf.uint8:
        return tf.cast(rgb_to_gray_u8(tf.stack([r, g, b], axis=-1)), tf.uint8)
    wr, wg, wb = (np.float32(w) for w in GRAY_WEIGHTS_RGB)
    return b * wb + g * wg + r * wr


# --- YCrCb -----------------------------------------------------------------------------------


def to_ycrcb(image: tf.Tensor, bidx: int) -> tf.Tensor:
    """BGR2YCrCb / RGB2YCrCb -> HW3 (Y, Cr, Cb)."""
    r, g, b = _rgb(image, bidx)
    if image.dtype == tf.uint8:
        r, g, b = (tf.cast(c, tf.int32) for c in (r, g, b))
        half = 1 << (YUV_SHIFT - 1)
        scale = 1 << YUV_SHIFT
        y = (r * Y_FIXED[0] + g * Y_FIXED[1] + b * Y_FIXED[2] + half) // scale
        low = -255 * CR_FIXED
        cr = _floor_div((r - y) * CR_FIXED + (128 << YUV_SHIFT) + half, YUV_SHIFT, low)
        cb = _floor_div((b - y) * CB_FIXED + (128 << YUV_SHIFT) + half, YUV_SHIFT, low)
        return _int_to_u8(tf.stack([y, cr, cb], axis=-1))
    wr, wg, wb = (np.float32(w) for w in GRAY_WEIGHTS_RGB)
    y = b * wb + g * wg + r * wr
    cr = (r - y) * np.float32(0.713) + np.float32(0.5)
    cb = (b - y) * np.float32(0.564) + np.float32(0.5)
    return tf.stack([y, cr, cb], axis=-1)


# --- HSV -------------------------------------------------------------------------------------


def to_hsv(image: tf.Tensor, bidx: int) -> tf.Tensor:
    """BGR2HSV / RGB2HSV -> HW3 (H, S, V): uint8 with H in [0, 180) exactly as OpenCV's integer
    tables; float32 with H in degrees [0, 360), S and V in [0, 1]."""
    r, g, b = _rgb(image, bidx)
    if image.dtype == tf.uint8:
        r, g, b = (tf.cast(c, tf.int32) for c in (r, g, b))
        v = tf.maximum(tf.maximum(r, g), b)
        diff = v - tf.minimum(tf.minimum(r, g), b)
        half = 1 << (HSV_SHIFT - 1)
        s = _floor_div(diff * _hsv_divided(255 << HSV_SHIFT, v) + half, HSV_SHIFT, 0)
        h = tf.where(
            tf.equal(v, r), g - b, tf.where(tf.equal(v, g), b - r + 2 * diff, r - g + 4 * diff)
        )
        # 122880 = (180 << 12) / 6 exactly
        hdiv = _hsv_divided((180 << HSV_SHIFT) // 6, diff)
        h = _floor_div(h * hdiv + half, HSV_SHIFT, -(1 << 28))
        h = tf.where(h < 0, h + 180, h)
        return _int_to_u8(tf.stack([h, s, v], axis=-1))
    v = tf.maximum(tf.maximum(r, g), b)
    diff = v - tf.minimum(tf.minimum(r, g), b)
    eps = np.float32(np.finfo(np.float32).eps)
    s = diff / (tf.abs(v) + eps)
    k = np.float32(60.0) / (diff + eps)
    h = tf.where(
        tf.equal(v, r),
        (g - b) * k,
        tf.where(tf.equal(v, g), (b - r) * k + np.float32(120), (r - g) * k + np.float32(240)),
    )
    h = tf.where(h < 0, h + np.float32(360), h)
    return tf.stack([h, s, v], axis=-1)


def _hsv_divided(numerator: int, divisor: tf.Tensor) -> tf.Tensor:
    """OpenCV's HSV tables (gdp.ops.color_tables.hsv_tables: round(numerator / i), 0 at i = 0)
    at `divisor` (int32 in 0..255), as a float32 division and a round: equal to the tables at
    every i (no quotient is a tie), as gdp.runtime.color's kernel computes them. Gathered from
    the tables, the uint8 program's first call compiled for 40 s (the gathers' clamped indices,
    copied into each use, held TVM's simplifier)."""
    quotient = np.float32(numerator) / tf.cast(tf.maximum(divisor, 1), tf.float32)
    return tf.where(divisor > 0, tf.cast(tf.round(quotient), tf.int32), 0)


def from_hsv(image: tf.Tensor, bidx: int, simd_block: int = 0) -> tf.Tensor:
    """HSV2BGR / HSV2RGB (OpenCV's sector formula). uint8: H in [0, 180), computed in float32
    as OpenCV does, with 1 - s*h as a fused multiply-add (through float64, as OpenCV's build
    contracts it). OpenCV's vector loop truncates x*255 where its scalar loop rounds: columns
    below the last multiple of `simd_block` in a row truncate, the tail rounds (0: all round)."""
    h, s, v = image[..., 0], image[..., 1], image[..., 2]
    u8 = image.dtype == tf.uint8
    if u8:
        # float32 h*(6/180), s/255, v/255 as OpenCV rounds them, looked up rather than computed
        # so that the backend cannot contract 1 - s into a fused multiply-add
        levels = np.arange(256, dtype=np.float32)
        h = tf.gather(tf.constant(levels * np.float32(6.0 / 180.0)), tf.cast(h, tf.int32))
        unit = tf.constant(levels * np.float32(1.0 / 255.0))
        s = tf.gather(unit, tf.cast(s, tf.int32))
        v = tf.gather(unit, tf.cast(v, tf.int32))
    else:
        h = h * np.float32(6.0 / 360.0)
    pre = tf.floor(h)
    frac = h - pre
    sector = pre - tf.floor(pre * np.float32(1.0 / 6.0)) * np.float32(6.0)
    one = np.float32(1.0)
    s64, f64 = tf.cast(s, tf.float64), tf.cast(frac, tf.float64)
    t1 = v * (one - s)
    t2 = v * tf.cast(1.0 - s64 * f64, tf.float32)
    t3 = v * tf.cast(1.0 - s64 * tf.cast(one - frac, tf.float64), tf.float32)
    tab = [v, t1, t2, t3]
    # sector -> (b, g, r) indices into tab
    sector_data = [(1, 3, 0), (1, 0, 2), (3, 0, 1), (0, 2, 1), (0, 1, 3), (2, 1, 0)]

    def pick(c: int) -> tf.Tensor:
        out = tab[sector_data[5][c]]
        for k in range(4, -1, -1):
            out = tf.where(tf.equal(sector, np.float32(k)), tab[sector_data[k][c]], out)
        return out

    b, g, r = pick(0), pick(1), pick(2)
    if u8:
        width = image.shape[-2]
        vector = (width // simd_block) * simd_block if simd_block else 0
        truncate = tf.constant(np.arange(width) < vector)

        def to_u8(c: tf.Tensor) -> tf.Tensor:
            c = c * np.float32(255.0)
            c = tf.where(truncate, tf.floor(c), tf.round(c))
            return tf.cast(tf.clip_by_value(c, 0.0, 255.0), tf.uint8)

        b, g, r = to_u8(b), to_u8(g), to_u8(r)
    return _stack(r, g, b, bidx)


def _dot(x: tf.Tensor, rows) -> tf.Tensor:
    """x (..., 3) times a 3 x n integer matrix given as rows, as a sum of n-wide broadcasts
    (..., n): elementwise work that fuses into one kernel (an int32 matmul ran 2x slower)."""
    out = None
    for c, row in enumerate(rows):
        term = x[..., c : c + 1] * tf.constant(np.asarray(row, np.int32))
        out = term if out is None else out + term
    return out


def to_lab(image: tf.Tensor, bidx: int) -> tf.Tensor:
    """BGR2Lab / RGB2Lab (sRGB, D65; 3 or 4 channels) -> HW3 (L, a, b) as OpenCV computes it.
    uint8: L*255/100, a+128, b+128, by RGB2Lab_b's fixed point. float32: L in [0, 100], by
    RGB2Lab_f's trilinear interpolation of a 33^3 table in 1/2^14 units: OpenCV's default for
    sRGB float input, which differs from the defining formula by up to ~0.6 (in a)."""
    rgb = image[..., :3]
    colour = [2 - bidx, 1, bidx]  # channel c holds colour[c] of (R, G, B)
    if image.dtype == tf.uint8:
        gamma, cbrt, coeffs = lab_u8_tables()
        linear = tf.gather(tf.constant(gamma), tf.cast(rgb, tf.int32))
        # CV_DESCALE(R*C0 + G*C1 + B*C2, lab_shift) for X, Y, Z indexes LabCbrtTab_b (< 2041)
        xyz = _dot(linear, [coeffs[:, colour[c]] for c in range(3)]) + (1 << (LAB_SHIFT - 1))
        f = tf.gather(tf.constant(cbrt), xyz // (1 << LAB_SHIFT))
        # L = CV_DESCALE(Lscale*fY + Lshift, lab_shift2) with Lscale = 116*255/100 and Lshift =
        # -16*255/100 in lab_shift2 fixed point, each rounded as OpenCV's integer division does;
        # a = CV_DESCALE(500*(fX - fY) + 128 << lab_shift2, lab_shift2), b likewise with 200.
        # Every numerator is positive for every uint8 colour (checked on all 2^24), so // is
        # OpenCV's >>.
        l_scale = (116 * 255 + 50) // 100
        l_shift = -((16 * 255 * (1 << LAB_SHIFT2) + 50) // 100)
        half = 1 << (LAB_SHIFT2 - 1)
        lab = _dot(f, [[0, 500, 0], [l_scale, -500, 200], [0, 0, -200]])
        offset = np.array([l_shift, 128 << LAB_SHIFT2, 128 << LAB_SHIFT2], np.int32) + half
        lab = lab + tf.constant(offset)
        return _int_to_u8(lab // (1 << LAB_SHIFT2))
    # float32: clip to [0, 1] and round to 1/2^14 (half to even, as OpenCV's cvRound/v_round);
    # the top 5 bits pick the cell, the next 4 the position in it (trilinear_shift = 4)
    unit = tf.clip_by_value(rgb, np.float32(0), np.float32(1)) * np.float32(LAB_BASE)
    # the integer clamp only matters for NaN (its conversion is undefined): it keeps the
    # gather's index in the table, and sends NaN where OpenCV's vector loop does, to 0
    fixed = tf.clip_by_value(tf.cast(tf.round(unit), tf.int32), 0, LAB_BASE)
    cell_stride = {0: 1, 1: 33, 2: 33 * 33}  # by colour R, G, B: the table's axes are B, G, R
    cell = _dot(fixed // 512, [[cell_stride[colour[c]]] for c in range(3)])[..., 0]
    corners = tf.cast(tf.gather(tf.constant(lab_corner_table()), cell), tf.int32)  # HW x 8 x 3
    # trilinear interpolation as three exact integer lerps in 16ths (corner bit 0: red step,
    # bit 1: green, bit 2: blue): OpenCV's sum of corner * weight (weights summing to 2^12),
    # formed in another order, exactly, then CV_DESCALE(sum, 12)
    frac = (fixed // 32) % 16
    lab = [corners[..., k, :] for k in range(8)]
    for colour_index in (0, 1, 2):  # red, green, blue
        t = frac[..., colour.index(colour_index)][..., None]
        lab = [lo * (16 - t) + hi * t for lo, hi in zip(lab[0::2], lab[1::2], strict=True)]
    lab = lab[0]
    lab = tf.cast((lab + (1 << 11)) // (1 << 12), tf.float32)
    # L = iL * 100/2^14, a = ia * 256/2^14 - 128, b likewise: exact scalings, one rounding
    scale = np.array([100.0, 256.0, 256.0], np.float32) / np.float32(LAB_BASE)
    return lab * scale - np.array([0, 128, 128], np.float32)


# --- YUV 4:2:0 semi-planar -------------------------------------------------------------------


def nv_to_rgb(image: tf.Tensor, bidx: int, uv_first_u: bool) -> tf.Tensor:
    """YUV2BGR_NV12 / NV21 (and the RGB forms): (H*3/2, W) uint8 -> (H, W, 3) uint8."""
    rows, width = image.shape[0], image.shape[1]
    height = rows * 2 // 3
    y = tf.cast(image[:height], tf.int32)
    chroma = tf.cast(image[height:], tf.int32)
    first, second = chroma[:, 0::2], chroma[:, 1::2]

    def upsample(plane: tf.Tensor) -> tf.Tensor:
        plane = tf.reshape(plane, [height // 2, 1, width // 2, 1])
        return tf.reshape(tf.broadcast_to(plane, [height // 2, 2, width // 2, 2]), [height, width])

    u, v = (first, second) if uv_first_u else (second, first)
    u, v = upsample(u), upsample(v)
    u = u - 128
    v = v - 128
    yy = tf.maximum(y - 16, 0) * NV_CY + (1 << (NV_SHIFT - 1))
    low = -(1 << 29)
    r = _floor_div(yy + NV_CVR * v, NV_SHIFT, low)
    g = _floor_div(yy + NV_CVG * v + NV_CUG * u, NV_SHIFT, low)
    b = _floor_div(yy + NV_CUB * u, NV_SHIFT, low)
    return _int_to_u8(_stack(r, g, b, bidx))
