"""OpenCV's colour-conversion constants and tables in NumPy: the fixed-point weights of gray and
YCrCb, HSV's division tables, and Lab's gamma, cube-root and interpolation tables, built as
OpenCV builds them.

gdp.ops.color (the TF graphs) and gdp.runtime.color (the hand-written kernels) both use them;
this module imports no TensorFlow, so that a hand kernel's call does not either.
"""

from __future__ import annotations

import numpy as np

# --- gray ------------------------------------------------------------------------------------

# cv2.cvtColor(RGB2GRAY) on uint8 in OpenCV 5: (R*9798 + G*19235 + B*3735 + 2^14) >> 15 (the
# BT.601 weights in 15-bit fixed point; OpenCV 4 used 14 bits, which rounds differently).
GRAY_FIXED_RGB = (9798, 19235, 3735)
GRAY_FIXED_SHIFT = 15

# --- YCrCb -----------------------------------------------------------------------------------

YUV_SHIFT = 14
Y_FIXED = (4899, 9617, 1868)  # R, G, B weights of Y (BT.601) in 14-bit fixed point
CR_FIXED, CB_FIXED = 11682, 9241  # 0.713, 0.564

# --- YUV 4:2:0 -> RGB ------------------------------------------------------------------------

# ITU-R BT.601 YUV -> RGB in 20-bit fixed point (OpenCV's ITUR_BT_601_* constants).
NV_CY, NV_CUB, NV_CUG, NV_CVG, NV_CVR, NV_SHIFT = 1220542, 2116026, -409993, -852492, 1673527, 20

# --- HSV -------------------------------------------------------------------------------------

HSV_SHIFT = 12


def hsv_tables() -> tuple[np.ndarray, np.ndarray]:
    """OpenCV's sdiv_table and hdiv_table (hrange 180): round((255 << 12) / i), round((180 <<
    12) / (6 i)), 0 at i = 0. The reference only: the programs (gdp.ops.color._hsv_divided) and
    the hand kernels compute them by a float32 division, checked equal to these in the tests."""
    i = np.arange(256, dtype=np.float64)
    with np.errstate(divide="ignore"):
        sdiv = np.where(i == 0, 0, np.rint((255 << HSV_SHIFT) / i))
        hdiv = np.where(i == 0, 0, np.rint((180 << HSV_SHIFT) / (6.0 * i)))
    return sdiv.astype(np.int32), hdiv.astype(np.int32)


# --- Lab ---------------------------------------------------------------------------------
#
# OpenCV (modules/imgproc/src/color_lab.cpp) converts sRGB to Lab with tables it builds once in
# its software floating point (softfloat/softdouble: IEEE float32/float64 operations, each
# correctly rounded, which NumPy's float32/float64 operations reproduce), except for its own
# cube root (softfloat `cbrt`: a rational polynomial in float64 whose mantissa is truncated to
# float32). The tables are rebuilt here in NumPy, and gathered from by the TF graphs and the
# hand kernels; uint8 and float32 results then agree with OpenCV bit for bit.

# sRGB -> XYZ (D65) rows X, Y, Z over R, G, B, and the D65 white: the float64 values of
# OpenCV's sRGB2XYZ_D65 and D65 (it stores their bit patterns).
RGB2XYZ_D65 = np.array(
    [
        [0.412453, 0.357580, 0.180423],
        [0.212671, 0.715160, 0.072169],
        [0.019334, 0.119193, 0.950227],
    ]
)
WHITE_D65 = np.array([0.950456, 1.0, 1.088754])
# (6/29)^3, (29/3)^3/(29*4) and 16/116 as OpenCV's float32 lthresh, lscale, lbias
LAB_THRESH = np.float32(216) / np.float32(24389)
LAB_SCALE = np.float32(841) / np.float32(108)
LAB_BIAS = np.float32(16) / np.float32(116)
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
LAB_SHIFT, GAMMA_SHIFT = 12, 3  # lab_shift (= xyz_shift), gamma_shift
LAB_SHIFT2 = LAB_SHIFT + GAMMA_SHIFT
LAB_BASE = 1 << 14  # LAB_BASE: fixed-point unit of the float path's interpolation table


def srgb_gamma(x: np.ndarray) -> np.ndarray:
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


def lab_f(t: np.ndarray) -> np.ndarray:
    """Lab's f(t) on float32 t >= 0: cbrt above (6/29)^3, else the line lscale*t + lbias as one
    fused multiply-add (float64 holds the product exactly; the sum's float64 rounding never lands
    on a float32 midpoint for the table arguments, so rounding twice rounds once)."""
    line = (t.astype(np.float64) * LAB_SCALE + LAB_BIAS).astype(np.float32)
    return np.where(t < LAB_THRESH, line, _softfloat_cbrt(np.maximum(t, LAB_THRESH)))


def lab_u8_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """RGB2Lab_b's tables: sRGBGammaTab_b (round(255*8*gamma(i/255)), 256 entries),
    LabCbrtTab_b (round(2^15 f(i/(255*8))), 3072 entries) and the XYZ coefficients in
    12-bit fixed point with the white point divided in (rows X, Y, Z over R, G, B)."""
    i = np.arange(256, dtype=np.float32)
    gamma = np.rint(np.float32(255 << GAMMA_SHIFT) * srgb_gamma(i / np.float32(255)))
    step = np.float32(1) / np.float32(255 << GAMMA_SHIFT)
    t = step * np.arange(256 * 3 // 2 << GAMMA_SHIFT, dtype=np.float32)
    cbrt = np.rint(np.float32(1 << LAB_SHIFT2) * lab_f(t))
    coeffs = np.rint((1 << LAB_SHIFT) * RGB2XYZ_D65 / WHITE_D65[:, None])
    return gamma.astype(np.int32), cbrt.astype(np.int32), coeffs.astype(np.int32)


def lab_grid() -> np.ndarray:
    """initLUTforLABLUVs16's RGB2Lab table: Lab (L/100, (a+128)/256, (b+128)/256 in units of
    1/LAB_BASE) at the 33^3 colours k/32, in float32 as OpenCV computes it; axes blue, green,
    red (OpenCV's `R` loop runs over the blue coefficient)."""
    f32 = np.float32
    lin = srgb_gamma(np.arange(33, dtype=f32) / f32(32))
    m = (RGB2XYZ_D65 / WHITE_D65[:, None]).astype(f32)
    b, g, r = np.meshgrid(lin, lin, lin, indexing="ij")
    x, y, z = (b * m[k, 2] + g * m[k, 1] + r * m[k, 0] for k in range(3))
    fx, fy, fz = lab_f(x), lab_f(y), lab_f(z)
    lum = np.where(y > LAB_THRESH, f32(116) * fy - f32(16), f32(24389) / f32(27) * y)
    base = f32(LAB_BASE)
    grid = [
        base * lum / f32(100),
        base * (f32(500) * (fx - fy) + f32(128)) / f32(256),
        base * (f32(200) * (fy - fz) + f32(128)) / f32(256),
    ]
    return np.rint(np.stack(grid, axis=-1)).astype(np.int32)


def lab_corner_table() -> np.ndarray:
    """RGB2LabLUT_s16: for each of the 33^3 cells, the Lab of its 8 corners (corner 4p+2q+r
    for the +1 step in blue p, green q, red r, clamped at the last cell), shape (33^3, 8, 3)."""
    grid = lab_grid()
    k = np.arange(33)
    corners = []
    for p in (0, 1):
        for q in (0, 1):
            for r in (0, 1):
                kp, kq, kr = (np.minimum(k + d, 32) for d in (p, q, r))
                corners.append(grid[np.ix_(kp, kq, kr)].reshape(-1, 3))
    return np.stack(corners, axis=1).astype(np.int16)
