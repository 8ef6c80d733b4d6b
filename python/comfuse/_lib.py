"""ctypes declarations of include/comfuse.h, and where libcomfuse.so is found.

Search order: $COMFUSE_LIB (a path to the .so), the package directory (the
wheel copies build/libcomfuse.so there), the build/ directory recorded when
the package was installed, and the repository's build/ directory when the
package is used from its source tree.
"""
import ctypes
import os

from . import _build_info


class LibraryNotFound(ImportError):
    """libcomfuse.so could not be located or loaded."""


def _candidates():
    env = os.environ.get("COMFUSE_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(here, "libcomfuse.so")]
    if _build_info.BUILD_DIR:
        out.append(os.path.join(_build_info.BUILD_DIR, "libcomfuse.so"))
    out.append(os.path.join(here, "..", "..", "build", "libcomfuse.so"))
    return out


def _load():
    tried = []
    for path in _candidates():
        path = os.path.normpath(path)
        if not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise LibraryNotFound(
        "comfuse: libcomfuse.so not found; run `make` in the comfuse repository and "
        "reinstall (pip install ./python), or set COMFUSE_LIB to the library's path. Tried: "
        + "; ".join(tried))


# ---- the header's types -------------------------------------------------

DTYPES = ("bf16", "f16", "f32")            # cf_dtype, in enum order
CF_BF16, CF_F16, CF_F32 = 0, 1, 2

# cf_op in CF_OPS order (include/comfuse.h); checked against cf_op_name() when the library loads.
OPS = ("input", "const", "param", "matmul", "neg", "abs", "exp", "log", "sqrt", "rsqrt",
       "square", "reciprocal", "relu", "gelu", "gelu_erf", "silu", "sigmoid", "tanh", "add",
       "sub", "mul", "div", "max", "min", "pow", "sum", "mean", "max", "min", "transpose")
OP = {}
for _i, _kw in enumerate(OPS):
    OP.setdefault(_kw, _i)
OP["rmax"], OP["rmin"] = 27, 28          # one-argument max/min: the row reductions

# cf_status, in enum order: CF_OK = 0, CF_ERR_INVALID_ARG = 1, ...
STATUS = ("CF_OK", "CF_ERR_INVALID_ARG", "CF_ERR_SHAPE", "CF_ERR_DTYPE", "CF_ERR_PARSE", "CF_ERR_UNSUPPORTED",
          "CF_ERR_NO_MEMORY", "CF_ERR_IO", "CF_ERR_ALIGNMENT", "CF_ERR_NO_DEVICE", "CF_ERR_CUDA", "CF_ERR_NVRTC",
          "CF_ERR_CHECK", "CF_ERR_INTERNAL")
globals().update({_n: _i for _i, _n in enumerate(STATUS)})


class cf_error(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("file", ctypes.c_char * 256), ("line", ctypes.c_int),
                ("col", ctypes.c_int), ("msg", ctypes.c_char * 2048)]


class cf_tensor_info(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("dims", ctypes.c_int32 * 2)]


class cf_options(ctypes.Structure):
    _fields_ = ([(n, ctypes.c_int) for n in ("block_m", "block_n", "stages", "cluster_n", "reduce_mode",
                                             "schedule")]
                + [(n, ctypes.c_int64) for n in ("m", "n", "k")])


class cf_resources(ctypes.Structure):
    _fields_ = ([(n, ctypes.c_int) for n in
                 ("threads", "registers", "spill_bytes", "stack_bytes", "smem_bytes", "static_smem_bytes",
                  "cluster_n", "block_m", "block_n", "stages", "schedule", "resident_ctas", "row_ctas",
                  "reduce_mode")]
                + [("late_finish", ctypes.c_bool), ("pair_tiles", ctypes.c_bool),
                   ("gather_early", ctypes.c_bool), ("wgmma_serialized", ctypes.c_bool),
                   ("gelu_at_store", ctypes.c_int), ("split_k", ctypes.c_int), ("cache_hit", ctypes.c_bool),
                   ("compile_ms", ctypes.c_double), ("cache_path", ctypes.c_char * 1024),
                   ("cache_note", ctypes.c_char * 512)])


class cf_bindings(ctypes.Structure):
    _fields_ = [("dims", ctypes.POINTER(ctypes.c_int64)), ("inputs", ctypes.POINTER(ctypes.c_void_p)),
                ("params", ctypes.POINTER(ctypes.c_double))]


class cf_launch_args(ctypes.Structure):
    _fields_ = [("dims", ctypes.POINTER(ctypes.c_int64)), ("inputs", ctypes.POINTER(ctypes.c_uint64)),
                ("params", ctypes.POINTER(ctypes.c_double)), ("outputs", ctypes.POINTER(ctypes.c_uint64)),
                ("stream", ctypes.c_void_p)]


_P = ctypes.c_void_p
_I = ctypes.c_int
_S = ctypes.c_char_p
_E = ctypes.POINTER(cf_error)
_SIGS = {
    "cf_status_name": (_S, [_I]),
    "cf_dtype_name": (_S, [_I]),
    "cf_op_name": (_S, [_I]),
    "cf_graph_new": (_P, []),
    "cf_graph_free": (None, [_P]),
    "cf_graph_error": (_E, [_P]),
    "cf_graph_dim": (ctypes.c_int32, [_P, _S]),
    "cf_graph_input": (ctypes.c_int32, [_P, _S, _I, _I, ctypes.POINTER(ctypes.c_int32)]),
    "cf_graph_const": (ctypes.c_int32, [_P, ctypes.c_double]),
    "cf_graph_param": (ctypes.c_int32, [_P, _S]),
    "cf_graph_matmul": (ctypes.c_int32, [_P, ctypes.c_int32, ctypes.c_int32]),
    "cf_graph_unary": (ctypes.c_int32, [_P, _I, ctypes.c_int32]),
    "cf_graph_binary": (ctypes.c_int32, [_P, _I, ctypes.c_int32, ctypes.c_int32]),
    "cf_graph_reduce": (ctypes.c_int32, [_P, _I, ctypes.c_int32, _I]),
    "cf_graph_transpose": (ctypes.c_int32, [_P, ctypes.c_int32]),
    "cf_graph_output": (_I, [_P, _S, ctypes.c_int32, _I]),
    "cf_graph_set_name": (_I, [_P, ctypes.c_int32, _S]),
    "cf_graph_num_dims": (_I, [_P]),
    "cf_graph_num_inputs": (_I, [_P]),
    "cf_graph_num_params": (_I, [_P]),
    "cf_graph_num_outputs": (_I, [_P]),
    "cf_graph_input_info": (cf_tensor_info, [_P, _I]),
    "cf_graph_output_info": (cf_tensor_info, [_P, _I]),
    "cf_spec_parse": (_I, [_S, ctypes.c_size_t, _S, ctypes.POINTER(_P), _E]),
    "cf_lower": (_I, [_P, ctypes.POINTER(_P), _E]),
    "cf_ir_free": (None, [_P]),
    "cf_ir_print": (None, [_P, _P]),
    "cf_ir_num_stages": (_I, [_P]),
    "cf_reference_run": (_I, [_P, ctypes.POINTER(cf_bindings), ctypes.POINTER(ctypes.POINTER(ctypes.c_double)), _E]),
    "cf_options_for": (cf_options, [_P, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]),
    "cf_kernel_build": (_I, [_P, ctypes.POINTER(cf_options), _S, ctypes.POINTER(_P), _E]),
    "cf_kernel_source": (_S, [_P]),
    "cf_kernel_compile": (_I, [_P, _E]),
    "cf_kernel_prepare": (_I, [_P, ctypes.POINTER(ctypes.c_int64), _E]),
    "cf_kernel_resources": (_I, [_P, ctypes.POINTER(cf_resources), _E]),
    "cf_kernel_launch": (_I, [_P, ctypes.POINTER(cf_launch_args), _E]),
    "cf_kernel_free": (None, [_P]),
}


def _declare(lib):
    for name, (res, args) in _SIGS.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    for i, kw in enumerate(OPS):
        got = lib.cf_op_name(i).decode()
        if got != kw:
            raise LibraryNotFound("comfuse: %s does not match this package: op %d is '%s', expected '%s' "
                                  "(rebuild and reinstall both)" % (_path, i, got, kw))


_lib = None
_path = None
_error = None


def lib():
    """The loaded library (raises LibraryNotFound with the paths tried)."""
    global _lib, _path, _error
    if _lib is None:
        if _error is not None:
            raise _error
        try:
            cand, _path = _load()
            _declare(cand)
            _lib = cand
        except LibraryNotFound as e:
            _error = e
            raise
    return _lib


def path():
    lib()
    return _path


def _libc():
    return ctypes.CDLL(None)


libc = _libc()
libc.fopen.restype = _P
libc.fopen.argtypes = [_S, _S]
libc.fclose.argtypes = [_P]
