"""The one interface every backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np
import onnx

from gdp.runtime.profiling import Profile


class Executable(ABC):
    """A loaded, runnable model. Used from one worker thread at a time."""

    # A shape-generic executable's least run-time extents, as (input index, axis, minimum):
    # it was compiled for shapes that meet them (a smaller one compiles its own).
    min_extents: tuple[tuple[int, int, int], ...] = ()

    def serves(self, shapes: list[tuple[int, ...]]) -> bool:
        """Whether the input shapes (in graph input order) meet `min_extents`."""
        return all(shapes[i][axis] >= least for i, axis, least in self.min_extents)

    @abstractmethod
    def run(self, inputs: list[np.ndarray], profile: Profile | None = None) -> list[np.ndarray]:
        """Run on host arrays in graph input order; return host arrays in graph output order.

        With a profile, fill its host phases (copy in, execute, copy out) and kernel times.
        """

    # Whether launch() returns before the device is done (the gpu): only then does the
    # target's worker launch the next run before finishing this one. A synchronous run is
    # finished at once, so that its task ends without waiting for the next run.
    launches_asynchronously = False

    def launch(
        self, inputs: list[np.ndarray], profile: Profile | None = None
    ) -> Callable[[], list[np.ndarray]]:
        """Start a run and return the function that waits for it and returns run()'s value. A
        backend whose device computes asynchronously returns before the device is done, so
        that the next run's host work overlaps this one; here the run is done when launch
        returns."""
        outputs = self.run(inputs, profile)
        return lambda: outputs

    def run_many(
        self, batch: list[list[np.ndarray]], profile: Profile | None = None
    ) -> list[list[np.ndarray]]:
        """Run once per entry of `batch` (each a list of host arrays in graph input order), one
        after another; return each run's host arrays. A backend overrides it to keep the
        per-run overhead down (gdp's ragged batches call it)."""
        return [self.run(inputs, profile) for inputs in batch]


class CostProfile(Protocol):
    """What a backend may read of the target's cost profile (gdp.rewrites.profiles.CostProfile),
    handed to it directly by compile()."""

    fusion_alpha: float  # per byte crossing a kernel boundary (the fusion plan's cost)
    fusion_beta: float  # per unit of variance of the kernels' op counts


class Backend(ABC):
    name: str
    # True: one compiled model per concrete input shape (TVM, ATC); False: one for all shapes.
    static_shapes: bool = True
    # With static_shapes: whether compile() also takes a graph with free dimensions and makes
    # one executable whose kernels read the extents at run time (it may raise CompileError for
    # a graph that does not lower so: the model then compiles per shape).
    generic_shapes: bool = False
    # Rewrites this backend's importer needs, run before the profile's own choices.
    required_rewrites: tuple[str, ...] = ()
    # compile() options this backend takes (gdp.compile(..., **options)).
    options: frozenset[str] = frozenset()

    @abstractmethod
    def fingerprint(self) -> str:
        """Everything about the toolchain and device that changes compiled code (cache key)."""

    def runtime_fingerprint(self) -> str:
        """What must match for code compiled elsewhere to load here (a bundle): by default
        everything `fingerprint` names; a backend whose code runs on any machine its compiler
        could target (checked apart) names less."""
        return self.fingerprint()

    def profile_facts(self, profile: CostProfile | None) -> dict:
        """What of the target's cost profile compile() reads, JSON-able: part of the cache key, so
        that a recalibrated profile rebuilds only the backends whose code it changes."""
        return {}

    @abstractmethod
    def compile(
        self, model: onnx.ModelProto, outdir: Path, options: dict, profile: CostProfile | None
    ) -> dict:
        """Compile `model` into files under `outdir` with the backend's `options` and the target's
        cost `profile` (None for a target without one); return JSON-able metadata for load()."""

    @abstractmethod
    def load(self, artifact_dir: Path, meta: dict) -> Executable:
        """Load what compile() wrote. Must not need the compiler."""
