"""The HTTP side of the serving stage, without Ray: a request body -> validated input arrays, the
outputs -> a response body.

Bodies are recognised by their first bytes, not by what the client claims: JPEG, PNG and WebP
(decoded with OpenCV) and NumPy `.npy` arrays; a `multipart/form-data` body carries several
named inputs, one part per input, each one of those. Before anything is decoded, an image's size
is read from its header (the pixel limit is a decompression-bomb guard: a few kilobytes of PNG
can decode into gigabytes) and its structure is checked to its end (a truncated JPEG otherwise
decodes into a grey-filled image without an error); an array's header is read before its data.
Nothing here opens a file: bodies are bytes in memory, and part file names are ignored.

Every refusal is a `RequestError` (a `gdp.InputError`) carrying the HTTP status: 400 for a
malformed or truncated body, 413 for too many pixels or bytes, 415 for an unsupported type, 422
for a well-formed input that does not fit the model (name, dtype, shape)."""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Mapping, Sequence
from email.parser import HeaderParser

import numpy as np

from gdp.errors import InputError
from gdp.signature import TensorSig, check_input

# An image over this many pixels (width x height) is refused before decoding.
DEFAULT_MAX_PIXELS = 50_000_000
# A body over this many bytes is refused while it is read.
DEFAULT_MAX_BODY_BYTES = 256 * 2**20
CHANNEL_ORDERS = ("rgb", "bgr")

NPY_TYPE = "application/x-npy"
NPZ_TYPE = "application/x-npz"
JSON_TYPE = "application/json"

_KINDS = {"jpeg": "JPEG", "png": "PNG", "webp": "WebP", "npy": ".npy"}


class RequestError(InputError):
    """A request the stage refuses: `status` is its HTTP status (4xx), the message says what was
    wrong, what was expected and what came."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)

    def __reduce__(self):  # crosses Ray's process boundary with its status
        return (type(self), (self.status, str(self)))


def sniff(data: bytes) -> str | None:
    """The body's type from its magic bytes: "jpeg", "png", "webp", "npy", or None."""
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data[:6] == b"\x93NUMPY":
        return "npy"
    return None


def _describe_start(data: bytes) -> str:
    if not data:
        return "an empty body"
    head = data[:16]
    text = head.decode("ascii", "replace")
    if all(32 <= b < 127 or b in (9, 10, 13) for b in head):
        return f"text starting {text!r}"
    return f"bytes starting {head.hex(' ')}"


def _truncated(kind: str, detail: str) -> RequestError:
    return RequestError(400, f"truncated {_KINDS[kind]} image: {detail}")


# -- image headers: (width, height) without decoding, and a structural end-to-end check -------

# JPEG start-of-frame markers (baseline, extended, progressive, lossless; not C4, C8, CC).
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def _jpeg(data: bytes) -> tuple[int, int]:
    """A JPEG's size from its frame header; the file must hold a scan and, after the first scan,
    the end-of-image marker (entropy-coded data never holds FF D9: FF bytes are stuffed)."""
    i, n, size = 2, len(data), None
    while True:
        if i + 4 > n:
            raise _truncated("jpeg", f"the markers end at byte {n} before the first scan")
        if data[i] != 0xFF:
            raise RequestError(
                400, f"damaged JPEG image: expected a marker at byte {i}, got 0x{data[i]:02x}"
            )
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # standalone markers
            i += 2
            continue
        (length,) = struct.unpack_from(">H", data, i + 2)
        if marker in _SOF:
            if i + 9 > n:
                raise _truncated("jpeg", "the frame header is cut off")
            height, width = struct.unpack_from(">HH", data, i + 5)
            size = (width, height)
        if marker == 0xDA:  # start of scan
            if size is None:
                raise RequestError(400, "damaged JPEG image: a scan before any frame header")
            if data.find(b"\xff\xd9", i + 2 + length) < 0:
                raise _truncated("jpeg", f"no end-of-image marker after the scan ({n} bytes)")
            return size
        i += 2 + length


def _png(data: bytes) -> tuple[int, int]:
    """A PNG's size from IHDR; its chunks must run whole up to IEND."""
    n = len(data)
    if n < 24 or data[12:16] != b"IHDR":
        raise _truncated("png", f"expected the IHDR chunk in the first 24 bytes, got {n} bytes")
    width, height = struct.unpack_from(">II", data, 16)
    i = 8
    while True:
        if i + 8 > n:
            raise _truncated("png", f"the chunks end at byte {n} without IEND")
        (length,) = struct.unpack_from(">I", data, i)
        kind = data[i + 4 : i + 8]
        i += 12 + length
        if i > n:
            raise _truncated("png", f"chunk {kind.decode('latin-1')!r} runs past the {n} bytes")
        if kind == b"IEND":
            return width, height


def _webp(data: bytes) -> tuple[int, int]:
    """A WebP's size from its VP8 / VP8L / VP8X header; the RIFF size must be all there."""
    n = len(data)
    (riff,) = struct.unpack_from("<I", data, 4)
    if n < 8 + riff:
        raise _truncated("webp", f"its RIFF header says {8 + riff} bytes, got {n}")
    if n < 30:
        raise _truncated("webp", f"expected at least 30 bytes, got {n}")
    chunk = data[12:16]
    if chunk == b"VP8 ":
        if data[23:26] != b"\x9d\x01\x2a":
            raise RequestError(400, "damaged WebP image: no VP8 start code")
        width, height = struct.unpack_from("<HH", data, 26)
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L":
        (bits,) = struct.unpack_from("<I", data, 21)
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    raise RequestError(
        400, f"damaged WebP image: expected a VP8, VP8L or VP8X chunk, got {chunk!r}"
    )


_HEADERS = {"jpeg": _jpeg, "png": _png, "webp": _webp}


def image_size(data: bytes, kind: str) -> tuple[int, int]:
    """(width, height) of an encoded image from its header; refuses a truncated one."""
    try:
        return _HEADERS[kind](data)
    except struct.error:
        raise _truncated(kind, f"its header is cut off ({len(data)} bytes)") from None


# -- decoding one input -----------------------------------------------------------------------


def _check_pixels(name: str, what: str, pixels: int, max_pixels: int) -> None:
    if pixels > max_pixels:
        raise RequestError(
            413,
            f"input {name!r}: {what} has {pixels} pixels, over the limit of {max_pixels}"
            " (the server's max_pixels)",
        )


def decode_image(
    data: bytes, kind: str, sig: TensorSig, *, max_pixels: int, channel_order: str = "rgb"
) -> np.ndarray:
    """An encoded image -> an array for the input `sig`: H x W x C (C the input's channel count,
    1, 3 or 4, in `channel_order`) or H x W for a 2-d input, in the depth the file holds."""
    import cv2

    width, height = image_size(data, kind)
    _check_pixels(
        sig.name, f"the {_KINDS[kind]} image ({width}x{height})", width * height, max_pixels
    )
    rank = len(sig.shape)
    channels = sig.shape[-1] if rank == 3 else 1 if rank == 2 else None
    if channels not in (1, 3, 4):
        raise RequestError(
            422,
            f"input {sig.name!r}: expected {sig.describe()}, which an image cannot fill (an"
            f" image is HxW or HxWx1/3/4); got a {_KINDS[kind]} image: send a .npy array",
        )
    try:
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    except cv2.error as err:
        raise RequestError(
            400,
            f"input {sig.name!r}: OpenCV could not decode the "
            f"{_KINDS[kind]} image: {str(err).strip()}",
        ) from None
    if image is None:
        raise RequestError(
            400,
            f"input {sig.name!r}: OpenCV could not decode the {_KINDS[kind]} image "
            f"(damaged data, {len(data)} bytes)",
        )
    if image.dtype != sig.dtype:
        raise RequestError(
            422,
            f"input {sig.name!r}: expected dtype {sig.dtype.name}, got a {_KINDS[kind]} image of"
            f" {image.dtype.name}",
        )
    have = 1 if image.ndim == 2 else image.shape[2]
    if have != channels:
        codes = {
            (1, 3): cv2.COLOR_GRAY2BGR,
            (1, 4): cv2.COLOR_GRAY2BGRA,
            (3, 1): cv2.COLOR_BGR2GRAY,
            (3, 4): cv2.COLOR_BGR2BGRA,
            (4, 1): cv2.COLOR_BGRA2GRAY,
            (4, 3): cv2.COLOR_BGRA2BGR,
        }
        image = cv2.cvtColor(image, codes[(have, channels)])
    if channel_order == "rgb" and channels == 3:
        image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    elif channel_order == "rgb" and channels == 4:
        image = cv2.cvtColor(image, cv2.COLOR_BGRA2RGBA)
    if rank == 3 and image.ndim == 2:
        image = image[:, :, None]
    return _fit(sig, image)


def decode_npy(data: bytes, sig: TensorSig, *, max_pixels: int) -> np.ndarray:
    """A .npy body -> its array (never pickles: object arrays are refused). Its pixels are its
    elements, over the last axis's extent for a 3-d array (H x W x C)."""
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            raise ValueError(f"expected .npy format version 1.0 or 2.0, got {version}")
    except (ValueError, SyntaxError, TypeError, struct.error, KeyError) as err:
        raise RequestError(400, f"input {sig.name!r}: damaged .npy header: {err}") from None
    if dtype.hasobject:
        raise RequestError(
            415, f"input {sig.name!r}: expected a numeric .npy array, got dtype {dtype}"
        )
    count = int(np.prod(shape, dtype=np.int64))
    pixels = count // shape[-1] if len(shape) == 3 and shape[-1] > 0 else count
    _check_pixels(sig.name, f"the .npy array {tuple(shape)}", pixels, max_pixels)
    if dtype != sig.dtype:
        raise RequestError(
            422,
            f"input {sig.name!r}: expected dtype {sig.dtype.name}, got a .npy array of "
            f"{dtype.name}",
        )
    offset = stream.tell()
    need = offset + count * dtype.itemsize
    if len(data) < need:
        raise RequestError(
            400,
            f"input {sig.name!r}: truncated .npy array: its header {tuple(shape)} "
            f"{dtype.name} needs {need} bytes, got {len(data)}",
        )
    array = np.frombuffer(data, dtype, count, offset).reshape(shape, order="F" if fortran else "C")
    return _fit(sig, array)


def _fit(sig: TensorSig, array: np.ndarray) -> np.ndarray:
    """The array checked against the input's signature (dtype, rank, static dims): a misfit is a
    422 naming the input."""
    try:
        return check_input(sig, array)
    except InputError as err:
        raise RequestError(422, str(err)) from None


def decode_value(
    data: bytes,
    sig: TensorSig,
    *,
    max_pixels: int,
    channel_order: str = "rgb",
    content_type: str = "",
) -> np.ndarray:
    """One input's bytes (an image or a .npy) -> its array."""
    kind = sniff(data)
    if kind is None:
        claimed = f" (Content-Type {content_type!r})" if content_type else ""
        raise RequestError(
            415,
            f"input {sig.name!r}: not an image or array: expected a JPEG, PNG or WebP image or"
            f" a .npy array, got {_describe_start(data)}{claimed}",
        )
    if kind == "npy":
        return decode_npy(data, sig, max_pixels=max_pixels)
    return decode_image(data, kind, sig, max_pixels=max_pixels, channel_order=channel_order)


# -- multipart bodies -------------------------------------------------------------------------


def _params(header: str) -> tuple[str, dict[str, str]]:
    """A header value's main value and its parameters (RFC 2045 parsing from the stdlib)."""
    message = HeaderParser().parsestr(f"X: {header}\r\n\r\n")
    params = message.get_params(header="X") or []
    main = params[0][0].lower() if params else ""
    return main, {k.lower(): v for k, v in params[1:]}


def split_multipart(body: bytes, content_type: str) -> dict[str, tuple[bytes, str]]:
    """A multipart/form-data body -> {part name: (bytes, its Content-Type)}, in memory."""
    _, params = _params(content_type)
    boundary = params.get("boundary")
    if not boundary:
        raise RequestError(400, "multipart body: the Content-Type names no boundary")
    delimiter = b"--" + boundary.encode("latin-1")
    pieces = body.split(delimiter)
    if len(pieces) < 3 or not pieces[-1].startswith(b"--"):
        raise RequestError(
            400, f"truncated multipart body: expected parts ending with {delimiter + b'--'!r}"
        )
    parts: dict[str, tuple[bytes, str]] = {}
    for n, piece in enumerate(pieces[1:-1]):
        if not piece.startswith(b"\r\n") or not piece.endswith(b"\r\n"):
            raise RequestError(400, f"multipart body: part {n} is not delimited by CRLF lines")
        head, sep, data = piece[2:-2].partition(b"\r\n\r\n")
        if not sep:
            if not head.endswith(b"\r\n") and head:
                raise RequestError(
                    400, f"multipart body: part {n} has no blank line after its headers"
                )
            data = b""
        headers = HeaderParser().parsestr(head.decode("latin-1") + "\r\n\r\n")
        disposition = headers.get("Content-Disposition", "")
        _, dparams = _params(disposition) if disposition else ("", {})
        name = dparams.get("name")
        if not name:
            raise RequestError(
                400,
                f"multipart body: part {n} has no name (Content-Disposition: form-data;"
                " name=INPUT)",
            )
        if name in parts:
            raise RequestError(400, f"multipart body: input {name!r} given twice")
        parts[name] = (data, headers.get("Content-Type", ""))
    return parts


def decode_request(
    body: bytes,
    content_type: str,
    sigs: Sequence[TensorSig],
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    channel_order: str = "rgb",
) -> list[np.ndarray]:
    """A request body -> the model's inputs, validated, in input order."""
    names = [s.name for s in sigs]
    main, _ = _params(content_type) if content_type else ("", {})
    if main == "multipart/form-data":
        parts = split_multipart(body, content_type)
        unknown = [p for p in parts if p not in names]
        if unknown:
            raise RequestError(422, f"unknown input {unknown[0]!r}: the model takes {names}")
        missing = [n for n in names if n not in parts]
        if missing:
            raise RequestError(422, f"missing input(s) {missing}: the model takes {names}")
        return [
            decode_value(
                parts[s.name][0],
                s,
                max_pixels=max_pixels,
                channel_order=channel_order,
                content_type=parts[s.name][1],
            )
            for s in sigs
        ]
    if len(sigs) != 1:
        raise RequestError(
            415,
            f"the model takes {len(sigs)} inputs {names}: expected a multipart/form-data body"
            f" with one part per input, got {main or 'a body without Content-Type'}",
        )
    return [
        decode_value(
            body,
            sigs[0],
            max_pixels=max_pixels,
            channel_order=channel_order,
            content_type=content_type,
        )
    ]


def encode_multipart(inputs: Mapping[str, bytes]) -> tuple[bytes, str]:
    """Client side: {input name: encoded image or .npy bytes} -> (body, Content-Type)."""
    boundary = "gdp-" + np.random.default_rng().bytes(12).hex()
    chunks = []
    for name, data in inputs.items():
        chunks.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n".encode()
            + data
            + b"\r\n"
        )
    chunks.append(f"--{boundary}--\r\n".encode())
    return b"".join(chunks), f"multipart/form-data; boundary={boundary}"


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


# -- responses --------------------------------------------------------------------------------


def wants_json(accept: str) -> bool:
    return any(p.split(";")[0].strip().lower() == JSON_TYPE for p in accept.split(","))


def encode_outputs(outputs: Mapping[str, np.ndarray], accept: str = "") -> tuple[bytes, str]:
    """The outputs -> (body, Content-Type): JSON where `accept` asks for it ({name: {"dtype",
    "shape", "data"}}), else .npy for one output and .npz (uncompressed) for several."""
    if wants_json(accept):
        doc = {
            name: {"dtype": a.dtype.name, "shape": list(a.shape), "data": a.tolist()}
            for name, a in outputs.items()
        }
        return json.dumps(doc).encode(), JSON_TYPE
    if len(outputs) == 1:
        return npy_bytes(next(iter(outputs.values()))), NPY_TYPE
    buf = io.BytesIO()
    np.savez(buf, **outputs)
    return buf.getvalue(), NPZ_TYPE


def decode_outputs(body: bytes, content_type: str, names: Sequence[str] = ()) -> dict:
    """Client side: a response body -> {output name: array} (`names` names a lone .npy)."""
    main = content_type.split(";")[0].strip().lower()
    if main == JSON_TYPE:
        doc = json.loads(body)
        if isinstance(doc.get("error"), str):
            raise ValueError(
                f"the server refused the request ({doc.get('status')}): {doc['error']}"
            )
        return {
            k: np.array(v["data"], np.dtype(v["dtype"])).reshape(v["shape"]) for k, v in doc.items()
        }
    if main == NPZ_TYPE:
        with np.load(io.BytesIO(body), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    if main == NPY_TYPE:
        name = names[0] if names else "output_0"
        return {name: np.load(io.BytesIO(body), allow_pickle=False)}
    raise ValueError(f"expected a .npy, .npz or JSON response, got Content-Type {content_type!r}")


def error_body(err: RequestError) -> bytes:
    return json.dumps({"error": str(err), "status": err.status}).encode()
