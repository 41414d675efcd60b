"""gdp's environment switches (GDP_TARGET, GDP_CV2_STRICT, GDP_CV2_DISPATCH) and the target they
pick, read on every eager call, cheaply: os.environ.get encodes the name and decodes the value,
about 0.4 us a switch, where a gdp.cv2 call of a small image takes 10. On POSIX, CPython keeps
os.environ's contents as a dict of bytes (os.environ._data), updated by every assignment
through os.environ (and so by pytest's monkeypatch.setenv): one lookup there answers the
same."""

from __future__ import annotations

import os
import sys

_BYTES = os.environ._data if os.name == "posix" else None  # type: ignore[attr-defined]
_NAMES = None if _BYTES is None else _BYTES.keys()  # a live view


def get(name: str, default: str | None = None) -> str | None:
    """os.environ.get(name, default)."""
    if _BYTES is None:
        return os.environ.get(name, default)
    value = _BYTES.get(name.encode())
    return default if value is None else os.fsdecode(value)


def flag(name: str) -> bool:
    """Whether `name` is set to anything but "" and "0"."""
    if _BYTES is None:
        return os.environ.get(name, "") not in ("", "0")
    return _BYTES.get(name.encode()) not in (None, b"", b"0")


_default_target = None  # gdp.api.default_target, imported at the first call that asks


def default_target():
    """gdp.api.default_target() (the target an eager call runs on), without the import
    statement's cost on every call (about 0.5 us: a gdp.cv2 call asks two or three times)."""
    global _default_target
    if _default_target is None:
        from gdp.api import default_target

        _default_target = default_target
    return _default_target()


class Switches:
    """Switches asked together on every call: `unset()` says whether none of them is set and no
    gdp.set_target() chose a target (the usual case), in a few dict lookups, their names
    encoded once (False where os.environ cannot be read so: ask each then). A process that
    never imported gdp.api never called set_target."""

    __slots__ = ("names", "_keys")

    def __init__(self, *names: str):
        self.names = names
        self._keys = tuple(name.encode() for name in names)

    def unset(self) -> bool:
        if _NAMES is None or not _NAMES.isdisjoint(self._keys):
            return False
        api = sys.modules.get("gdp.api")
        return api is None or api._default_target is None
