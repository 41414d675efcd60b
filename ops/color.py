"""Colour conversions as TF functions over HWC tensors, reproducing cv2.cvtColor.

The uint8 paths use OpenCV's own integer arithmetic (fixed-point weights, its division tables),
so they agree bit for bit; float32 paths use OpenCV's float weights (Lab: its interpolation
table). `bidx` is the index of the blue channel in the input (0 for BGR order, 2 for RGB
order). They import nothing of gdp.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from gdp.ops.image import GRAY_WEIGHTS_RGB, rgb_to_gray_u8


def _to_u8(x: tf.Tensor) -> tf.Tensor:
    """saturate_cast<uchar> of a float tensor: round half to even (cvRound), clamp, cast."""
    return tf.cast(tf.clip_by_value(tf.round(x), 0.0, 255.0), tf.uint8)


def _int_to_u8(x: tf.Tensor) -> tf.Tensor:
    return tf.cast(tf.clip_by_value(x, 0, 255), tf.uint8)


def _floor_div(x: tf.Tensor, shift: int, low: int) -> tf.Tensor:
    """floor(x / 2**shift) (OpenCV's arithmetic >>) for int32 x >= low, computed on a
    non-negative value so that no integer division of a negative number is involved."""
    k = (-low >> shift) + 1 if low < 0 else 0
    return (x + (k << shift)) // (1 << shift) - k


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

_YUV_SHIFT = 14
_Y_FIXED = (4899, 9617, 1868)  # R, G, B weights of Y (BT.601) in 14-bit fixed point
_CR_FIXED, _CB_FIXED = 11682, 9241  # 0.713, 0.564


def to_ycrcb(image: tf.Tensor, bidx: int) -> tf.Tensor:
    """BGR2YCrCb / RGB2YCrCb -> HW3 (Y, Cr, Cb)."""
    r, g, b = _rgb(image, bidx)
    if image.dtype == tf.uint8:
        r, g, b = (tf.cast(c, tf.int32) for c in (r, g, b))
        half = 1 << (_YUV_SHIFT - 1)
        scale = 1 << _YUV_SHIFT
        y = (r * _Y_FIXED[0] + g * _Y_FIXED[1] + b * _Y_FIXED[2] + half) // scale
        low = -255 * _CR_FIXED
        cr = _floor_div((r - y) * _CR_FIXED + (128 << _YUV_SHIFT) + half, _YUV_SHIFT, low)
        cb = _floor_div((b - y) * _CB_FIXED + (128 << _YUV_SHIFT) + half, _YUV_SHIFT, low)
        return _int_to_u8(tf.stack([y, cr, cb], axis=-1))
    wr, wg, wb = (np.float32(w) for w in GRAY_WEIGHTS_RGB)
    y = b * wb + g * wg + r * wr
    cr = (r - y) * np.float32(0.713) + np.float32(0.5)
    cb = (b - y) * np.float32(0.564) + np.float32(0.5)
    return tf.stack([y, cr, cb], axis=-1)


# --- HSV -------------------------------------------------------------------------------------

_HSV_SHIFT = 12


def _hsv_tables() -> tuple[np.ndarray, np.ndarray]:
    """OpenCV's sdiv_table and hdiv_table (hrange 180): round((255 << 12) / i), round((180 <<
    12) / (6 i)), 0 at i = 0."""
    i = np.arange(256, dtype=np.float64)
    with np.errstate(divide="ignore"):
        sdiv = np.where(i == 0, 0, np.rint((255 << _HSV_SHIFT) / i))
        hdiv = np.where(i == 0, 0, np.rint((180 << _HSV_SHIFT) / (6.0 * i)))
    return sdiv.astype(np.int32), hdiv.astype(np.int32)


def to_hsv(image: tf.Tensor, bidx: int) -> tf.Tensor:
    """BGR2HSV / RGB2HSV -> HW3 (H, S, V): uint8 with H in [0, 180) exactly as OpenCV's integer
    tables; float32 with H in degrees [0, 360), S and V in [0, 1]."""
    r, g, b = _rgb(image, bidx)
    if image.dtype == tf.uint8:
        r, g, b = (tf.cast(c, tf.int32) for c in (r, g, b))
        v = tf.maximum(tf.maximum(r, g), b)
        diff = v - tf.minimum(tf.minimum(r, g), b)
        sdiv, hdiv = _hsv_tables()
        half = 1 << (_HSV_SHIFT - 1)
        scale = 1 << _HSV_SHIFT
        # diff lies in [0, 255]; the clip (no-op) says so to the compiler, whose interval
        # arithmetic sees max - min as [-255, 255]: a proved index needs no run-time check,
        # and the lookup fuses with what computes it.
        diff = tf.clip_by_value(diff, 0, 255)
        s = (diff * tf.gather(tf.constant(sdiv), v) + half) // scale
        h = tf.where(
            tf.equal(v, r), g - b, tf.where(tf.equal(v, g), b - r + 2 * diff, r - g + 4 * diff)
        )
        h = _floor_div(h * tf.gather(tf.constant(hdiv), diff) + half, _HSV_SHIFT, -(1 << 28))
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


# --- Lab ---------------------------------------------------------------------------------
#
# OpenCV (modules/imgproc/src/color_lab.cpp) converts sRGB to Lab with tables it builds once in
# its software floating point (softfloat/softdouble: IEEE float32/float64 operations, each
# correctly rounded, which NumPy's float32/float64 operations reproduce), except for its own
# cube root (softfloat `cbrt`: a rational polynomial in float64 whose mantissa is truncated to
# float32). The tables are rebuilt here in NumPy when a graph is built and gathered from in TF;
# uint8 and float32 results then agree with OpenCV bit for bit.

# sRGB -> XYZ (D65) rows X, Y, Z over R, G, B, and the D65 white: the float64 values of
# OpenCV's sRGB2XYZ_D65 and D65 (it stores their bit patterns).
_RGB2XYZ_D65 = np.array(
    [
        [0.412453, 0.357580, 0.180423],
        [0.212671, 0.715160, 0.072169],
        [0.019334, 0.119193, 0.950227],
    ]
)
_WHITE_D65 = np.array([0.950456, 1.0, 1.088754])
# (6/29)^3, (29/3)^3/(29*4) and 16/116 as OpenCV's float32 lthresh, lscale, lbias
_LAB_THRESH = np.float32(216) / np.float32(24389)
_LAB_SCALE = np.float32(841) / np.float32(108)
_LAB_BIAS = np.float32(16) / np.float32(116)
# Turkowski's rational approximation of cbrt on [1/8, 1), as OpenCV's softfloat cbrt has it
_CBRT_NUM = (
    45.2548339756803022511987494,
    192.2798368355061050458134625,
    119.1654824285581628956914143,
    13.43250139086239872172837314,
    0.1636161226585754240958355063,
)
_CBRT_DEN = (
    14.80884093219134573786480845,
    151.9714051044435648658557668,
    168.5254414101568283957668343,
    33.9905941350215598754191872,
    1.0,
)
_LAB_SHIFT, _GAMMA_SHIFT = 12, 3  # lab_shift (= xyz_shift), gamma_shift
_LAB_SHIFT2 = _LAB_SHIFT + _GAMMA_SHIFT
_LAB_BASE = 1 << 14  # LAB_BASE: fixed-point unit of the float path's interpolation table


def _srgb_gamma(x: np.ndarray) -> np.ndarray:
    """applyGamma: sRGB -> linear of float32 x, in float64, rounded to float32."""
    xd = x.astype(np.float64)
    low = xd / (323 / 25)
    high = ((xd + 11 / 200) / (1 + 11 / 200)) ** (12 / 5)
    return np.where(xd <= 809 / 20000, low, high).astype(np.float32)


def _softfloat_cbrt(x: np.ndarray) -> np.ndarray:
    """OpenCV's softfloat cbrt of float32 x > 0: the mantissa scaled into [1/8, 1) by a power
    of 8, the rational polynomial in float64, its mantissa truncated (not rounded) to 23 bits."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.int64)
    exp = ((bits >> 23) & 255) - 127
    shx = np.fmod(exp, 3)  # C's %, truncating
    shx = np.where(shx >= 0, shx - 3, shx)
    exp = (exp - shx) // 3 - 1
    fr = (((shx + 1023) << 52) | ((bits & 0x7FFFFF) << 29)).view(np.float64)
    num = den = 0.0
    for cn, cd in zip(_CBRT_NUM, _CBRT_DEN, strict=True):
        num, den = num * fr + cn, den * fr + cd
    mant = ((num / den).view(np.int64) & ((1 << 52) - 1)) >> 29
    return (((exp + 127) << 23) | mant).astype(np.uint32).view(np.float32)


def _lab_f(t: np.ndarray) -> np.ndarray:
    """Lab's f(t) on float32 t >= 0: cbrt above (6/29)^3, else the line lscale*t + lbias as one
    fused multiply-add (float64 holds the product exactly; the sum's float64 rounding never lands
    on a float32 midpoint for the table arguments, so rounding twice rounds once)."""
    line = (t.astype(np.float64) * _LAB_SCALE + _LAB_BIAS).astype(np.float32)
    return np.where(t < _LAB_THRESH, line, _softfloat_cbrt(np.maximum(t, _LAB_THRESH)))


def _lab_u8_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """RGB2Lab_b's tables: sRGBGammaTab_b (round(255*8*gamma(i/255)), 256 entries),
    LabCbrtTab_b (round(2^15 f(i/(255*8))), 3072 entries) and the XYZ coefficients in
    12-bit fixed point with the white point divided in (rows X, Y, Z over R, G, B)."""
    i = np.arange(256, dtype=np.float32)
    gamma = np.rint(np.float32(255 << _GAMMA_SHIFT) * _srgb_gamma(i / np.float32(255)))
    step = np.float32(1) / np.float32(255 << _GAMMA_SHIFT)
    t = step * np.arange(256 * 3 // 2 << _GAMMA_SHIFT, dtype=np.float32)
    cbrt = np.rint(np.float32(1 << _LAB_SHIFT2) * _lab_f(t))
    coeffs = np.rint((1 << _LAB_SHIFT) * _RGB2XYZ_D65 / _WHITE_D65[:, None])
    return gamma.astype(np.int32), cbrt.astype(np.int32), coeffs.astype(np.int32)


def _lab_grid() -> np.ndarray:
    """initLUTforLABLUVs16's RGB2Lab table: Lab (L/100, (a+128)/256, (b+128)/256 in units of
    1/LAB_BASE) at the 33^3 colours k/32, in float32 as OpenCV computes it; axes blue, green,
    red (OpenCV's `R` loop runs over the blue coefficient)."""
    f32 = np.float32
    lin = _srgb_gamma(np.arange(33, dtype=f32) / f32(32))
    m = (_RGB2XYZ_D65 / _WHITE_D65[:, None]).astype(f32)
    b, g, r = np.meshgrid(lin, lin, lin, indexing="ij")
    x, y, z = (b * m[k, 2] + g * m[k, 1] + r * m[k, 0] for k in range(3))
    fx, fy, fz = _lab_f(x), _lab_f(y), _lab_f(z)
    lum = np.where(y > _LAB_THRESH, f32(116) * fy - f32(16), f32(24389) / f32(27) * y)
    base = f32(_LAB_BASE)
    grid = [
        base * lum / f32(100),
        base * (f32(500) * (fx - fy) + f32(128)) / f32(256),
        base * (f32(200) * (fy - fz) + f32(128)) / f32(256),
    ]
    return np.rint(np.stack(grid, axis=-1)).astype(np.int32)


def _lab_corner_table() -> np.ndarray:
    """RGB2LabLUT_s16: for each of the 33^3 cells, the Lab of its 8 corners (corner 4p+2q+r
    for the +1 step in blue p, green q, red r, clamped at the last cell), shape (33^3, 8, 3)."""
    grid = _lab_grid()
    k = np.arange(33)
    corners = []
    for p in (0, 1):
        for q in (0, 1):
            for r in (0, 1):
                kp, kq, kr = (np.minimum(k + d, 32) for d in (p, q, r))
                corners.append(grid[np.ix_(kp, kq, kr)].reshape(-1, 3))
    return np.stack(corners, axis=1).astype(np.int16)


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
        gamma, cbrt, coeffs = _lab_u8_tables()
        linear = tf.gather(tf.constant(gamma), tf.cast(rgb, tf.int32))
        # CV_DESCALE(R*C0 + G*C1 + B*C2, lab_shift) for X, Y, Z indexes LabCbrtTab_b (< 2041)
        xyz = _dot(linear, [coeffs[:, colour[c]] for c in range(3)]) + (1 << (_LAB_SHIFT - 1))
        f = tf.gather(tf.constant(cbrt), xyz // (1 << _LAB_SHIFT))
        # L = CV_DESCALE(Lscale*fY + Lshift, lab_shift2) with Lscale = 116*255/100 and Lshift =
        # -16*255/100 in lab_shift2 fixed point, each rounded as OpenCV's integer division does;
        # a = CV_DESCALE(500*(fX - fY) + 128 << lab_shift2, lab_shift2), b likewise with 200.
        # Every numerator is positive for every uint8 colour (checked on all 2^24), so // is
        # OpenCV's >>.
        l_scale = (116 * 255 + 50) // 100
        l_shift = -((16 * 255 * (1 << _LAB_SHIFT2) + 50) // 100)
        half = 1 << (_LAB_SHIFT2 - 1)
        lab = _dot(f, [[0, 500, 0], [l_scale, -500, 200], [0, 0, -200]])
        offset = np.array([l_shift, 128 << _LAB_SHIFT2, 128 << _LAB_SHIFT2], np.int32) + half
        lab = lab + tf.constant(offset)
        return _int_to_u8(lab // (1 << _LAB_SHIFT2))
    # float32: clip to [0, 1] and round to 1/2^14 (half to even, as OpenCV's cvRound/v_round);
    # the top 5 bits pick the cell, the next 4 the position in it (trilinear_shift = 4)
    unit = tf.clip_by_value(rgb, np.float32(0), np.float32(1)) * np.float32(_LAB_BASE)
    # the integer clamp only matters for NaN (its conversion is undefined): it keeps the
    # gather's index in the table, and sends NaN where OpenCV's vector loop does, to 0
    fixed = tf.clip_by_value(tf.cast(tf.round(unit), tf.int32), 0, _LAB_BASE)
    cell_stride = {0: 1, 1: 33, 2: 33 * 33}  # by colour R, G, B: the table's axes are B, G, R
    cell = _dot(fixed // 512, [[cell_stride[colour[c]]] for c in range(3)])[..., 0]
    corners = tf.cast(tf.gather(tf.constant(_lab_corner_table()), cell), tf.int32)  # HW x 8 x 3
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
    scale = np.array([100.0, 256.0, 256.0], np.float32) / np.float32(_LAB_BASE)
    return lab * scale - np.array([0, 128, 128], np.float32)


# --- YUV 4:2:0 semi-planar -------------------------------------------------------------------

# ITU-R BT.601 YUV -> RGB in 20-bit fixed point (OpenCV's ITUR_BT_601_* constants).
_CY, _CUB, _CUG, _CVG, _CVR, _SHIFT = 1220542, 2116026, -409993, -852492, 1673527, 20


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
    yy = tf.maximum(y - 16, 0) * _CY + (1 << (_SHIFT - 1))
    low = -(1 << 29)
    r = _floor_div(yy + _CVR * v, _SHIFT, low)
    g = _floor_div(yy + _CVG * v + _CUG * u, _SHIFT, low)
    b = _floor_div(yy + _CUB * u, _SHIFT, low)
    return _int_to_u8(_stack(r, g, b, bidx))
