"""gdp.serving's request decoding and response encoding, and the Stage around a model, without
Ray: image headers read before decoding (sizes against OpenCV's decode), truncated and damaged
bodies, the pixel limit, .npy arrays, multipart forms, and each refusal's status and message."""

from __future__ import annotations

import io
import json
import struct
import zlib

import cv2
import numpy as np
import pytest

from gdp.serving import codec
from gdp.serving.codec import RequestError
from gdp.signature import TensorSig
from tests.serving import helpers

IMAGE = TensorSig("image", np.dtype(np.uint8), (None, None, 3))
FORMATS = [".jpg", ".png", ".webp"]


@pytest.fixture(scope="module")
def photos():
    return helpers.photos()


def refused(status: int, *words: str):
    """pytest.raises for a RequestError of `status` whose message holds every word."""

    class Check:
        def __enter__(self):
            self.ctx = pytest.raises(RequestError)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self.ctx.__exit__(*exc)
            err = self.info.value
            assert err.status == status, f"status {err.status}, expected {status}: {err}"
            for word in words:
                assert word in str(err), f"{word!r} not in {str(err)!r}"
            return handled

    return Check()


def decode(data: bytes, sig: TensorSig = IMAGE, **kw) -> np.ndarray:
    kw.setdefault("max_pixels", codec.DEFAULT_MAX_PIXELS)
    return codec.decode_value(data, sig, **kw)


@pytest.mark.parametrize("ext", FORMATS)
def test_header_sizes_match_the_decoded_images(photos, ext):
    for rgb in photos:
        data = helpers.encode(rgb, ext)
        kind = codec.sniff(data)
        assert kind == {".jpg": "jpeg", ".png": "png", ".webp": "webp"}[ext]
        decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
        assert codec.image_size(data, kind) == (decoded.shape[1], decoded.shape[0])
        got = decode(data)
        # RGB, as the model takes it: OpenCV's BGR decode, channels swapped
        np.testing.assert_array_equal(got, decoded[:, :, ::-1])


def test_webp_lossy_and_progressive_jpeg_headers(photos):
    rgb = photos[2]
    ok, lossy = cv2.imencode(".webp", rgb, [cv2.IMWRITE_WEBP_QUALITY, 80])
    ok2, prog = cv2.imencode(".jpg", rgb, [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])
    assert ok and ok2
    assert codec.image_size(lossy.tobytes(), "webp") == (rgb.shape[1], rgb.shape[0])
    assert codec.image_size(prog.tobytes(), "jpeg") == (rgb.shape[1], rgb.shape[0])
    assert decode(prog.tobytes()).shape == rgb.shape


@pytest.mark.parametrize("ext", FORMATS)
def test_truncated_images_are_refused(photos, ext):
    data = helpers.encode(photos[1], ext)
    for cut in (30, len(data) // 2, len(data) - 1):
        with refused(400, "truncated", "image"):
            decode(data[:cut])


def test_damaged_jpeg_is_a_400(photos):
    data = bytearray(helpers.encode(photos[0]))
    (length,) = struct.unpack_from(">H", data, 4)
    data[4 + length] = 0x00  # the marker after APP0
    with refused(400, "damaged JPEG"):
        decode(bytes(data))


def _png_claiming(width: int, height: int, data: bytes) -> bytes:
    """`data` (a PNG) with IHDR saying width x height (CRC fixed, pixels unchanged)."""
    out = bytearray(data)
    struct.pack_into(">II", out, 16, width, height)
    struct.pack_into(">I", out, 29, zlib.crc32(bytes(out[12:29])))
    return bytes(out)


def test_pixel_limit_is_checked_from_the_header_before_decoding(photos, monkeypatch):
    bomb = _png_claiming(100_000, 100_000, helpers.encode(photos[0], ".png"))

    def no_decode(*args, **kwargs):
        raise AssertionError("imdecode called on an image over the pixel limit")

    monkeypatch.setattr(cv2, "imdecode", no_decode)
    with refused(413, "100000x100000", "10000000000 pixels", "limit of 50000000"):
        decode(bomb)


def test_pixel_limit_is_configurable(photos):
    data = helpers.encode(photos[2])  # 480x640 = 307200 px
    with refused(413, "307200 pixels", "limit of 300000"):
        decode(data, max_pixels=300_000)
    assert decode(data, max_pixels=307_200).shape == (480, 640, 3)


def test_not_an_image(photos, tmp_path):
    with refused(415, "not an image", "JPEG, PNG or WebP", "text starting 'hello world'"):
        decode(b"hello world", content_type="image/jpeg")
    with refused(415, "not an image", "an empty body"):
        decode(b"")
    with refused(415, "not an image", "bytes starting 00 01"):
        decode(bytes(range(64)))
    # A body naming a file on the server is text, never opened.
    path = tmp_path / "photo.png"
    path.write_bytes(helpers.encode(photos[0], ".png"))
    with refused(415, "not an image", str(path)[:12]):
        decode(str(path).encode())


def test_npy_bodies(photos):
    rgb = photos[1]
    np.testing.assert_array_equal(decode(codec.npy_bytes(rgb)), rgb)
    fortran = np.asfortranarray(rgb)
    np.testing.assert_array_equal(decode(codec.npy_bytes(fortran)), rgb)
    with refused(422, "'image'", "expected dtype uint8", "float32"):
        decode(codec.npy_bytes(rgb.astype(np.float32)))
    with refused(422, "'image'", "expected shape uint8[None, None, 3]", "(240, 320)"):
        decode(codec.npy_bytes(rgb[:, :, 0].copy()))
    with refused(400, "truncated .npy"):
        decode(codec.npy_bytes(rgb)[:-10])
    with refused(413, "pixels", "limit of 1000"):
        decode(codec.npy_bytes(rgb), max_pixels=1000)
    objects = io.BytesIO()
    np.save(objects, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with refused(415, "numeric .npy", "object"):
        decode(objects.getvalue())
    with refused(400, "damaged .npy header"):
        decode(b"\x93NUMPY\x01\x00\x10\x00{'descr': 'zz'}")


def test_images_for_grey_and_float_inputs(photos):
    grey = TensorSig("grey", np.dtype(np.uint8), (None, None))
    data = helpers.encode(photos[0], ".png")
    want = cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), 1), cv2.COLOR_BGR2GRAY)
    np.testing.assert_array_equal(decode(data, grey), want)
    floats = TensorSig("x", np.dtype(np.float32), (None, None, 3))
    with refused(422, "'x'", "expected dtype float32", "uint8"):
        decode(data, floats)
    vector = TensorSig("v", np.dtype(np.uint8), (None,))
    with refused(422, "'v'", "an image cannot fill"):
        decode(data, vector)


def test_multipart_bodies(photos):
    a, b = photos[0], photos[1]
    sigs = [IMAGE, TensorSig("mask", np.dtype(np.float32), (None, None))]
    mask = np.random.default_rng(0).random(a.shape[:2], dtype=np.float32)
    body, ctype = codec.encode_multipart(
        {"mask": codec.npy_bytes(mask), "image": helpers.encode(a, ".png")}
    )
    got = codec.decode_request(body, ctype, sigs)
    np.testing.assert_array_equal(got[0], a)
    np.testing.assert_array_equal(got[1], mask)
    body, ctype = codec.encode_multipart({"img": helpers.encode(b), "mask": b"x"})
    with refused(422, "unknown input 'img'", "['image', 'mask']"):
        codec.decode_request(body, ctype, sigs)
    body, ctype = codec.encode_multipart({"image": helpers.encode(b)})
    with refused(422, "missing input(s) ['mask']"):
        codec.decode_request(body, ctype, sigs)
    with refused(415, "2 inputs", "multipart/form-data"):
        codec.decode_request(helpers.encode(b), "image/jpeg", sigs)
    with refused(400, "truncated multipart"):
        full, ctype = codec.encode_multipart({"image": helpers.encode(b)})
        codec.decode_request(full[:-20], ctype, [IMAGE])
    with refused(400, "no boundary"):
        codec.decode_request(body, "multipart/form-data", [IMAGE])


def test_multipart_file_names_are_ignored(photos, tmp_path):
    path = tmp_path / "secret.png"
    path.write_bytes(helpers.encode(photos[0], ".png"))
    body = (
        b'--XX\r\nContent-Disposition: form-data; name="image"; filename="'
        + str(path).encode()
        + b'"\r\n\r\n\r\n--XX--\r\n'
    )
    with refused(415, "not an image", "an empty body"):
        codec.decode_request(body, "multipart/form-data; boundary=XX", [IMAGE])


def test_responses_round_trip():
    rng = np.random.default_rng(1)
    one = {"tensor": rng.random((3, 4, 5), dtype=np.float32)}
    two = {"tensor": one["tensor"], "count": np.arange(6, dtype=np.int64).reshape(2, 3)}
    for outputs in (one, two):
        for accept in ("", "application/json", "text/html, application/json;q=0.9"):
            body, ctype = codec.encode_outputs(outputs, accept)
            if "json" in accept:
                assert ctype == codec.JSON_TYPE
                assert set(json.loads(body)) == set(outputs)
            else:
                assert ctype == (codec.NPY_TYPE if len(outputs) == 1 else codec.NPZ_TYPE)
            got = codec.decode_outputs(body, ctype, list(outputs))
            assert set(got) == set(outputs)
            for name, want in outputs.items():
                assert got[name].dtype == want.dtype
                np.testing.assert_array_equal(got[name], want)
