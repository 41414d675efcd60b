"""A recording fake of pyACL's `acl` module for protocol tests (test_ascend.py).

It is not an NPU: a "model" is the ONNX file the fake `atc` copied to model.om, run by
onnxruntime when its stream is synchronised. What it does check is the protocol CANN documents:
calls in order (init first, finalize last), return codes and tuples as pyACL gives them, device
memory that is allocated, copied within bounds and freed once, work that completes only at
synchronize_stream (an output read before that reads the stale bytes, and is recorded as a
violation), contexts bound on the thread that uses them, and a teardown that frees models and
buffers before it destroys contexts and resets devices. Every breach goes to `violations`.
"""

from __future__ import annotations

import ctypes
import threading
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

OK = 0
ACL_ERROR_INVALID_PARAM = 100000
ACL_ERROR_UNINITIALIZE = 100001
ACL_ERROR_REPEAT_INITIALIZE = 100002
ACL_ERROR_INVALID_DEVICE = 200002


class _Namespace:
    def __init__(self, fake: FakeAcl, prefix: str) -> None:
        self._fake = fake
        self._prefix = prefix


class FakeAcl:
    """`acl` with `rt`, `mdl`, `prof` and `util` namespaces; see the module docstring."""

    def __init__(self, devices: int = 2, fail: dict[str, int] | None = None) -> None:
        self.devices = devices
        self.fail = dict(fail or {})  # call name -> error code, returned once
        self.log: list[str] = []
        self.violations: list[str] = []
        self.initialized = False
        self.finalized = False
        self.open_devices: set[int] = set()
        self.contexts: dict[int, int] = {}  # context -> device
        self.streams: dict[int, int] = {}  # stream -> device
        self.pending: dict[int, list] = {}  # stream -> work queued, done at synchronize
        self.memory: dict[int, bytearray] = {}
        self.device_of_memory: dict[int, int] = {}
        self.dirty: set[int] = set()  # device buffers an unfinished run will still write
        self.models: dict[int, tuple[str, int]] = {}  # id -> (path, device)
        self.sessions: dict[int, ort.InferenceSession] = {}
        self.descs: dict[int, int | None] = {}
        self.datasets: dict[int, list[int]] = {}
        self.data_buffers: dict[int, tuple[int, int]] = {}
        self.prof_configs: set[int] = set()
        self.profiling = False
        self.loads = Counter()
        self._ids = 0
        self._thread = threading.local()
        self.rt = _Rt(self, "acl.rt")
        self.mdl = _Mdl(self, "acl.mdl")
        self.prof = _Prof(self, "acl.prof")
        self.util = _Namespace(self, "acl.util")

    # -- bookkeeping -----------------------------------------------------------------------

    def new_id(self) -> int:
        self._ids += 1
        return 0x5000_0000 + self._ids * 0x1000

    def enter(self, call: str) -> int:
        """Record a call; the error code it is told to fail with, else 0."""
        self.log.append(call)
        if call != "acl.init" and not self.initialized:
            self.violations.append(f"{call} before acl.init")
            return ACL_ERROR_UNINITIALIZE
        if self.finalized:
            self.violations.append(f"{call} after acl.finalize")
            return ACL_ERROR_UNINITIALIZE
        return self.fail.pop(call, OK)

    def current_device(self, call: str) -> int | None:
        context = getattr(self._thread, "context", None)
        if context not in self.contexts:
            self.violations.append(f"{call} on a thread with no context bound")
            return None
        return self.contexts[context]

    # -- top level -------------------------------------------------------------------------

    def init(self, config: str | None = None) -> int:
        code = self.enter("acl.init")
        if code:
            return code
        if self.initialized:
            self.violations.append("acl.init called twice")
            return ACL_ERROR_REPEAT_INITIALIZE
        self.initialized = True
        return OK

    def finalize(self) -> int:
        code = self.enter("acl.finalize")
        alive = {
            "devices": self.open_devices,
            "models": self.models,
            "memory": self.memory,
            "datasets": self.datasets,
            "data buffers": self.data_buffers,
            "profiling": self.profiling,
        }
        for what, value in alive.items():
            if value:
                self.violations.append(f"acl.finalize with {what} still alive")
        self.finalized = True
        return code

    def create_data_buffer(self, pointer: int, size: int) -> int:
        if self.enter("acl.create_data_buffer"):
            return 0
        if pointer not in self.memory or len(self.memory[pointer]) < size:
            self.violations.append("acl.create_data_buffer over memory that is not allocated")
        buffer = self.new_id()
        self.data_buffers[buffer] = (pointer, size)
        return buffer

    def destroy_data_buffer(self, buffer: int) -> int:
        code = self.enter("acl.destroy_data_buffer")
        if self.data_buffers.pop(buffer, None) is None:
            self.violations.append("acl.destroy_data_buffer of an unknown buffer")
        return code


class _Rt(_Namespace):
    def get_device_count(self):
        return self._fake.devices, self._fake.enter("acl.rt.get_device_count")

    def get_run_mode(self):
        return 1, self._fake.enter("acl.rt.get_run_mode")  # ACL_HOST: a card behind PCIe

    def set_device(self, device: int) -> int:
        f = self._fake
        code = f.enter("acl.rt.set_device")
        if not 0 <= device < f.devices:
            return ACL_ERROR_INVALID_DEVICE
        f.open_devices.add(device)
        return code

    def reset_device(self, device: int) -> int:
        f = self._fake
        code = f.enter("acl.rt.reset_device")
        if any(d == device for d in f.contexts.values()):
            f.violations.append(f"acl.rt.reset_device({device}) with a context alive")
        if any(d == device for d in f.device_of_memory.values()):
            f.violations.append(f"acl.rt.reset_device({device}) with memory not freed")
        f.open_devices.discard(device)
        return code

    def create_context(self, device: int):
        f = self._fake
        code = f.enter("acl.rt.create_context")
        if device not in f.open_devices:
            f.violations.append("acl.rt.create_context before acl.rt.set_device")
        context = f.new_id()
        f.contexts[context] = device
        f._thread.context = context  # creating a context makes it current
        return context, code

    def destroy_context(self, context: int) -> int:
        f = self._fake
        code = f.enter("acl.rt.destroy_context")
        device = f.contexts.pop(context, None)
        if any(d == device for _, d in f.models.values()):
            f.violations.append("acl.rt.destroy_context with a model still loaded")
        if any(d == device for d in f.streams.values()):
            f.violations.append("acl.rt.destroy_context with a stream alive")
        return code

    def set_context(self, context: int) -> int:
        f = self._fake
        code = f.enter("acl.rt.set_context")
        if context not in f.contexts:
            f.violations.append("acl.rt.set_context of an unknown context")
        f._thread.context = context
        return code

    def create_stream(self):
        f = self._fake
        code = f.enter("acl.rt.create_stream")
        device = f.current_device("acl.rt.create_stream")
        stream = f.new_id()
        f.streams[stream] = device
        f.pending[stream] = []
        return stream, code

    def destroy_stream(self, stream: int) -> int:
        f = self._fake
        code = f.enter("acl.rt.destroy_stream")
        if f.pending.pop(stream, None):
            f.violations.append("acl.rt.destroy_stream with work not synchronised")
        f.streams.pop(stream, None)
        return code

    def synchronize_stream(self, stream: int) -> int:
        f = self._fake
        code = f.enter("acl.rt.synchronize_stream")
        if code:
            return code
        for work in f.pending.get(stream, []):
            work()
        f.pending[stream] = []
        return OK

    def malloc(self, size: int, policy: int):
        f = self._fake
        code = f.enter("acl.rt.malloc")
        if code:
            return 0, code
        device = f.current_device("acl.rt.malloc")
        pointer = f.new_id()
        f.memory[pointer] = bytearray(size)
        f.device_of_memory[pointer] = device
        return pointer, OK

    def free(self, pointer: int) -> int:
        f = self._fake
        code = f.enter("acl.rt.free")
        if f.memory.pop(pointer, None) is None:
            f.violations.append("acl.rt.free of memory not allocated (or freed twice)")
        f.device_of_memory.pop(pointer, None)
        return code

    def memcpy(self, dst: int, dst_max: int, src: int, count: int, kind: int) -> int:
        f = self._fake
        code = f.enter("acl.rt.memcpy")
        if code:
            return code
        if count > dst_max:
            f.violations.append("acl.rt.memcpy of more bytes than the destination holds")
            return ACL_ERROR_INVALID_PARAM
        if kind == 1:  # host -> device
            if dst not in f.memory or len(f.memory[dst]) < count:
                f.violations.append("acl.rt.memcpy into device memory not allocated")
                return ACL_ERROR_INVALID_PARAM
            f.memory[dst][:count] = ctypes.string_at(src, count)
        elif kind == 2:  # device -> host
            if src not in f.memory:
                f.violations.append("acl.rt.memcpy from device memory not allocated")
                return ACL_ERROR_INVALID_PARAM
            if src in f.dirty:
                f.violations.append("an output copied to the host before its stream was synced")
            ctypes.memmove(dst, bytes(f.memory[src][:count]), count)
        else:
            f.violations.append(f"acl.rt.memcpy kind {kind} on a host-mode card")
        return OK


class _Mdl(_Namespace):
    def load_from_file(self, path: str):
        f = self._fake
        code = f.enter("acl.mdl.load_from_file")
        if code:
            return 0, code
        device = f.current_device("acl.mdl.load_from_file")
        f.loads[(path, device)] += 1
        model = f.new_id()
        f.models[model] = (path, device)
        f.sessions[model] = ort.InferenceSession(
            onnx.load(path).SerializeToString(), providers=["CPUExecutionProvider"]
        )
        return model, OK

    def unload(self, model: int) -> int:
        f = self._fake
        code = f.enter("acl.mdl.unload")
        if f.models.pop(model, None) is None:
            f.violations.append("acl.mdl.unload of a model not loaded")
        if any(m == model for m in f.descs.values()):
            f.violations.append("acl.mdl.unload before acl.mdl.destroy_desc")
        f.sessions.pop(model, None)
        return code

    def create_desc(self) -> int:
        f = self._fake
        f.enter("acl.mdl.create_desc")
        desc = f.new_id()
        f.descs[desc] = None
        return desc

    def get_desc(self, desc: int, model: int) -> int:
        f = self._fake
        code = f.enter("acl.mdl.get_desc")
        f.descs[desc] = model
        return code

    def destroy_desc(self, desc: int) -> int:
        f = self._fake
        code = f.enter("acl.mdl.destroy_desc")
        f.descs.pop(desc, None)
        return code

    def _session(self, desc: int) -> ort.InferenceSession:
        return self._fake.sessions[self._fake.descs[desc]]

    def get_num_inputs(self, desc: int) -> int:
        return len(self._session(desc).get_inputs())

    def get_num_outputs(self, desc: int) -> int:
        return len(self._session(desc).get_outputs())

    def _size(self, values, index: int) -> int:
        value = values[index]
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(_ORT_TYPES[value.type]))
        return int(np.prod(value.shape, dtype=np.int64)) * dtype.itemsize

    def get_input_size_by_index(self, desc: int, index: int) -> int:
        return self._size(self._session(desc).get_inputs(), index)

    def get_output_size_by_index(self, desc: int, index: int) -> int:
        return self._size(self._session(desc).get_outputs(), index)

    def create_dataset(self) -> int:
        f = self._fake
        f.enter("acl.mdl.create_dataset")
        dataset = f.new_id()
        f.datasets[dataset] = []
        return dataset

    def add_dataset_buffer(self, dataset: int, buffer: int):
        f = self._fake
        code = f.enter("acl.mdl.add_dataset_buffer")
        f.datasets[dataset].append(buffer)
        return dataset, code

    def destroy_dataset(self, dataset: int) -> int:
        f = self._fake
        code = f.enter("acl.mdl.destroy_dataset")
        if f.datasets.pop(dataset, None) is None:
            f.violations.append("acl.mdl.destroy_dataset of an unknown dataset")
        return code

    def execute_async(self, model: int, inputs: int, outputs: int, stream: int) -> int:
        f = self._fake
        code = f.enter("acl.mdl.execute_async")
        if code:
            return code
        device = f.current_device("acl.mdl.execute_async")
        if f.models[model][1] != device or f.streams.get(stream) != device:
            f.violations.append("acl.mdl.execute_async across devices")
        session = f.sessions[model]
        in_bufs = [f.data_buffers[b] for b in f.datasets[inputs]]
        out_bufs = [f.data_buffers[b] for b in f.datasets[outputs]]
        for pointer, _ in out_bufs:
            f.dirty.add(pointer)

        def work() -> None:  # runs when the stream is synchronised
            feeds = {}
            for value, (pointer, size) in zip(session.get_inputs(), in_bufs, strict=True):
                dtype = helper.tensor_dtype_to_np_dtype(_ORT_TYPES[value.type])
                raw = bytes(f.memory[pointer][:size])
                feeds[value.name] = np.frombuffer(raw, dtype).reshape(value.shape)
            results = session.run(None, feeds)
            for result, (pointer, _) in zip(results, out_bufs, strict=True):
                data = np.ascontiguousarray(result).tobytes()
                f.memory[pointer][: len(data)] = data
                f.dirty.discard(pointer)

        f.pending[stream].append(work)
        return OK


class _Prof(_Namespace):
    def init(self, path: str) -> int:
        f = self._fake
        code = f.enter("acl.prof.init")
        f.profiling = True
        return code

    def create_config(self, devices, metrics, events, data_types) -> int:
        f = self._fake
        f.enter("acl.prof.create_config")
        if not f.profiling:
            f.violations.append("acl.prof.create_config before acl.prof.init")
        config = f.new_id()
        f.prof_configs.add(config)
        return config

    def start(self, config: int) -> int:
        return self._fake.enter("acl.prof.start")

    def stop(self, config: int) -> int:
        return self._fake.enter("acl.prof.stop")

    def destroy_config(self, config: int) -> int:
        f = self._fake
        code = f.enter("acl.prof.destroy_config")
        f.prof_configs.discard(config)
        return code

    def finalize(self) -> int:
        f = self._fake
        code = f.enter("acl.prof.finalize")
        if f.prof_configs:
            f.violations.append("acl.prof.finalize with configs not destroyed")
        f.profiling = False
        return code


# onnxruntime's type strings -> ONNX element types.
_ORT_TYPES = {
    "tensor(float)": onnx.TensorProto.FLOAT,
    "tensor(float16)": onnx.TensorProto.FLOAT16,
    "tensor(double)": onnx.TensorProto.DOUBLE,
    "tensor(uint8)": onnx.TensorProto.UINT8,
    "tensor(int8)": onnx.TensorProto.INT8,
    "tensor(uint16)": onnx.TensorProto.UINT16,
    "tensor(int16)": onnx.TensorProto.INT16,
    "tensor(int32)": onnx.TensorProto.INT32,
    "tensor(int64)": onnx.TensorProto.INT64,
    "tensor(bool)": onnx.TensorProto.BOOL,
}
