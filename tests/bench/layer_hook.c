/* The frame evaluation hook of tests/bench/instructions_http.py, which fills in @PAIRS@,
   @TABLE@ and @N@ (the layers) and builds it with gcc. CPython 3.11 only. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* The head of CPython 3.11's _PyInterpreterFrame (internal/pycore_frame.h). */
typedef struct { void *f_func, *f_globals, *f_builtins, *f_locals; PyObject *f_code; } Head;
typedef PyObject *(*Eval)(PyThreadState *, struct _PyInterpreterFrame *, int);

static PyObject *classify;
static Py_ssize_t extra_index = -1;
static __thread int current;
static __thread int busy;

#define PAIR(i, j) \
  __attribute__((noinline)) PyObject *mcplayer_t_##i##_##j( \
      PyThreadState *ts, struct _PyInterpreterFrame *f, int x) { \
    PyObject *r = _PyEval_EvalFrameDefault(ts, f, x); \
    __asm__ volatile("" ::: "memory"); /* no tail call: callgrind must see the return */ \
    return r; \
  }
@PAIRS@
static Eval table[@N@][@N@] = {@TABLE@};

static PyObject *hook(PyThreadState *ts, struct _PyInterpreterFrame *f, int x) {
  PyObject *code = ((Head *)f)->f_code;
  void *extra = NULL;
  int layer;
  if (_PyCode_GetExtra(code, extra_index, &extra) == 0 && extra != NULL) {
    layer = (int)(intptr_t)extra - 2;
  } else if (busy) {
    return _PyEval_EvalFrameDefault(ts, f, x);
  } else {
    PyObject *type, *value, *trace;
    PyErr_Fetch(&type, &value, &trace);
    busy = 1;
    PyObject *answer = PyObject_CallOneArg(classify, code);
    busy = 0;
    layer = answer ? (int)PyLong_AsLong(answer) : 0;
    Py_XDECREF(answer);
    PyErr_Clear();
    PyErr_Restore(type, value, trace);
    /* -3: not classed yet (instructions_by_function.py, before its warm-up): asked again */
    if (layer == -3) return _PyEval_EvalFrameDefault(ts, f, x);
    if (layer < -1 || layer >= @N@) layer = 0;
    _PyCode_SetExtra(code, extra_index, (void *)(intptr_t)(layer + 2));
  }
  int before = current;
  if (layer == -1 || layer == before) return _PyEval_EvalFrameDefault(ts, f, x);
  current = layer;
  PyObject *r = table[before][layer](ts, f, x);
  current = before;
  return r;
}

static PyObject *install(PyObject *self, PyObject *function) {
  Py_INCREF(function);
  classify = function;
  extra_index = _PyEval_RequestCodeExtraIndex(NULL);
  _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState_Get(), hook);
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {{"install", install, METH_O, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_mcplayers", NULL, -1, methods};
PyMODINIT_FUNC PyInit__mcplayers(void) { return PyModule_Create(&module); }
