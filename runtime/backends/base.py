"""The one interface every backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np
import onnx
from gdp.runtime.profiling import Profile


class Executable(ABC):
    """A loaded, runnable model. Used from one worker thread at a time."""

    @abstractmethod
    def run(self, inputs: list[np.ndarray], profile: Profile | None = None) -> list[np.ndarray]:
        """Run on host arrays in graph input order; return host arrays in graph output order.

        With a profile, fill its host phases (copy in, execute, copy out) and kernel times.
        """


class Backend(ABC):
    name: str
    # True: one compiled model per concrete input shape (TVM, ATC); False: one for all shapes.
    static_shapes: bool = True
    # Rewrites this backend's importer needs, run before the profile's own choices.
    required_rewrites: tuple[str, ...] = ()
    # compile() options this backend takes (gdp.compile(..., **options)).
    options: frozenset[str] = frozenset()

    @abstractmethod
    def fingerprint(self) -> str:
        """Everything about the toolchain and device that changes compiled code (cache key)."""

    @abstractmethod
    def compile(self, model: onnx.ModelProto, outdir: Path, options: dict) -> dict:
        """Compile `model` into files under `outdir`; return JSON-able metadata for load()."""

    @abstractmethod
    def load(self, artifact_dir: Path, meta: dict) -> Executable:
        """Load what compile() wrote. Must not need the compiler."""
