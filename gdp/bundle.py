"""Ahead-of-time bundles: every compiled executable of a model in one directory, with a manifest,
for a serving process that must never compile.

    model.export("bundle/")                     # or: gdp export model.onnx -o bundle/
    served = gdp.load("bundle/")                # loads the bundled executables, compiles nothing

A bundle holds the front end's graph (`source.onnx`), each executable the model has (the
shape-generic one where the model compiled its free dimensions generically, and one per concrete
shape compiled: the shapes run so far, the static shape, the shapes asked for at export) as the
backend wrote it into its cache entry (`executables/N/`) with the graph the backend received
(`graphs/N.onnx`), and `manifest.json`: the gdp version, target, backend, the backend's
`runtime_fingerprint()` (TVM's runtime and gdp's code: what must match to load) and
`fingerprint()` (the toolchain that compiled it), the host's CPU, its flags and LLVM features
(a cpu bundle), the model's
options, what each executable was compiled for, and every file's size and SHA-256 (the disk
cache's checksum, gdp.runtime.cache).

`load` refuses, with a `BundleError` naming what differs, a bundle written by another gdp version,
for another target, by another runtime, or for a CPU that has features this one lacks (a library
built for another CPU may crash on this one), and a bundle whose files do not match their
checksums. Loading needs TVM's runtime only (TVM_USE_RUNTIME_LIB=1 works): the CPU check then
reads Linux's CPU flags, since LLVM's feature names need the compiler; a gpu bundle's
architecture is checked against the GPU when its libraries load.

Trust model: a bundle is code (its libraries are dlopen'ed), trusted as far as its directory is
trusted. `load` refuses (a `BundleError` naming the path, its mode and owner) a bundle whose
directory, or any directory or file in it, is owned by another user (root aside) or writable by
group or others, or that holds a symbolic link: only its owner can have put code there. The
manifest's checksums (recorded at export, verified before anything is loaded) catch a damaged
or partly replaced bundle; they are not a signature: whoever may write the bundle may rewrite
the manifest too, which is why its directory must be private. `export` writes every file and
directory without group or world write permission. A loaded model never compiles:
a call with a shape that no bundled executable takes is a `BundleShapeError` naming the shape and
the bundle's shapes, and `report()["cache"]` is "bundle".
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import onnx

from gdp.errors import GdpError, InputError
from gdp.model import GENERIC, Model, Specialization
from gdp.progress import progress
from gdp.rewrites import load_profile
from gdp.runtime.backends import Backend, get_backend
from gdp.runtime.cache import MANIFEST, _sha256, check_private
from gdp.runtime.targets import Target, get_target
from gdp.signature import TensorSig, graph_outputs
from gdp.version import __version__

KIND = "gdp-bundle"
FORMAT = 1
SOURCE = "source.onnx"
FREE = "?"


class BundleError(GdpError):
    """A bundle cannot be written, or cannot be used here (not a bundle, another gdp version,
    toolchain or CPU, a file that fails its checksum)."""


class BundleShapeError(BundleError, InputError):
    """A loaded bundle has no executable for the shape a call gave (it never compiles one)."""


# -- shapes ---------------------------------------------------------------------------------


def parse_shapes(text: str, inputs: Sequence[TensorSig]) -> dict[str, tuple[int | None, ...]]:
    """`"image=480x640x3"` (several inputs: `"a=2x3,b=4"`; one input may leave out its name;
    `?` a free dimension) -> {input name: dims}, checked against the model's inputs."""
    names = [s.name for s in inputs]
    given: dict[str, str] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, dims = part.rpartition("=")
        if not sep:
            if len(names) != 1:
                raise BundleError(
                    f"shapes {text!r}: name each input (NAME=DIMS), the model has {names}"
                )
            name = names[0]
        given[name.strip()] = dims.strip()
    shapes = {}
    for name, dims in given.items():
        try:
            shapes[name] = tuple(None if d == FREE else int(d) for d in dims.split("x"))
        except ValueError:
            raise BundleError(
                f"shapes {text!r}: input {name!r}: expected dimensions like 480x640x3 "
                f"(? for a free one), got {dims!r}"
            ) from None
    return check_shapes(shapes, inputs)


def check_shapes(
    shapes: Mapping[str, Sequence[int | None]], inputs: Sequence[TensorSig]
) -> dict[str, tuple[int | None, ...]]:
    """Every input's dims given, of its rank, equal to its static dims."""
    by_name = {s.name: s for s in inputs}
    unknown = sorted(set(shapes) - set(by_name))
    if unknown:
        raise BundleError(f"shapes: unknown input {unknown[0]!r}, the model has {list(by_name)}")
    missing = [n for n in by_name if n not in shapes]
    if missing:
        raise BundleError(f"shapes: no shape for input {missing[0]!r}")
    out = {}
    for name, sig in by_name.items():
        dims = tuple(None if d is None else int(d) for d in shapes[name])
        fits = len(dims) == len(sig.shape) and all(
            s is None or d == s for d, s in zip(dims, sig.shape, strict=True)
        )
        if not fits or any(d is not None and d < 1 for d in dims):
            raise BundleError(
                f"shapes: input {name!r} is {sig.describe()}, got {describe_shape(dims)}"
            )
        out[name] = dims
    return out


def describe_shape(dims: Iterable[int | None]) -> str:
    return "x".join(FREE if d is None else str(d) for d in dims)


def _describe(shapes: Mapping[str, Iterable[int | None]]) -> str:
    return ",".join(f"{n}={describe_shape(d)}" for n, d in shapes.items())


# -- the host -------------------------------------------------------------------------------


def host_facts(backend: Backend) -> dict:
    """What of this machine a backend's code depends on beyond its fingerprint: the machine,
    and for a CPU backend (one with `cpu_facts`), its CPU's flags and the features LLVM
    compiles for."""
    facts: dict[str, Any] = {"machine": platform.machine(), "system": platform.system()}
    cpu_facts = getattr(backend, "cpu_facts", None)
    if callable(cpu_facts):
        facts.update(cpu_facts())
    return facts


# -- export ---------------------------------------------------------------------------------


def export(
    model: Model,
    directory: str | os.PathLike,
    shapes: Iterable[Mapping[str, Sequence[int | None]] | str] | None = None,
) -> Path:
    """Write every compiled executable of `model` into the bundle `directory` (see the module's
    doc). `shapes` (dicts of dims, or strings like "image=480x640x3") are compiled first; `?` /
    None dims ask for the shape-generic executable. Returns the bundle's path."""
    asked = [
        parse_shapes(s, model.inputs) if isinstance(s, str) else check_shapes(s, model.inputs)
        for s in (shapes or [])
    ]
    root = Path(directory)
    _check_destination(root)
    for shape in progress(asked, desc="gdp export: compiling", unit="shape"):
        _compile(model, shape)
    model.wait_specializations()  # hot shapes compiling in the background go in too
    with model._lock:
        specs = list(model._specialized.items())
    if not specs:
        free = {s.name: s.shape for s in model.inputs}
        raise BundleError(
            f"nothing to export: the model has compiled no shape yet (its inputs "
            f"{_describe(free)} have free dimensions); give the shapes to bundle "
            f"(--shapes / shapes=) or run the model on them first"
        )
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.tmp-", dir=root.parent))
    try:
        executables = [
            _write_executable(model, key, spec, tmp, index)
            for index, (key, spec) in enumerate(
                progress(specs, desc="gdp export: writing", unit="executable")
            )
        ]
        (tmp / SOURCE).write_bytes(model.source_onnx.SerializeToString())
        backend = model._backend
        files = {}
        for path in sorted(p for p in tmp.rglob("*") if p.is_file()):
            name = path.relative_to(tmp).as_posix()
            files[name] = {"size": path.stat().st_size, "sha256": _sha256(path)}
        manifest = {
            "kind": KIND,
            "format": FORMAT,
            "gdp": __version__,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "target": model.target.name,
            "backend": backend.name,
            # What must match to load (check_compatible); the toolchain is for people.
            "fingerprint": backend.runtime_fingerprint(),
            "toolchain": backend.fingerprint(),
            "host": host_facts(backend),
            "precision": model.precision,
            "options": model.options,
            "generic_error": model.generic_error,
            "source": SOURCE,
            "inputs": [{"name": s.name, "shape": list(s.shape)} for s in model.inputs],
            "executables": executables,
            "files": files,
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, default=str))
        _publish(tmp, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def _compile(model: Model, shapes: dict[str, tuple[int | None, ...]]) -> None:
    """Make the model compile (or take from its caches) the executable for `shapes`."""
    own = {s.name: s.shape for s in model.inputs}
    if model._scanned_inputs():
        raise BundleError(
            "this fp16 model measures its float inputs' ranges on each run "
            f"({model._scanned_inputs()}): declare input_ranges= to export it"
        )
    if any(d is None for dims in shapes.values() for d in dims):
        if shapes != own:
            raise BundleError(
                f"shapes {_describe(shapes)}: a free dimension (?) stands for the model's own "
                f"free dimensions ({_describe(own)}); give every other one"
            )
        if not model._generic:
            if model.precision == "fp16":
                why = "fp16 compiles one executable per shape"
            elif model.generic_error:
                why = f"its generic compile failed: {model.generic_error}"
            else:
                why = f"it compiles per shape (specialize={model.specialize!r})"
            raise BundleError(
                f"shapes {_describe(shapes)}: the model has no shape-generic executable on "
                f"target {model.target.name!r} ({why}): give concrete shapes"
            )
        model._generic_specialization()
        return
    if model._generic:
        # A generic model runs every shape on its generic executable: the shape's own executable
        # is built here, as its background specialisation would build it.
        key = (tuple(tuple(shapes[n]) for n in model.input_names), ())
        if key not in model._specialized:
            spec = model._build(dict(shapes), dict(model.input_ranges))
            with model._lock:
                model._keep(key, spec)
        return
    model._specialization(shapes, {})


def _entry_of(model: Model, spec: Specialization) -> tuple[Path, dict]:
    """The disk cache entry holding `spec`'s files; compiled again into the cache where the entry
    is gone (evicted, damaged, or the cache was not writable)."""
    found = model._cache.lookup(spec.key)
    if found is not None:
        return found
    backend = model._backend
    profile = (
        load_profile(model.target.profile, model._cache.root) if model.target.profile else None
    )
    return model._cache.store(
        spec.key, lambda d: backend.compile(spec.onnx, d, model.options, profile)
    )


def _write_executable(model: Model, key: Any, spec: Specialization, tmp: Path, index: int) -> dict:
    entry, meta = _entry_of(model, spec)
    where = f"executables/{index}"
    (tmp / where).mkdir(parents=True)
    for name in meta["files"]:
        (tmp / where / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(entry / name, tmp / where / name)
    graph = f"graphs/{index}.onnx"
    (tmp / graph).parent.mkdir(exist_ok=True)
    (tmp / graph).write_bytes(spec.onnx.SerializeToString())
    generic = key == GENERIC
    if generic:
        shapes = {s.name: s.shape for s in model.inputs}
        call_ranges: dict = {}
    else:
        shape_key, ranges_key = key
        shapes = dict(zip(model.input_names, shape_key, strict=True))
        call_ranges = dict(ranges_key)
    return {
        "generic": generic,
        "shapes": {n: list(d) for n, d in shapes.items()},
        # the fp16 ranges of the call (the key) and all of them (what the backend compiled for)
        "call_ranges": {n: list(r) for n, r in call_ranges.items()},
        "ranges": {n: list(r) for n, r in {**model.input_ranges, **call_ranges}.items()},
        "cache_key": spec.key,
        "dir": where,
        "graph": graph,
        "meta": meta,
        "kernels": spec.kernels,
        "rewrites": spec.rewrites,
        "fusion": spec.fusion,
        "fp16": spec.fp16,
    }


def _is_bundle(root: Path) -> bool:
    try:
        return json.loads((root / MANIFEST).read_text()).get("kind") == KIND
    except (OSError, ValueError, AttributeError):
        return False


def _check_destination(root: Path) -> None:
    if root.exists() and not (root.is_dir() and (not any(root.iterdir()) or _is_bundle(root))):
        raise BundleError(
            f"{root} exists and is not a gdp bundle: give a new or empty directory "
            "(an existing bundle is replaced)"
        )


def _publish(tmp: Path, root: Path) -> None:
    """Move the finished bundle into place; an old bundle there is replaced whole."""
    os.chmod(tmp, 0o755)
    for path in tmp.rglob("*"):  # whatever the umask: only the owner may write a bundle
        os.chmod(path, path.stat().st_mode & ~0o022)
    if root.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{root.name}.old-", dir=root.parent))
        os.rename(root, old / root.name)
        os.rename(tmp, root)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, root)


# -- load -----------------------------------------------------------------------------------


def read_manifest(root: Path) -> dict:
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except FileNotFoundError:
        raise BundleError(f"{root}: not a gdp bundle (no {MANIFEST})") from None
    except (OSError, ValueError) as err:
        raise BundleError(f"{root}/{MANIFEST}: unreadable ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != KIND:
        raise BundleError(f"{root}: {MANIFEST} is not a gdp bundle's manifest")
    if manifest.get("format") != FORMAT:
        raise BundleError(
            f"{root}: bundle format {manifest.get('format')!r}, this gdp reads format {FORMAT}"
        )
    return manifest


def check_compatible(root: Path, manifest: dict, target: Target) -> Backend:
    """The backend that runs the bundle here; a BundleError naming what differs where the bundle
    was built by another gdp, for another target, or by another toolchain or CPU."""
    again = "export the bundle again with this gdp on this machine (or one like it)"
    if manifest.get("gdp") != __version__:
        raise BundleError(
            f"{root}: the bundle was written by gdp {manifest.get('gdp')}, this is gdp "
            f"{__version__}: {again}"
        )
    if target.name != manifest.get("target"):
        raise BundleError(
            f"{root}: the bundle holds code for target {manifest.get('target')!r}, not "
            f"{target.name!r}: export it for {target.name!r}"
        )
    backend = get_backend(target.backend)
    if backend.name != manifest.get("backend"):
        raise BundleError(
            f"{root}: the bundle was compiled by backend {manifest.get('backend')!r}, target "
            f"{target.name!r} runs on {backend.name!r}: {again}"
        )
    host = host_facts(backend)
    built = manifest.get("host") or {}
    if built.get("machine") != host["machine"]:
        raise BundleError(
            f"{root}: the bundle was built for a {built.get('machine')} machine, this is "
            f"{host['machine']}: {again}"
        )
    # LLVM's features where both machines have the compiler to name them, else the CPU flags
    # Linux lists (a runtime-only TVM: TVM_USE_RUNTIME_LIB=1).
    kind = "cpu_features" if "cpu_features" in host else "cpu_flags"
    missing = sorted(set(built.get(kind, [])) - set(host.get(kind, [])))
    if kind in built and kind not in host:
        missing = [f"the {kind.replace('_', ' ')} it needs could not be read here"]
    if missing:
        raise BundleError(
            f"{root}: the bundle was built for CPU {built.get('cpu')!r}; this CPU "
            f"({host.get('cpu')!r}) lacks {', '.join(missing[:12])}"
            f"{' ...' if len(missing) > 12 else ''}: {again}"
        )
    fingerprint = backend.runtime_fingerprint()
    if manifest.get("fingerprint") != fingerprint:
        raise BundleError(
            f"{root}: the bundle was built for runtime {manifest.get('fingerprint')!r} "
            f"(toolchain {manifest.get('toolchain')!r}), this machine's is {fingerprint!r}: "
            f"{again}"
        )
    return backend


def verify_files(root: Path, manifest: dict) -> None:
    """Every file of the manifest present with its size and SHA-256."""
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise BundleError(f"{root}/{MANIFEST}: lists no files")
    for name, expected in files.items():
        path = root / name
        if not path.resolve().is_relative_to(root.resolve()):
            raise BundleError(f"{root}: the manifest names a file outside the bundle: {name!r}")
        try:
            size = path.stat().st_size
        except OSError:
            raise BundleError(f"{root}: {name} is missing: the bundle is incomplete") from None
        if size != expected.get("size") or _sha256(path) != expected.get("sha256"):
            raise BundleError(
                f"{root}: {name} does not match its checksum: the bundle is damaged; "
                "export it again"
            )


def check_private_tree(root: Path) -> None:
    """A BundleError unless `root` and everything in it belong to this user (or root), are
    writable by no one else, and none is a symbolic link (the module's trust model)."""
    try:
        check_private(root, "bundle", BundleError)
        for base, dirs, names in os.walk(root):
            for name in (*dirs, *names):
                path = Path(base) / name
                if path.is_symlink():
                    raise BundleError(
                        f"bundle {root}: {path.relative_to(root)} is a symbolic link; a bundle "
                        "holds plain files only"
                    )
                check_private(path, f"bundle {root}: file", BundleError)
    except FileNotFoundError:
        return  # read_manifest says what is missing
    except OSError as err:
        raise BundleError(f"bundle {root}: cannot be read: {err}") from None


def load(
    directory: str | os.PathLike,
    *,
    target: str | Target | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> BundleModel:
    """The model of the bundle `directory`, its executables loaded, nothing compiled."""
    root = Path(directory)
    check_private_tree(root)
    manifest = read_manifest(root)
    resolved = get_target(target or manifest.get("target", "cpu"))
    backend = check_compatible(root, manifest, resolved)
    verify_files(root, manifest)
    graph = onnx.load(str(root / manifest.get("source", SOURCE)))
    return BundleModel(root, manifest, backend, graph, resolved, cache_dir)


def describe_bundle(directory: str | os.PathLike) -> dict:
    """What a bundle holds, for people: where, for what, and its executables' shapes."""
    root = Path(directory)
    manifest = read_manifest(root)
    return {
        "path": str(root),
        "gdp": manifest["gdp"],
        "created": manifest.get("created"),
        "target": manifest["target"],
        "fingerprint": manifest["fingerprint"],
        "cpu": manifest.get("host", {}).get("cpu"),
        "executables": [
            {"shapes": _describe(e["shapes"]), "generic": e["generic"]}
            for e in manifest["executables"]
        ],
        "bytes": sum(f["size"] for f in manifest["files"].values()),
    }


def _match(generic: bool, shapes: Mapping, ranges: Mapping) -> str:
    """What identifies an executable: generic or not, the shapes and ranges it compiled for."""
    return json.dumps(
        [
            bool(generic),
            {n: [None if d is None else int(d) for d in dims] for n, dims in shapes.items()},
            {n: [float(v) for v in r] for n, r in ranges.items()},
        ],
        sort_keys=True,
    )


class BundleModel(Model):
    """A Model whose executables all come from a bundle: it never compiles (see the module's
    doc)."""

    def __init__(
        self,
        root: Path,
        manifest: dict,
        backend: Backend,
        graph: onnx.ModelProto,
        target: Target,
        cache_dir: str | os.PathLike | None,
    ) -> None:
        self.bundle_dir = root
        self._manifest = manifest
        self._bundled = {
            _match(e["generic"], e["shapes"], e["ranges"]): e for e in manifest["executables"]
        }
        self._loaded_bundle: dict[str, Specialization] = {}
        self._bundle_load_s = 0.0
        # The precision the bundle compiled at: "auto" must not be decided again here.
        options = {**manifest.get("options", {}), "precision": manifest["precision"]}
        super().__init__(graph, target, options, cache_dir=cache_dir)
        # Every bundled per-shape executable ready for its calls (the generic one, and a static
        # model's shape, are the model's own doing above).
        for entry in manifest["executables"]:
            if entry["generic"]:
                continue
            shape_key = tuple(tuple(entry["shapes"][n]) for n in self.input_names)
            ranges_key = tuple(sorted((n, tuple(r)) for n, r in entry["call_ranges"].items()))
            key = (shape_key, ranges_key)
            if key in self._specialized:
                continue
            spec = self._bundled_spec(entry)
            with self._lock:
                self._keep(key, spec)

    def _bundled_spec(self, entry: dict) -> Specialization:
        found = self._loaded_bundle.get(entry["dir"])
        if found is not None:
            return found
        t0 = time.perf_counter()
        graph = onnx.load(str(self.bundle_dir / entry["graph"]))
        executable = self._backend.load(self.bundle_dir / entry["dir"], entry["meta"])
        load_s = time.perf_counter() - t0
        self._bundle_load_s += load_s
        spec = Specialization(
            key=entry["cache_key"],
            executable=executable,
            onnx=graph,
            outputs=graph_outputs(graph),
            kernels=entry["kernels"],
            rewrites=entry["rewrites"],
            source="bundle",
            load_s=load_s,
            fp16=entry["fp16"],
            fusion=entry["fusion"],
        )
        self._loaded_bundle[entry["dir"]] = spec
        return spec

    def _build(
        self, shapes: dict[str, tuple], ranges: dict[str, tuple], generic: bool = False
    ) -> Specialization:
        """The bundled executable for what the model would compile; never a compile."""
        entry = self._bundled.get(_match(generic, shapes, ranges))
        if entry is not None:
            return self._bundled_spec(entry)
        held = [_describe(e["shapes"]) for e in self._manifest["executables"]]
        if generic:
            # Model.__init__ then runs per shape, as the exporting model did.
            raise BundleError(
                f"the bundle {self.bundle_dir} holds no shape-generic executable, only "
                f"{'; '.join(held)}"
                + (
                    f" (at export: {self._manifest['generic_error']})"
                    if self._manifest.get("generic_error")
                    else ""
                )
            )
        what = f"shape {_describe(shapes)}"
        if ranges:
            what += f" with fp16 input ranges {dict(ranges)}"
        raise BundleShapeError(
            f"the bundle {self.bundle_dir} has no executable for {what} (it holds "
            f"{'; '.join(held)}), and a loaded bundle never compiles: export it with this "
            f"shape (gdp export --shapes {_describe(shapes)})"
        )

    def report(self) -> dict:
        out = super().report()
        out["cache"] = "bundle"
        out["load_s"] = self._bundle_load_s
        out["bundle"] = {**describe_bundle(self.bundle_dir), "loaded": len(self._loaded_bundle)}
        return out

    def export(self, directory: str | os.PathLike, shapes=None) -> Path:
        raise BundleError(
            f"this model was loaded from the bundle {self.bundle_dir}: copy that directory"
        )


__all__ = [
    "BundleError",
    "BundleModel",
    "BundleShapeError",
    "check_compatible",
    "describe_bundle",
    "export",
    "load",
    "parse_shapes",
    "read_manifest",
    "verify_files",
]
