"""A compiled TVM model run by the Relax VM on one device: host arrays in, host arrays out, with
the host copies, the VM and per-kernel profiling shared by every TVM backend.

Inputs may also be arrays in the device's own memory (a torch.cuda tensor, a CuPy array: any
DLPack producer), read in place; a run given one returns its outputs on the device, as tensors
of the first such input's library (torch, CuPy; else TVM's own tensors, which are DLPack
producers), without a copy. Kernels run on TVM's stream for the device, the CUDA default
(legacy) stream, which orders them after work queued on torch's and CuPy's default streams."""

from __future__ import annotations

import sys
import time

import numpy as np
import tvm
import tvm_ffi
from tvm.runtime.vm import VirtualMachine

from gdp.errors import InputError
from gdp.runtime.backends.base import Executable
from gdp.runtime.backends.tvm import thread_pool
from gdp.runtime.profiling import Profile

# DLPack's device type of host memory.
_DLPACK_CPU = 1


class TvmExecutable(Executable):
    # Whether numpy inputs are handed to the kernels in place (a device that computes in host
    # memory); else each input is copied into a device tensor kept for the next call.
    zero_copy_inputs = True

    def __init__(self, library: tvm.runtime.Module, device: tvm.runtime.Device) -> None:
        self.device = device
        self.zero_copy_inputs = device.dlpack_device_type() == _DLPACK_CPU
        self.library = library
        self.vm = VirtualMachine(library, self.device)
        self._profiling_vm: VirtualMachine | None = None
        self._kernel_log: list[tuple[str, float]] = []
        self._kernel_start = 0.0
        self._staging: dict[int, tvm.runtime.Tensor] = {}
        self._main = None  # the VM's main, looked up on the first run

    # The program as one kernel call (lowering.direct_call), where it is one and computes in
    # host memory: run without the VM, its outputs allocated here or given by the caller.
    direct: dict | None = None
    _kernel = None

    def set_direct(self, spec: dict | None) -> None:
        if spec is None or not self.zero_copy_inputs:
            return
        kernel = self.library.get_function(spec["kernel"], True)
        if kernel is not None:
            self.direct, self._kernel = spec, kernel

    def output_shapes(self, inputs: list[np.ndarray]) -> list[tuple[np.dtype, tuple]] | None:
        """The direct kernel's outputs for these inputs: (dtype, shape) each; None without one."""
        if self.direct is None:
            return None
        return [
            (
                np.dtype(dtype),
                tuple(d if isinstance(d, int) else inputs[d[0]].shape[d[1]] for d in dims),
            )
            for dtype, dims in self.direct["outputs"]
        ]

    def _run_direct(self, bound: list, outputs: list[np.ndarray]) -> list[np.ndarray]:
        """The direct kernel on bound inputs (in the kernel's order), writing `outputs`."""
        if any(o.size == 0 for o in outputs):
            # Nothing to write (an empty slice of a short image): TVM refuses numpy's strides
            # of an empty array as not compact, where the VM's own empty tensor passed.
            return outputs
        self._kernel(
            *bound,
            *(
                tvm_ffi.from_dlpack(o, require_alignment=o.dtype.itemsize, require_contiguous=True)
                for o in outputs
            ),
        )
        return outputs

    def _bind_direct(self, inputs: list[np.ndarray], staged: bool = True) -> list:
        """The kernel's inputs: `_to_device`'s, or (not `staged`: several bound at once, where
        one staging tensor per input would be refilled) an aligned copy of an array it would
        stage."""
        if staged:
            return [self._to_device(i, inputs[i]) for i in self.direct["args"]]
        return [
            self._to_device(i, np.require(inputs[i], requirements=["C", "A", "W"]))
            for i in self.direct["args"]
        ]

    def _to_device(self, index: int, array: np.ndarray) -> tvm.runtime.Tensor:
        """Hand `array` to the VM: zero-copy in host memory when it is element-aligned (the
        alignment the cpu kernels are compiled to assume) and numpy can export it, else a copy
        into a staging tensor kept for the next call (allocating afresh costs page faults every
        run). A device array (not numpy) is taken in place, on this executable's device only."""
        if not isinstance(array, np.ndarray):
            tensor = tvm_ffi.from_dlpack(array, require_contiguous=True)
            if tensor.device != self.device:
                raise InputError(
                    f"input {index}: an array on {tensor.device}, and this model runs on"
                    f" {self.device}: move it there first (or pass a host array)"
                )
            return tensor
        if (
            self.zero_copy_inputs
            and array.flags.aligned
            and array.flags.writeable
            and array.flags.c_contiguous
        ):
            return tvm_ffi.from_dlpack(
                array, require_alignment=array.dtype.itemsize, require_contiguous=True
            )
        staging = self._staging.get(index)
        if staging is None or tuple(staging.shape) != array.shape or staging.dtype != array.dtype:
            staging = tvm.runtime.empty(array.shape, str(array.dtype), self.device)
            self._staging[index] = staging
        staging.copyfrom(array)
        return staging

    def _instrument(self, func, func_symbol, before_run, ret_value, *args) -> int:
        # The time between the VM's before and after hooks is the kernel's time where kernels run
        # synchronously (the CPU; a GPU backend synchronises in its hooks). VM builtins
        # (allocation, shape checks) are not kernels.
        now = time.perf_counter()
        if before_run:
            self._kernel_start = now
        elif not str(func_symbol).startswith("vm.builtin"):
            self._kernel_log.append((str(func_symbol), now - self._kernel_start))
        return 0

    def _vm_for(self, profile: Profile | None) -> VirtualMachine:
        if profile is None:
            return self.vm
        if self._profiling_vm is None:
            self._profiling_vm = VirtualMachine(self.library, self.device)
            self._profiling_vm.set_instrument(self._instrument)
        return self._profiling_vm

    def _to_host(self, tensor: tvm.runtime.Tensor, inputs_at: set[int]) -> np.ndarray:
        """An output as a host array: in host memory without a copy (the array keeps the VM's
        tensor alive), except one that is an input's memory, since a staging tensor is refilled
        by the next run; from a device, copied."""
        if tensor.device.dlpack_device_type() != _DLPACK_CPU:
            return tensor.numpy()
        array = np.from_dlpack(tensor)
        return array.copy() if array.ctypes.data in inputs_at else array

    def run(self, inputs: list[np.ndarray], profile: Profile | None = None) -> list[np.ndarray]:
        thread_pool.before_run()
        on_device = next((x for x in inputs if not isinstance(x, np.ndarray)), None)
        if on_device is not None and self.zero_copy_inputs:
            device_type, index = on_device.__dlpack_device__()
            raise InputError(
                f"a device array ({type(on_device).__name__} on DLPack device type"
                f" {int(device_type)}, index {int(index)}) given to a model that runs on"
                f" {self.device}: pass host arrays"
            )
        if profile is None and self.zero_copy_inputs:
            return self._run_host(inputs)
        vm = self._vm_for(profile)
        self._kernel_log = []
        t0 = time.perf_counter()
        args = [self._to_device(i, x) for i, x in enumerate(inputs)]
        t1 = time.perf_counter()
        if profile is None:  # the VM's main looked up once (the profiling VM's each time)
            if self._main is None:
                self._main = self.vm["main"]
            result = self._main(*args)
        else:
            result = vm["main"](*args)
        t2 = time.perf_counter()
        results = [result] if isinstance(result, tvm.runtime.Tensor) else list(result)
        inputs_at = {
            np.from_dlpack(a).ctypes.data
            for a in args
            if a.device.dlpack_device_type() == _DLPACK_CPU
        }
        if on_device is not None:
            outputs = [_like(tensor, on_device) for tensor in results]
        else:
            outputs = [self._to_host(tensor, inputs_at) for tensor in results]
        t3 = time.perf_counter()
        if profile is not None:
            profile.copy_in_s += t1 - t0
            profile.execute_s += t2 - t1
            profile.copy_out_s += t3 - t2
            profile.kernels.extend(self._kernel_log)
        return outputs

    def _run_host(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """run() in host memory without a profile: the VM's main looked up once, and an output
        copied only where it shares memory with an input (a program that returns its input, or
        a staging tensor the next run refills)."""
        thread_pool.before_run()
        if self.direct is not None:
            outputs = [np.empty(shape, dtype) for dtype, shape in self.output_shapes(inputs)]
            return self._run_direct(self._bind_direct(inputs), outputs)
        main = self._main
        if main is None:
            main = self._main = self.vm["main"]
        args = [self._to_device(i, x) for i, x in enumerate(inputs)]
        result = main(*args)
        tensors = [result] if isinstance(result, tvm.runtime.Tensor) else list(result)
        outputs = [np.from_dlpack(t) for t in tensors]
        staged = [np.from_dlpack(a) for i, a in enumerate(args) if a is self._staging.get(i)]
        sources = [*inputs, *staged]
        return [
            out.copy() if any(np.may_share_memory(out, x) for x in sources) else out
            for out in outputs
        ]

    def run_many(
        self,
        batch: list[list[np.ndarray]],
        profile: Profile | None = None,
        into: list[list[np.ndarray]] | None = None,
    ) -> list[list[np.ndarray]]:
        """One VM call per entry, the VM function looked up once. What remains per run is the
        input's DLPack view, the VM's call (its builtins: shape checks, allocation from its pool)
        and the outputs' views; the outputs are the VM's tensors, kept alive by their arrays.

        A direct kernel runs without the VM, into each entry's arrays of `into` where given (a
        batch's rows: output_shapes says what they must be): every entry's inputs are bound
        before the first kernel runs, so a refusal there writes nothing."""
        if profile is not None:
            return [self.run(inputs, profile) for inputs in batch]
        thread_pool.before_run()
        if self.direct is not None:
            bound = [self._bind_direct(inputs, staged=False) for inputs in batch]
            if into is None:
                into = [
                    [np.empty(shape, dtype) for dtype, shape in self.output_shapes(inputs)]
                    for inputs in batch
                ]
            return [self._run_direct(b, o) for b, o in zip(bound, into, strict=True)]
        main = self.vm["main"]
        tensor_type = tvm.runtime.Tensor
        staging = self._staging
        host = self.device.dlpack_device_type() == _DLPACK_CPU
        results: list[list[np.ndarray]] = []
        for inputs in batch:
            args = [self._to_device(i, x) for i, x in enumerate(inputs)]
            result = main(*args)
            tensors = [result] if isinstance(result, tensor_type) else list(result)
            if any(a is staging.get(i) for i, a in enumerate(args)):
                # An output that is a staging tensor's memory (an input copied in) is copied
                # out, since the next run refills it; the caller's arrays are never refilled.
                at = {np.from_dlpack(a).ctypes.data for a in args if a.device == self.device}
                results.append([self._to_host(t, at) for t in tensors])
            elif host:
                results.append([np.from_dlpack(t) for t in tensors])
            else:
                results.append([t.numpy() for t in tensors])
        return results


def _like(tensor: tvm.runtime.Tensor, example) -> object:
    """A device output as an array of `example`'s library (torch, CuPy: their from_dlpack),
    sharing its memory; TVM's own tensor for any other."""
    name = type(example).__module__.split(".")[0]
    library = sys.modules.get(name)
    if name == "torch" and hasattr(library._C, "_from_dlpack"):
        # From the capsule: torch.from_dlpack(tensor) first asks for torch's current stream
        # and hands it to the producer, 10 us a call; gdp's stream is ordered with torch's
        # by the executable (cuda_executable._handover).
        return library._C._from_dlpack(tensor._to_dlpack())
    from_dlpack = getattr(library, "from_dlpack", None)
    return from_dlpack(tensor) if from_dlpack is not None else tensor
