/* gdp.cv2's per-call Python, in C: the callable every accelerated function is (Dispatcher, made
 * by gdp.cv2.common.accelerate), and the short paths' test of a plain image (plain).
 *
 * Why in C: these run on every eager call, and after a call that streamed more than the L2
 * cache (OpenCV's, a kernel's: the benchmark's order, and a pipeline's) each line of Python and
 * each NumPy attribute they touch comes from memory. On the 2-core VM the table's check in
 * Python (dispatch.runs_opencv) took 9 us there, so that a 1080p threshold the table gives to
 * OpenCV took 104 us against OpenCV's 91 (a plain Python wrapper cost 2); common.accelerate's
 * wrapper frame 4-5 us more on gdp's path; plain_image in Python 5-8. Here each reads the
 * array's dimensions and flags from its struct, and a few dicts.
 *
 * A Dispatcher's call: inside another gdp.cv2 call, gdp's function as written (`raw`); where
 * the dispatch table gives the call to OpenCV, OpenCV's function; else `raw` with
 * common._running set, an exception handed to common.refused (OpenCV's answer or the error).
 * What the table's check leaves to Python: every case but the common one goes to
 * dispatch.runs_opencv (looked up on each such call, as tests replace it): a table not read
 * yet (dispatch._rules not a plain dict), a variant value without its own key that is not an
 * int (6.0 and np.int64(6) hash as 6 and have it), a switch set (GDP_CV2_DISPATCH,
 * GDP_CV2_STRICT, GDP_TARGET in os.environ, or a gdp.set_target), a non-POSIX os.environ. Its
 * answers and plain's are held to Python's by tests/gdp/cv2/test_dispatch.py
 * (Dispatcher.runs_opencv answers without calling).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#include <numpy/ndarraytypes.h> /* the array struct's layout only: no NumPy API is called */

/* Set once by configure(). */
static PyTypeObject *ndarray_type;      /* numpy.ndarray */
static PyObject *dispatch_namespace;    /* gdp.cv2.dispatch.__dict__: "_rules", "runs_opencv" */
static PyObject *environ_bytes;         /* os.environ._data, or None (not POSIX) */
static PyObject *switch_keys;           /* the switches' names as bytes */
static PyObject *modules;               /* sys.modules, for gdp.api's _default_target */
static PyObject *running;               /* gdp.cv2.common._running (a ContextVar) */
static PyObject *refused;               /* gdp.cv2.common.refused: an exception of gdp's */
static PyObject *target_keys;           /* GDP_TARGET as bytes: plain()'s switch */
static PyObject *plain_python;          /* common.plain_image in Python: plain()'s other cases */
static long long bounds[8];             /* the size classes' most pixels, ascending */
static Py_ssize_t n_bounds;

static PyObject *str_rules, *str_runs_opencv, *str_api, *str_default_target, *str_src,
    *str_image;

typedef struct {
    PyObject_HEAD
    PyObject *name;   /* OpenCV's name of the function (dotted for submodules) */
    PyObject *raw;    /* gdp's function as written: a call inside another gdp.cv2 call */
    PyObject *gdp;    /* gdp's function with its fallthrough (PythonDispatcher's; C runs raw) */
    PyObject *opencv; /* OpenCV's own function */
    PyObject *dict;   /* __dict__: functools.wraps' __name__, __doc__, __wrapped__ */
    vectorcallfunc vectorcall;
} Dispatcher;

/* A keyword argument of a vectorcall, borrowed, or NULL. */
static PyObject *keyword(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                         PyObject *name) {
    if (kwnames == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i);
        if (key == name || PyUnicode_Compare(key, name) == 0)
            return args[nargs + i];
    }
    return NULL;
}

/* Whether none of `keys` is set in os.environ and no gdp.set_target chose a target: 1, 0, or -1
 * on error. */
static int switches_unset(PyObject *keys) {
    if (environ_bytes == Py_None)
        return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(keys);
    for (Py_ssize_t i = 0; i < n; i++) {
        int has = PyDict_Contains(environ_bytes, PyTuple_GET_ITEM(keys, i));
        if (has != 0)
            return has < 0 ? -1 : 0;
    }
    PyObject *api = PyDict_GetItemWithError(modules, str_api);
    if (api == NULL)
        return PyErr_Occurred() ? -1 : 1;
    PyObject *target = PyObject_GetAttr(api, str_default_target);
    if (target == NULL)
        return -1;
    int unset = target == Py_None;
    Py_DECREF(target);
    return unset;
}

/* The table's answer for a call in C: 1 OpenCV, 0 gdp, 2 ask dispatch.runs_opencv, -1 error. */
static int decide(Dispatcher *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *image = nargs > 0 ? args[0] : keyword(args, nargs, kwnames, str_src);
    if (image == NULL)
        image = keyword(args, nargs, kwnames, str_image);
    if (image == NULL || !PyObject_TypeCheck(image, ndarray_type))
        return 0; /* runs_opencv's first test: graph mode and the rest read no table */
    PyObject *rules = PyDict_GetItemWithError(dispatch_namespace, str_rules);
    if (rules == NULL)
        return PyErr_Occurred() ? -1 : 2;
    if (!PyDict_CheckExact(rules))
        return 2; /* the table not read yet: runs_opencv reads it */
    PyObject *rule = PyDict_GetItemWithError(rules, self->name);
    if (rule == NULL)
        return PyErr_Occurred() ? -1 : 0; /* the table gives this function nothing */
    if (!PyTuple_CheckExact(rule) || PyTuple_GET_SIZE(rule) != 5)
        return 2;
    Py_ssize_t position = PyLong_AsSsize_t(PyTuple_GET_ITEM(rule, 0));
    if (position == -1 && PyErr_Occurred())
        return -1;
    PyObject *flags = PyTuple_GET_ITEM(rule, 3);
    if (position >= 0) { /* by the variant argument's value */
        PyObject *value = nargs > position
                              ? args[position]
                              : keyword(args, nargs, kwnames, PyTuple_GET_ITEM(rule, 1));
        if (value == NULL)
            value = PyTuple_GET_ITEM(rule, 2);
        if (!PyDict_CheckExact(flags))
            return 2;
        PyObject *variants = flags;
        flags = PyDict_GetItemWithError(variants, value);
        if (flags == NULL) {
            /* No key equals it. An int: the table's key is its bits that name the variant
             * (warpAffine's interpolation without WARP_INVERSE_MAP), else it has none (gdp).
             * Anything else, unhashable too: runs_opencv decides. */
            PyErr_Clear();
            if (!PyLong_CheckExact(value))
                return 2;
            long long mask = PyLong_AsLongLong(PyTuple_GET_ITEM(rule, 4));
            long long bits = PyLong_AsLongLong(value);
            if ((mask == -1 || bits == -1) && PyErr_Occurred()) {
                PyErr_Clear(); /* past 64 bits */
                return 2;
            }
            if (mask == -1)
                return 0;
            PyObject *key = PyLong_FromLongLong(bits & mask);
            if (key == NULL)
                return -1;
            flags = PyDict_GetItemWithError(variants, key);
            Py_DECREF(key);
            if (flags == NULL)
                return PyErr_Occurred() ? -1 : 0;
        }
    }
    if (flags == Py_None)
        return 0;
    PyArrayObject_fields *array = (PyArrayObject_fields *)image;
    if (array->nd < 2)
        return 0;
    if (!PyTuple_CheckExact(flags) || PyTuple_GET_SIZE(flags) != n_bounds + 1)
        return 2;
    long long pixels = (long long)array->dimensions[0] * (long long)array->dimensions[1];
    Py_ssize_t k = 0;
    while (k < n_bounds && bounds[k] < pixels) /* bisect_left over the classes' bounds */
        k++;
    int slower = PyObject_IsTrue(PyTuple_GET_ITEM(flags, k));
    if (slower <= 0)
        return slower;
    int unset = switches_unset(switch_keys);
    return unset < 0 ? -1 : (unset ? 1 : 2);
}

/* The call's positional arguments as a tuple and its keywords as a dict (new references). */
static int as_tuple_and_dict(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                             PyObject **tuple, PyObject **dict) {
    *tuple = PyTuple_New(nargs);
    *dict = PyDict_New();
    if (*tuple == NULL || *dict == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(*tuple, i, args[i]);
    }
    Py_ssize_t n = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyDict_SetItem(*dict, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0)
            goto fail;
    return 0;
fail:
    Py_CLEAR(*tuple);
    Py_CLEAR(*dict);
    return -1;
}

/* Whether the call runs OpenCV's: 1, 0, -1 on error. */
static int runs_opencv(Dispatcher *self, PyObject *const *args, Py_ssize_t nargs,
                       PyObject *kwnames) {
    int answer = decide(self, args, nargs, kwnames);
    if (answer != 2)
        return answer;
    PyObject *python = PyDict_GetItemWithError(dispatch_namespace, str_runs_opencv);
    if (python == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "gdp.cv2.dispatch.runs_opencv is missing");
        return -1;
    }
    PyObject *tuple, *dict;
    if (as_tuple_and_dict(args, nargs, kwnames, &tuple, &dict) < 0)
        return -1;
    Py_INCREF(python);
    PyObject *result = PyObject_CallFunctionObjArgs(python, self->name, tuple, dict, NULL);
    Py_DECREF(python);
    Py_DECREF(tuple);
    Py_DECREF(dict);
    if (result == NULL)
        return -1;
    answer = PyObject_IsTrue(result);
    Py_DECREF(result);
    return answer;
}

static PyObject *dispatcher_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                       PyObject *kwnames) {
    Dispatcher *self = (Dispatcher *)callable;
    if (running == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "gdp.cv2._dispatch: configure() was not called");
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *inside;
    if (PyContextVar_Get(running, NULL, &inside) < 0)
        return NULL;
    int nested = inside != NULL && PyObject_IsTrue(inside) > 0;
    Py_XDECREF(inside);
    if (nested) /* inside another gdp.cv2 call: that call falls through */
        return PyObject_Vectorcall(self->raw, args, nargsf, kwnames);
    int opencv = runs_opencv(self, args, nargs, kwnames);
    if (opencv < 0)
        return NULL;
    if (opencv)
        return PyObject_Vectorcall(self->opencv, args, nargsf, kwnames);
    /* gdp's function with _running set (common.accelerate's through_gdp, without its frame:
     * 4-5 us of a 1080p call after a cache sweep); an exception goes to common.refused. */
    PyObject *token = PyContextVar_Set(running, Py_True);
    if (token == NULL)
        return NULL;
    PyObject *result = PyObject_Vectorcall(self->raw, args, nargsf, kwnames);
    PyObject *type = NULL, *value = NULL, *traceback = NULL;
    if (result == NULL)
        PyErr_Fetch(&type, &value, &traceback);
    int reset = PyContextVar_Reset(running, token);
    Py_DECREF(token);
    if (reset < 0) {
        Py_XDECREF(result);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        return NULL;
    }
    if (result != NULL)
        return result;
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL)
        PyException_SetTraceback(value, traceback);
    if (!PyErr_GivenExceptionMatches(type, PyExc_Exception)) { /* KeyboardInterrupt, ... */
        PyErr_Restore(type, value, traceback);
        return NULL;
    }
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    PyObject *tuple, *dict;
    if (as_tuple_and_dict(args, nargs, kwnames, &tuple, &dict) < 0) {
        Py_DECREF(value);
        return NULL;
    }
    result = PyObject_CallFunctionObjArgs(refused, self->name, value, tuple, dict, NULL);
    Py_DECREF(value);
    Py_DECREF(tuple);
    Py_DECREF(dict);
    return result;
}

static PyObject *dispatcher_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"name", "raw", "gdp", "opencv", NULL};
    PyObject *name, *raw, *gdp, *opencv;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UOOO:Dispatcher", names, &name, &raw, &gdp,
                                     &opencv))
        return NULL;
    Dispatcher *self = (Dispatcher *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->name = Py_NewRef(name);
    self->raw = Py_NewRef(raw);
    self->gdp = Py_NewRef(gdp);
    self->opencv = Py_NewRef(opencv);
    self->vectorcall = dispatcher_vectorcall;
    return (PyObject *)self;
}

static int dispatcher_traverse(Dispatcher *self, visitproc visit, void *arg) {
    Py_VISIT(self->name);
    Py_VISIT(self->raw);
    Py_VISIT(self->gdp);
    Py_VISIT(self->opencv);
    Py_VISIT(self->dict);
    return 0;
}

static int dispatcher_clear(Dispatcher *self) {
    Py_CLEAR(self->name);
    Py_CLEAR(self->raw);
    Py_CLEAR(self->gdp);
    Py_CLEAR(self->opencv);
    Py_CLEAR(self->dict);
    return 0;
}

static void dispatcher_dealloc(Dispatcher *self) {
    PyObject_GC_UnTrack(self);
    dispatcher_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *dispatcher_repr(Dispatcher *self) {
    return PyUnicode_FromFormat("<gdp.cv2 function %U>", self->name);
}

static PyObject *dispatcher_runs_opencv(PyObject *self, PyObject *const *args, size_t nargsf,
                                        PyObject *kwnames) {
    int answer = runs_opencv((Dispatcher *)self, args, PyVectorcall_NARGS(nargsf), kwnames);
    return answer < 0 ? NULL : PyBool_FromLong(answer);
}

static PyMethodDef dispatcher_methods[] = {
    {"runs_opencv", (PyCFunction)(void (*)(void))dispatcher_runs_opencv,
     METH_FASTCALL | METH_KEYWORDS,
     "runs_opencv(*args, **kwargs): whether a call with these arguments runs OpenCV's "
     "function (the table's answer), without calling either."},
    {NULL},
};

static PyMemberDef dispatcher_members[] = {
    {"name", T_OBJECT_EX, offsetof(Dispatcher, name), READONLY, "OpenCV's name"},
    {"raw", T_OBJECT_EX, offsetof(Dispatcher, raw), 0, "gdp's function as written"},
    {"gdp", T_OBJECT_EX, offsetof(Dispatcher, gdp), 0, "gdp's function with its fallthrough"},
    {"opencv", T_OBJECT_EX, offsetof(Dispatcher, opencv), 0, "OpenCV's own function"},
    {"__dictoffset__", T_PYSSIZET, offsetof(Dispatcher, dict), READONLY},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Dispatcher, vectorcall), READONLY},
    {NULL},
};

static PyGetSetDef dispatcher_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict},
    {NULL},
};

static PyTypeObject DispatcherType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gdp.cv2._dispatch.Dispatcher",
    .tp_basicsize = sizeof(Dispatcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "An accelerated gdp.cv2 function: OpenCV's or gdp's, by the dispatch table.",
    .tp_new = dispatcher_new,
    .tp_traverse = (traverseproc)dispatcher_traverse,
    .tp_clear = (inquiry)dispatcher_clear,
    .tp_dealloc = (destructor)dispatcher_dealloc,
    .tp_repr = (reprfunc)dispatcher_repr,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Dispatcher, vectorcall),
    .tp_dictoffset = offsetof(Dispatcher, dict),
    .tp_methods = dispatcher_methods,
    .tp_members = dispatcher_members,
    .tp_getset = dispatcher_getset,
};

static PyObject *configure(PyObject *module, PyObject *args) {
    PyObject *ndarray, *namespace, *environ, *keys, *sys_modules, *var, *bound_tuple, *handler,
        *targets, *python_plain;
    if (!PyArg_ParseTuple(args, "O!O!OO!O!OO!OO!O:configure", &PyType_Type, &ndarray,
                          &PyDict_Type, &namespace, &environ, &PyTuple_Type, &keys, &PyDict_Type,
                          &sys_modules, &var, &PyTuple_Type, &bound_tuple, &handler,
                          &PyTuple_Type, &targets, &python_plain))
        return NULL;
    if (!PyCallable_Check(handler)) {
        PyErr_SetString(PyExc_TypeError, "configure: expected refused() as a callable");
        return NULL;
    }
    if (environ != Py_None && !PyDict_CheckExact(environ)) {
        PyErr_SetString(PyExc_TypeError, "configure: os.environ's data: expected a dict or None");
        return NULL;
    }
    if (!PyContextVar_CheckExact(var)) {
        PyErr_SetString(PyExc_TypeError, "configure: expected a ContextVar");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(bound_tuple);
    if (n < 1 || n > (Py_ssize_t)(sizeof(bounds) / sizeof(bounds[0]))) {
        PyErr_Format(PyExc_ValueError, "configure: expected 1 to 8 bounds, got %zd", n);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        bounds[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(bound_tuple, i));
        if (bounds[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    n_bounds = n;
    Py_XSETREF(ndarray_type, (PyTypeObject *)Py_NewRef(ndarray));
    Py_XSETREF(dispatch_namespace, Py_NewRef(namespace));
    Py_XSETREF(environ_bytes, Py_NewRef(environ));
    Py_XSETREF(switch_keys, Py_NewRef(keys));
    Py_XSETREF(modules, Py_NewRef(sys_modules));
    Py_XSETREF(running, Py_NewRef(var));
    Py_XSETREF(refused, Py_NewRef(handler));
    Py_XSETREF(target_keys, Py_NewRef(targets));
    Py_XSETREF(plain_python, Py_NewRef(python_plain));
    Py_RETURN_NONE;
}

/* common.plain_image(src, out_bytes=0) from the array's struct: a call's short path asks it on
 * every call, and in Python its six NumPy attributes and the target's switch took 5-8 us of a
 * 1080p call after a cache sweep. The cases it cannot answer so (no ndarray, 2**27 values or
 * more, whose bytes it cannot bound without the dtype's size, a switch set) go to Python's. */
static PyObject *plain(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                       PyObject *kwnames) {
    if (plain_python == NULL || ndarray_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "gdp.cv2._dispatch: configure() was not called");
        return NULL;
    }
    Py_ssize_t keywords = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *src = nargs >= 1 ? args[0] : NULL, *out = NULL;
    if (nargs == 2 && keywords == 0)
        out = args[1];
    else if (nargs == 1 && keywords == 1 &&
             PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "out_bytes") == 0)
        out = args[1];
    else if (!(nargs == 1 && keywords == 0))
        src = NULL;
    if (src == NULL || !PyObject_TypeCheck(src, ndarray_type) || (out && !PyLong_CheckExact(out)))
        return PyObject_Vectorcall(plain_python, args, nargs, kwnames);
    PyArrayObject_fields *array = (PyArrayObject_fields *)src;
    int nd = array->nd;
    npy_intp *dims = array->dimensions;
    if (!(nd == 2 || (nd == 3 && dims[2] >= 2 && dims[2] <= 4)))
        Py_RETURN_FALSE;
    long long size = 1;
    for (int i = 0; i < nd; i++)
        if (dims[i] == 0)
            Py_RETURN_FALSE; /* empty */
    for (int i = 0; i < nd && size < (1LL << 27); i++)
        size = dims[i] >= (1LL << 27) ? (1LL << 27) : size * dims[i];
    if (!(array->flags & NPY_ARRAY_C_CONTIGUOUS))
        Py_RETURN_FALSE;
    long long out_bytes = out ? PyLong_AsLongLong(out) : 0;
    if (out_bytes == -1 && PyErr_Occurred()) {
        PyErr_Clear(); /* past 64 bits */
        return PyObject_Vectorcall(plain_python, args, nargs, kwnames);
    }
    if (size >= (1LL << 27) || out_bytes >= (1LL << 31))
        return PyObject_Vectorcall(plain_python, args, nargs, kwnames);
    int unset = switches_unset(target_keys);
    if (unset < 0)
        return NULL;
    if (!unset) /* GDP_TARGET or set_target: Python reads the target */
        return PyObject_Vectorcall(plain_python, args, nargs, kwnames);
    Py_RETURN_TRUE;
}

static PyMethodDef module_methods[] = {
    {"plain", (PyCFunction)(void (*)(void))plain, METH_FASTCALL | METH_KEYWORDS,
     "plain(src, out_bytes=0): gdp.cv2.common.plain_image, in C where it can answer."},
    {"configure", configure, METH_VARARGS,
     "configure(ndarray, dispatch_namespace, environ_bytes, switch_keys, sys_modules, running,"
     " bounds, refused, target_keys, plain_image): what every Dispatcher and plain() read."},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "gdp.cv2._dispatch",
    "gdp.cv2's dispatch in C (see _dispatch.c).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__dispatch(void) {
    str_rules = PyUnicode_InternFromString("_rules");
    str_runs_opencv = PyUnicode_InternFromString("runs_opencv");
    str_api = PyUnicode_InternFromString("gdp.api");
    str_default_target = PyUnicode_InternFromString("_default_target");
    str_src = PyUnicode_InternFromString("src");
    str_image = PyUnicode_InternFromString("image");
    if (!str_rules || !str_runs_opencv || !str_api || !str_default_target || !str_src ||
        !str_image)
        return NULL;
    if (PyType_Ready(&DispatcherType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "Dispatcher", (PyObject *)&DispatcherType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
