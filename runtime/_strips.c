/* gdp.runtime._strips: a kernel's strips run on the calling thread and on helper threads that
 * join as they wake, the caller never waiting for a helper to wake.
 *
 * Why: TVM's pool (TVMBackendParallelLaunch) hands every worker its share and waits for all
 * of them; on the 2-core VM an idle worker sleeps, and waking it cost 40-90 us, more than a
 * 1080p gray image's whole countNonZero or threshold (OpenCV's 85-90 us). Here the caller
 * starts on the strips at once and a helper joins when it is awake: a late helper takes fewer
 * strips, or none, as OpenCV's pool does.
 *
 * A kernel comes as its "range twin" (gdp.runtime.launch.range_twin): the same TIR with its
 * strip loop `for s in T.parallel(strips)` a plain loop whose body runs for the strips in
 * [strip_first, strip_last), two parameters after `strips`: one call runs those strips. run() converts the Python arguments to
 * TVM FFI values once (numpy arrays as DLTensors over their data, ints, floats, tvm_ffi
 * Tensors), then each thread calls the twin for strips it claimed. The strips are dealt out in
 * contiguous ranges, one a thread (neighbouring strips write neighbouring memory: dealt one at
 * a time, two threads' transposes shared cache lines and ran at 0.6x); a thread takes its own
 * range's strips from the front, then other ranges' from the back, so the caller takes over
 * the range of a helper that has not woken. A range is one 64-bit word, (job << 32) | (front
 * << 16) | back, claimed by compare-and-swap: a helper still busy with an old job never claims
 * a strip of a newer one, and a job's arguments stay fixed until its last strip is done (the
 * caller waits for that, and only that).
 *
 * The caller releases the GIL while the strips run; helpers never take it. A second Python
 * thread that calls run() while the helpers serve another runs its strips alone, in one call.
 * A helper polls SPIN_NS after a job, then sleeps on a futex. After fork the child has no
 * helpers; it starts its own at its first job.
 *
 * The function is called through its TVMFFIFunctionCell's safe_call (TVMFFIFunctionCall's
 * own body), so the extension links no TVM library; run() returns False if a strip failed
 * (the caller runs the kernel again through TVM's FFI, which raises the error). */

#define _GNU_SOURCE /* pthread_setaffinity_np */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <tvm/ffi/c_api.h>

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_ARGS 16
#define MAX_HELPERS 255
#define MAX_STRIPS 0xffff
/* How long an idle helper polls for the next job, yielding its core to any thread that wants
 * it, before it sleeps: waking a sleeper cost its waker 16-35 us on the 2-core VM, as much as
 * a 1080p countNonZero. Measured there with gdp.cv2's calls interleaved with OpenCV's: 200 us
 * left OpenCV's own times as they were with TVM's pool (1 ms slowed OpenCV's 1080p BGR2GRAY
 * from 0.39 to 0.70 ms; a 50 us spin of pauses, not yields, its 480p one from 0.07 to 0.09). */
#define SPIN_NS 200000
/* Pauses the caller spins waiting for a helper's last strips before it yields its core
 * instead (a pause is about 40 ns here: some 4 us; 1000 measured no better), in case that
 * helper was put on the caller's core. */
#define WAIT_SPINS 100

_Static_assert(sizeof(npy_intp) == sizeof(int64_t), "numpy's shape is DLTensor's int64_t");

typedef struct {
  TVMFFIObjectHandle function;
  TVMFFIAny args[MAX_ARGS + 2]; /* the kernel's, then strip_first and strip_last */
  int count;                    /* the kernel's own arguments, `strips` the last */
  DLTensor tensors[MAX_ARGS];
} Job;

static Job job;
/* A thread's range of strips, on a cache line of its own. */
typedef struct {
  _Alignas(64) _Atomic uint64_t word; /* (job << 32) | (front << 16) | back */
} Range;
static Range ranges[MAX_HELPERS + 1];
/* the current job's number and its ranges (published after them) */
static _Alignas(64) _Atomic uint64_t current;
static _Alignas(64) _Atomic int done;
static _Atomic int failed;
/* bumped by every job: what sleeping helpers wait on */
static _Atomic uint32_t wake;
static _Atomic int sleepers;
/* helpers started, and how many take part (the thread count less the caller) */
static int started;
static _Atomic int wanted;
static pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER;
static PyTypeObject *tensor_type; /* tvm_ffi.Tensor */
/* the cores helpers are pinned to, helper i to cores[(i + 1) % count] (none: the OS places them) */
static int cores[MAX_HELPERS + 1], core_count;

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Runs strips [first, last) of `j` on this thread; 0 if the kernel returned 0. */
static int call(const Job *j, int first, int last) {
  TVMFFIAny args[MAX_ARGS + 2];
  memcpy(args, j->args, sizeof(TVMFFIAny) * j->count);
  args[j->count].type_index = kTVMFFIInt;
  args[j->count].zero_padding = 0;
  args[j->count].v_int64 = first;
  args[j->count + 1] = args[j->count];
  args[j->count + 1].v_int64 = last;
  TVMFFIAny result;
  result.type_index = kTVMFFINone;
  result.zero_padding = 0;
  result.v_int64 = 0;
  TVMFFIFunctionCell *cell =
      (TVMFFIFunctionCell *)((char *)j->function + sizeof(TVMFFIObject));
  return cell->safe_call(j->function, args, j->count + 2, &result);
}

/* One strip of range `r` of job `number`, from its front (its owner) or back (another
 * thread); -1 when it has none left or belongs to another job. */
static int claim(Range *r, uint64_t number, int front) {
  uint64_t w = atomic_load_explicit(&r->word, memory_order_acquire);
  for (;;) {
    uint64_t first = (w >> 16) & 0xffff, end = w & 0xffff;
    if (w >> 32 != number || first >= end) return -1;
    uint64_t taken = front ? w + (1 << 16) : w - 1;
    if (atomic_compare_exchange_weak_explicit(&r->word, &w, taken, memory_order_acq_rel,
                                              memory_order_acquire))
      return (int)(front ? first : end - 1);
  }
}

/* Runs the current job's strips that thread `self` claims: its own range's, then the others'
 * (the caller is thread 0; helper i is thread i + 1). */
static void work(int self) {
  uint64_t c = atomic_load_explicit(&current, memory_order_acquire);
  uint64_t number = c >> 32;
  int threads = (int)(c & 0xffff), ran = 0, failures = 0;
  for (int k = 0; k < threads; k++) {
    int r = (self + k) % threads, strip;
    int front = k == 0 && self < threads; /* its own range (a job may have fewer) */
    while ((strip = claim(&ranges[r], number, front)) >= 0) {
      failures |= call(&job, strip, strip + 1) != 0;
      ran++;
    }
  }
  if (failures) atomic_store(&failed, 1);
  if (ran) atomic_fetch_add_explicit(&done, ran, memory_order_release);
}

static void *helper(void *arg) {
  int index = (int)(intptr_t)arg;
  uint32_t seen = atomic_load(&wake);
  for (;;) {
    int64_t since = now_ns();
    while (atomic_load_explicit(&wake, memory_order_acquire) == seen) {
      if (now_ns() - since < SPIN_NS) {
        sched_yield(); /* not pauses: a thread that wants this core gets it at once */
        continue;
      }
      atomic_fetch_add(&sleepers, 1);
      syscall(SYS_futex, &wake, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
      atomic_fetch_sub(&sleepers, 1);
    }
    seen = atomic_load(&wake);
    if (index < atomic_load(&wanted)) work(index + 1);
  }
  return NULL;
}

/* Starts helpers up to `wanted` (those past it, after a smaller count was set, stay idle). */
static void start_helpers(void) {
  int want = atomic_load(&wanted);
  while (started < want) {
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (core_count > 0) { /* born pinned: no moment where it runs elsewhere */
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cores[(started + 1) % core_count], &set);
      pthread_attr_setaffinity_np(&attr, sizeof set, &set);
    }
    int err = pthread_create(&thread, &attr, helper, (void *)(intptr_t)started);
    pthread_attr_destroy(&attr);
    if (err != 0) { /* run with the helpers there are */
      atomic_store(&wanted, started);
      return;
    }
    started++;
  }
}

static void forget_helpers(void) { /* in a forked child: its parent's helpers are not there */
  started = 0;
  atomic_store(&sleepers, 0);
  atomic_store(&current, 0);
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  busy = fresh;
}

/* The Python value as a TVM FFI argument; 0 if it is not one run() passes (the caller takes
 * TVM's path). */
static int convert(PyObject *value, TVMFFIAny *any, DLTensor *tensor) {
  any->zero_padding = 0;
  if (PyArray_Check(value)) {
    PyArrayObject *array = (PyArrayObject *)value;
    PyArray_Descr *descr = PyArray_DESCR(array);
    if (!PyArray_IS_C_CONTIGUOUS(array) || PyArray_ISBYTESWAPPED(array)) return 0;
    uint8_t code;
    switch (descr->kind) {
      case 'u': code = kDLUInt; break;
      case 'i': code = kDLInt; break;
      case 'f': code = kDLFloat; break;
      default: return 0;
    }
    tensor->data = PyArray_DATA(array);
    tensor->device.device_type = kDLCPU;
    tensor->device.device_id = 0;
    tensor->ndim = PyArray_NDIM(array);
    tensor->dtype.code = code;
    tensor->dtype.bits = (uint8_t)(8 * PyDataType_ELSIZE(descr));
    tensor->dtype.lanes = 1;
    tensor->shape = (int64_t *)PyArray_DIMS(array);
    tensor->strides = NULL;
    tensor->byte_offset = 0;
    any->type_index = kTVMFFIDLTensorPtr;
    any->v_ptr = tensor;
    return 1;
  }
  if (PyBool_Check(value)) {
    any->type_index = kTVMFFIBool;
    any->v_int64 = value == Py_True;
    return 1;
  }
  if (PyLong_Check(value) || PyArray_IsScalar(value, Integer)) {
    any->type_index = kTVMFFIInt;
    any->v_int64 = PyLong_AsLongLong(value); /* a NumPy integer by its __index__ */
    if (any->v_int64 == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return 0;
    }
    return 1;
  }
  if (PyFloat_Check(value) || PyArray_IsScalar(value, Floating)) {
    any->type_index = kTVMFFIFloat;
    any->v_float64 = PyFloat_AsDouble(value);
    if (any->v_float64 == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      return 0;
    }
    return 1;
  }
  if (tensor_type != NULL && PyObject_TypeCheck(value, tensor_type)) {
    PyObject *handle = PyObject_CallMethod(value, "__chandle__", NULL);
    if (handle == NULL) {
      PyErr_Clear();
      return 0;
    }
    void *address = PyLong_AsVoidPtr(handle);
    Py_DECREF(handle);
    if (address == NULL) {
      PyErr_Clear();
      return 0;
    }
    /* a Tensor object's DLTensor follows its object header */
    any->type_index = kTVMFFIDLTensorPtr;
    any->v_ptr = (char *)address + sizeof(TVMFFIObject);
    return 1;
  }
  return 0;
}

/* run(function, args): `function` the address of a range twin's TVM Function object (kept
 * alive by the caller), `args` the kernel's arguments, its strip count last. True once every
 * strip ran; False where a strip failed or an argument is not one this passes (nothing is
 * left half-done that a rerun would not overwrite: the caller runs the kernel again). */
static PyObject *run(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
  if (argc != 2 || !PyTuple_Check(argv[1])) {
    PyErr_SetString(PyExc_TypeError, "run(function, args): expected an address and a tuple");
    return NULL;
  }
  void *function = PyLong_AsVoidPtr(argv[0]);
  if (function == NULL) return NULL;
  PyObject *values = argv[1];
  Py_ssize_t count = PyTuple_GET_SIZE(values);
  if (count < 1 || count > MAX_ARGS) Py_RETURN_FALSE;
  PyObject *last = PyTuple_GET_ITEM(values, count - 1);
  long strips = PyLong_Check(last) ? PyLong_AsLong(last) : -1;
  if (strips < 1 || strips > MAX_STRIPS) {
    PyErr_Clear();
    Py_RETURN_FALSE;
  }

  Job local;
  local.function = function;
  local.count = (int)count;
  for (Py_ssize_t i = 0; i < count; i++)
    if (!convert(PyTuple_GET_ITEM(values, i), &local.args[i], &local.tensors[i]))
      Py_RETURN_FALSE;

  int ok;
  Py_BEGIN_ALLOW_THREADS;
  if (atomic_load(&wanted) == 0 || strips == 1 || pthread_mutex_trylock(&busy) != 0) {
    ok = call(&local, 0, (int)strips) == 0; /* alone: every strip in one call */
  } else {
    start_helpers();
    job = local;
    /* the tensors' addresses: into the shared job, not this frame's copy */
    for (int i = 0; i < job.count; i++)
      if (job.args[i].type_index == kTVMFFIDLTensorPtr &&
          job.args[i].v_ptr == &local.tensors[i])
        job.args[i].v_ptr = &job.tensors[i];
    atomic_store(&done, 0);
    atomic_store(&failed, 0);
    uint64_t number = (atomic_load(&current) >> 32) + 1;
    int threads = atomic_load(&wanted) + 1;
    if (threads > strips) threads = (int)strips;
    for (int r = 0; r < threads; r++)
      atomic_store_explicit(&ranges[r].word,
                            (number << 32) | ((uint64_t)(strips * r / threads) << 16) |
                                (uint64_t)(strips * (r + 1) / threads),
                            memory_order_relaxed);
    atomic_store_explicit(&current, (number << 32) | (uint64_t)threads, memory_order_release);
    atomic_fetch_add(&wake, 1);
    if (atomic_load(&sleepers) > 0)
      syscall(SYS_futex, &wake, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
    work(0);
    /* the strips helpers still run: spin, then yield (a helper may share this core) */
    for (int spins = 0; atomic_load_explicit(&done, memory_order_acquire) < strips; spins++)
      if (spins < WAIT_SPINS)
        relax();
      else
        sched_yield();
    ok = !atomic_load(&failed);
    pthread_mutex_unlock(&busy);
  }
  Py_END_ALLOW_THREADS;
  return PyBool_FromLong(ok);
}

/* set_threads(count): the threads a job runs on, the caller's included (helpers: count - 1). */
static PyObject *set_threads(PyObject *self, PyObject *arg) {
  long count = PyLong_AsLong(arg);
  if (count == -1 && PyErr_Occurred()) return NULL;
  if (count < 1) {
    PyErr_Format(PyExc_ValueError, "set_threads: expected a count >= 1, got %ld", count);
    return NULL;
  }
  atomic_store(&wanted, (int)(count - 1 < MAX_HELPERS ? count - 1 : MAX_HELPERS));
  Py_RETURN_NONE;
}

/* configure(tensor_type, cores): tvm_ffi.Tensor, whose objects run() passes as their DLTensor,
 * and the cores to pin helpers to (TVM_BIND_THREADS=1, as TVM pins its workers; empty: none),
 * for helpers started from now on. */
static PyObject *configure(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
  if (argc != 2 || !PyType_Check(argv[0]) || !PyList_Check(argv[1])) {
    PyErr_SetString(PyExc_TypeError, "configure: expected tvm_ffi.Tensor and a list of cores");
    return NULL;
  }
  Py_ssize_t count = PyList_GET_SIZE(argv[1]);
  if (count > MAX_HELPERS + 1) count = MAX_HELPERS + 1;
  for (Py_ssize_t i = 0; i < count; i++) {
    long core = PyLong_AsLong(PyList_GET_ITEM(argv[1], i));
    if (core == -1 && PyErr_Occurred()) return NULL;
    if (core < 0 || core >= CPU_SETSIZE) {
      PyErr_Format(PyExc_ValueError, "configure: expected core numbers, got %ld", core);
      return NULL;
    }
    cores[i] = (int)core;
  }
  core_count = (int)count;
  Py_INCREF(argv[0]);
  Py_XDECREF((PyObject *)tensor_type);
  tensor_type = (PyTypeObject *)argv[0];
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL,
     "run(function, args): a range twin's strips on this thread and the helpers"},
    {"set_threads", set_threads, METH_O, "set_threads(count): threads a job runs on"},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL,
     "configure(tensor_type, cores)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_strips", NULL, -1, methods};

PyMODINIT_FUNC PyInit__strips(void) {
  import_array();
  pthread_atfork(NULL, NULL, forget_helpers);
  return PyModule_Create(&module);
}
