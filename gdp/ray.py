"""gdp on Ray Data: preprocess a dataset of images with a gdp model, one model per actor.

    import ray, gdp.ray
    ds = ray.data.read_images("photos/", include_paths=True)     # images of mixed sizes
    ds = gdp.ray.map_batches(ds, "preprocess.onnx", concurrency=2)  # + column "tensor"
    ds.write_parquet("out/")

or, with Ray Data's own call: `ds.map_batches(gdp.ray.Preprocessor, fn_constructor_args=(model,),
concurrency=2, batch_format="numpy")`. Each actor loads (or compiles) the model once; a batch of
images of different sizes runs as one ragged gdp batch (`Model.run_batch`), each image resized
by the model's own graph. Needs the `serve` extra (`pip install 'gdp[serve]'`: Ray with Ray Data).

(This module is `gdp.ray`; `import ray` in it is absolute and finds Ray itself.)"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gdp.errors import GdpError, InputError
from gdp.serving.stage import ModelSource, load_model, model_source

DEFAULT_COLUMN = "image"  # what ray.data.read_images names its column


class Preprocessor:
    """A callable class for `Dataset.map_batches`: loads the model once per actor, then maps
    a numpy batch {column: images, ...} to the same batch plus one column per model output
    (the input columns dropped unless `keep_inputs`).

    A one-input model reads `column` (default "image", read_images' column); a model with
    several inputs reads the columns named by its inputs. Images of different sizes come from
    Ray Data as an object array of arrays; all of them run as one ragged batch. Outputs of one
    shape come back as (N, ...) tensor columns; an output whose shape depends on the image
    makes each image run on its own and the column an object array of arrays."""

    def __init__(
        self,
        model: Any,
        *,
        column: str = DEFAULT_COLUMN,
        target: str | None = None,
        keep_inputs: bool = False,
    ) -> None:
        self.model = load_model(model_source(model, target))
        names = self.model.input_names
        self.columns = [column] if len(names) == 1 else list(names)
        self.keep_inputs = keep_inputs

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [c for c in self.columns if c not in batch]
        if missing:
            raise InputError(
                f"gdp.ray: the batch has columns {sorted(batch)}, expected {self.columns}"
                " (the model's inputs; column= names a one-input model's)"
            )
        count = len(batch[self.columns[0]])
        if len(self.columns) == 1:
            items: Sequence = list(batch[self.columns[0]])
        else:
            items = [tuple(batch[c][n] for c in self.columns) for n in range(count)]
        out = {k: v for k, v in batch.items() if self.keep_inputs or k not in self.columns}
        if count == 0:
            return out
        try:
            stacked = self.model.run_batch(items)
        except InputError as err:
            if "depends on the input size" not in str(err):
                raise
            out.update(self._one_by_one(items))
            return out
        if not isinstance(stacked, dict):
            stacked = {self.model.output_names[0]: stacked}
        clash = [k for k in stacked if k in out]
        if clash:
            raise GdpError(f"gdp.ray: output {clash[0]!r} has the name of a column of the batch")
        out.update(stacked)
        return out

    def _one_by_one(self, items: Sequence) -> dict[str, np.ndarray]:
        columns: dict[str, np.ndarray] = {
            name: np.empty(len(items), object) for name in self.model.output_names
        }
        for n, item in enumerate(items):
            args = item if isinstance(item, tuple) else (item,)
            result = self.model.submit(list(args), None, wait=True).result()
            for name, array in result.items():
                columns[name][n] = array
        return columns


def map_batches(
    ds,
    model: Any,
    *,
    column: str = DEFAULT_COLUMN,
    target: str | None = None,
    keep_inputs: bool = False,
    batch_size: int = 16,
    concurrency: int = 1,
    num_cpus: float = 1.0,
    **options: Any,
):
    """`ds.map_batches` with a gdp model: `concurrency` actors, each loading `model` (a saved
    model or ONNX path, a bundle directory, a `gdp.Model`) once; `batch_size` images a batch.
    Other keyword arguments go to Ray Data's map_batches."""
    source: ModelSource = model_source(model, target)
    return ds.map_batches(
        Preprocessor,
        fn_constructor_args=(source,),
        fn_constructor_kwargs={"column": column, "target": target, "keep_inputs": keep_inputs},
        batch_size=batch_size,
        batch_format="numpy",
        concurrency=concurrency,
        num_cpus=num_cpus,
        **options,
    )


__all__ = ["Preprocessor", "map_batches"]
