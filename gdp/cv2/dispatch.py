"""Never slower by design: on the cpu target, an eager gdp.cv2 call whose calibrated gdp time
is above OpenCV's, for its function and the image's size class, runs OpenCV's own function
instead. The two agree within OpenCV's tolerances (tests/gdp/cv2 hold gdp's results to
OpenCV's), so the choice changes the time, not the answer. It is the fallback for small images
and the few calls OpenCV does better; gdp's own kernels are what the speed goals are about.

The table comes from `gdp calibrate --cv2` (gdp.cv2.calibration), which times each function
against OpenCV at one size per class and stores the result in gdp's cache directory as
cv2-dispatch.json. It applies only on the machine it was measured on (the same CPU model, core
count, OpenCV and gdp): anywhere else, or without a table, every accelerated call runs gdp.
`set_dispatch()` gives one directly (a dict as `calibrate` returns, or a path) or turns
dispatch off; GDP_CV2_DISPATCH=0 and GDP_CV2_STRICT=1 turn it off too (strict means every
accelerated call runs gdp's kernels).
"""

from __future__ import annotations

import json
import os
import threading
from bisect import bisect_left
from pathlib import Path
from typing import Any

import cv2 as _cv2
import numpy as np

from gdp import environ

# Size classes by pixel count: an image belongs to the first whose reference size holds at least
# as many pixels (the reference sizes are what calibration times).
SIZE_CLASSES: tuple[tuple[str, int, int], ...] = (
    ("240p", 240, 320),
    ("480p", 480, 640),
    ("1080p", 1080, 1920),
    ("4k", 2160, 3840),
)
FORMAT = 1
FILE_NAME = "cv2-dispatch.json"

# The argument that picks a different kernel within one function, calibrated apart:
# name -> (position, keyword, default). A key is "name" or "name:value".
VARIANTS: dict[str, tuple[int, str, Any]] = {
    "cvtColor": (1, "code", None),
    "resize": (5, "interpolation", _cv2.INTER_LINEAR),
    "warpAffine": (4, "flags", _cv2.INTER_LINEAR),
    "threshold": (3, "type", None),
    "normalize": (4, "norm_type", _cv2.NORM_L2),
    # 90 degrees: gdp.runtime.transpose's kernel; 180: the program of a flip
    "rotate": (1, "rotateCode", None),
}
# The bits of a variant value that name the variant, where not all do: warpAffine's
# interpolation, without WARP_INVERSE_MAP.
VARIANT_MASKS: dict[str, int] = {"warpAffine": _cv2.INTER_MAX}

_lock = threading.Lock()
_UNSET = object()
_table: Any = _UNSET  # the active table's entries, None for none, _UNSET before the first look


class _Unread(dict):
    """_rules before the table is read: its first lookup reads it (_active)."""

    def get(self, name, default=None):
        _active()
        rules = _rules  # self only while another thread's set_dispatch is half done
        return default if rules is self else rules.get(name, default)


# {name: (position, keyword, default, flags, mask)} for each name the table gives any size to:
# its VARIANTS argument (position -1: none), _slower_classes' flags (by variant value where it
# has one) and the bits of the value that name the variant: what an eager call reads of the
# table, in one lookup by name (_rules_of(_table)); gdp/cv2/_dispatch.c reads it too.
_rules: dict[str, tuple] = _Unread()


# (size class, most pixels): size_class's loop without a multiplication per class.
_MOST_PIXELS = tuple((name, h * w) for name, h, w in SIZE_CLASSES)
# The classes' most pixels, ascending, for bisect: an image's class index is the first that
# holds it (len(SIZE_CLASSES) past the largest: that counts as the largest, see _slower_classes).
_BOUNDS = tuple(most for _, most in _MOST_PIXELS)


def size_class(height: int, width: int) -> str:
    return _class_of(int(height) * int(width))


def _class_of(pixels: int) -> str:
    return _MOST_PIXELS[min(bisect_left(_BOUNDS, pixels), len(_BOUNDS) - 1)][0]


def variant_of(name: str, args: tuple, kwargs: dict) -> int | None:
    """The value of a call's VARIANTS argument (None: not given, or a name without one)."""
    variant = VARIANTS.get(name)
    if variant is None:
        return None
    position, keyword, default = variant
    value = args[position] if len(args) > position else kwargs.get(keyword, default)
    if value is None:
        return None
    return int(value) & VARIANT_MASKS.get(name, -1)


def key_of(name: str, args: tuple, kwargs: dict) -> str:
    """The table key of a call: the function's name, with the value of its VARIANTS argument."""
    value = variant_of(name, args, kwargs)
    return f"{name}:{value}" if value is not None else name


def machine() -> dict[str, Any]:
    """What a table's timings depend on besides gdp's code: the table applies only where these
    are the same."""
    from gdp.version import __version__

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "opencv": _cv2.__version__, "gdp": __version__}


def table_path(cache_dir: Path | None = None) -> Path:
    from gdp.runtime.cache import default_cache_dir

    return Path(cache_dir or default_cache_dir()) / FILE_NAME


def validate(table: Any) -> dict[str, dict[str, dict[str, float]]]:
    """A table's entries {key: {size class: {"gdp_ms", "opencv_ms"}}}, or a ValueError naming
    what is wrong with it."""
    if not isinstance(table, dict) or table.get("format") != FORMAT:
        got = table.get("format") if isinstance(table, dict) else type(table).__name__
        raise ValueError(f"a gdp.cv2 dispatch table: expected format {FORMAT}, got {got!r}")
    entries = table.get("entries")
    if not isinstance(entries, dict):
        raise ValueError("a gdp.cv2 dispatch table: expected 'entries' as a dict by function")
    classes = {name for name, _, _ in SIZE_CLASSES}
    for key, per_class in entries.items():
        if not isinstance(per_class, dict) or not set(per_class) <= classes:
            raise ValueError(
                f"a gdp.cv2 dispatch table: {key!r} expected size classes of {sorted(classes)},"
                f" got {per_class!r}"
            )
        for cls, times in per_class.items():
            if not (
                isinstance(times, dict)
                and all(isinstance(times.get(k), int | float) for k in ("gdp_ms", "opencv_ms"))
            ):
                raise ValueError(
                    f"a gdp.cv2 dispatch table: {key!r} {cls}: expected gdp_ms and opencv_ms,"
                    f" got {times!r}"
                )
    return entries


def set_dispatch(table: dict | str | Path | None = "auto") -> None:
    """The dispatch table of this process: "auto" (the default) is the one `gdp calibrate
    --cv2` stored for this machine, if any; a dict (as gdp.cv2.calibration.calibrate returns)
    or the path of a stored one applies as given, wherever it was measured; None runs every
    accelerated call through gdp."""
    global _table, _rules
    if table is None:
        entries = None
    elif isinstance(table, str) and table == "auto":
        entries = _UNSET
    elif isinstance(table, str | Path):
        entries = validate(json.loads(Path(table).read_text()))
    else:
        entries = validate(table)
    with _lock:
        _table = entries
        _rules = _Unread() if entries is _UNSET else _rules_of(entries)


def _slower_classes(entries: dict | None) -> dict[str, dict[int | None, tuple[bool, ...]]]:
    """{name: {variant value (None: none): for each size class by index, and once more for
    images past the largest, whether gdp's time there is above OpenCV's}}, for the keys with
    any: what an eager call asks of the table, looked up once per call without formatting its
    key or naming its class."""
    out: dict[str, dict[int | None, tuple[bool, ...]]] = {}
    for key, per_class in (entries or {}).items():
        flags = tuple(
            cls in per_class and per_class[cls]["gdp_ms"] > per_class[cls]["opencv_ms"]
            for cls, _, _ in SIZE_CLASSES
        )
        if any(flags):
            name, _, value = key.partition(":")
            out.setdefault(name, {})[int(value) if value else None] = (*flags, flags[-1])
    return out


def _stored() -> dict | None:
    """This machine's calibrated table from the cache, or None (absent, unreadable, or measured
    elsewhere: timings from another machine say nothing here)."""
    path = table_path()
    try:
        table = json.loads(path.read_text())
        entries = validate(table)
    except (OSError, ValueError):
        return None
    return entries if table.get("machine") == machine() else None


def _rules_of(entries: dict | None) -> dict[str, tuple]:
    rules = {}
    for name, per_variant in _slower_classes(entries).items():
        position, keyword, default = VARIANTS.get(name, (-1, None, None))
        flags = per_variant if position >= 0 else per_variant.get(None)
        # the bits of an int variant that name it (-1: all): for the C dispatcher, which
        # answers a value without a key of its own by them, as _variant_flags
        rules[name] = (position, keyword, default, flags, VARIANT_MASKS.get(name, -1))
    return rules


def _active() -> dict | None:
    global _table, _rules
    if _table is _UNSET:
        with _lock:
            if _table is _UNSET:
                _table = _stored()
                _rules = _rules_of(_table)
    return _table


def enabled() -> bool:
    """Dispatch not turned off (GDP_CV2_DISPATCH=0 or off) nor overridden by GDP_CV2_STRICT."""
    off = environ.get("GDP_CV2_DISPATCH") in ("0", "off")
    return not off and not environ.flag("GDP_CV2_STRICT")


def runs_opencv(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether this eager call is one the table gives to OpenCV. On every accelerated call,
    where a small image's whole call takes 5-20 us and OpenCV's own 1-10: one lookup by name
    (all where the table gives the function nothing), then the variant's flags and the size
    class's (0.4-0.5 us where the table gives the call to OpenCV and no switch is set, on a
    2-core VM where a call of an empty function took 0.1)."""
    image = args[0] if args else kwargs.get("src", kwargs.get("image"))
    # First: a call on TF tensors (graph mode) reads no table. Inside a tf.function, autograph
    # runs a converted copy of this code, whose module state is not this module's (the table
    # stayed unset, and the first call of a process failed).
    if not isinstance(image, np.ndarray):
        return False
    rule = _rules.get(name)
    if rule is None:  # the table gives this function nothing
        return False
    position, keyword, flags, shape = rule[0], rule[1], rule[3], image.shape
    if position >= 0:  # by the variant argument's value: 6, 6.0 and np.int64(6) alike
        value = args[position] if len(args) > position else kwargs.get(keyword, rule[2])
        try:
            flags = flags[value]
        except (KeyError, TypeError):
            flags = _variant_flags(name, flags, value)
    if flags is None or len(shape) < 2 or not flags[bisect_left(_BOUNDS, shape[0] * shape[1])]:
        return False
    # The table times gdp's cpu kernels, and only where dispatch is on. No switch set and no
    # set_target: both hold, without reading a target.
    return _SWITCHES.unset() or (enabled() and environ.default_target().name == "cpu")


def _variant_flags(name: str, per_variant: dict, value) -> tuple | None:
    """The flags of a variant argument no key equals: warpAffine's flags with more than the
    interpolation (WARP_INVERSE_MAP), a value of another type; None where the table has none
    or it is no number (gdp's function then decides what it means)."""
    try:
        value = int(value)
    except (TypeError, ValueError):
        return None
    return per_variant.get(value & VARIANT_MASKS.get(name, -1))


# The switches that turn dispatch off or choose another target than the cpu one.
_SWITCHES = environ.Switches("GDP_CV2_DISPATCH", "GDP_CV2_STRICT", "GDP_TARGET")


def where(names: list[str]) -> dict[str, dict[str, str]]:
    """{name: {size class: where}} for every accelerated name: where an eager call on the cpu
    target runs, "gdp" or "opencv", or for a function calibrated per variant "opencv for
    code=6,40" (those variants run OpenCV's, the others gdp's)."""
    entries = (_active() if enabled() else None) or {}
    out = {}
    for name in names:
        keyword = VARIANTS[name][1] if name in VARIANTS else None
        per_class = {}
        for cls, _, _ in SIZE_CLASSES:
            slower = [
                key
                for key, times in entries.items()
                if key.split(":")[0] == name
                and cls in times
                and times[cls]["gdp_ms"] > times[cls]["opencv_ms"]
            ]
            if name in slower or (slower and keyword is None):
                per_class[cls] = "opencv"
            elif slower:
                values = ",".join(sorted(k.split(":", 1)[1] for k in slower))
                per_class[cls] = f"opencv for {keyword}={values}"
            else:
                per_class[cls] = "gdp"
        out[name] = per_class
    return out
