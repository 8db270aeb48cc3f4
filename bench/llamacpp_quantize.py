"""llama.cpp's own quantizer (llama_model_quantize in the libllama that
node-llama-cpp ships, bench/peer/, installed by bench/setup_peer), for the
quantization table of docs/BENCHMARKS.md. There is no llama-quantize binary
in that package; the library's C entry point is called through ctypes.

usage: /usr/bin/python3 bench/llamacpp_quantize.py IN.gguf OUT.gguf FTYPE [THREADS]
FTYPE: llama.cpp's llama_ftype number (2 Q4_0, 7 Q8_0, 14 Q4_K_S, 15 Q4_K_M,
11 Q3_K_S, 12 Q3_K_M). No importance matrix: the imatrix argument of the
C API is a C++ object this script cannot build.
"""

import ctypes
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


class Params(ctypes.Structure):
    # llama_model_quantize_params starts with int32 nthread, int32 ftype;
    # the rest is left as llama_model_quantize_default_params() sets it.
    # Returned by value in memory (System V: structs over 16 bytes), so a
    # buffer larger than the struct receives it whatever its exact size.
    _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int32), ("rest", ctypes.c_uint8 * 248)]


def main():
    inp, out, ftype = sys.argv[1], sys.argv[2], int(sys.argv[3])
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    libdir = os.path.join(HERE, "peer/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64")
    for lib in ["libggml-base.so", "libggml.v0.4.0.so"]:
        ctypes.CDLL(os.path.join(libdir, lib), mode=ctypes.RTLD_GLOBAL)
    llama = ctypes.CDLL(glob.glob(os.path.join(libdir, "libllama.v*.so"))[0], mode=ctypes.RTLD_GLOBAL)
    llama.llama_backend_init.restype = None
    llama.llama_backend_init()
    llama.llama_model_quantize_default_params.restype = Params
    p = llama.llama_model_quantize_default_params()
    p.nthread = threads
    p.ftype = ftype
    llama.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(Params)]
    llama.llama_model_quantize.restype = ctypes.c_uint32
    rc = llama.llama_model_quantize(inp.encode(), out.encode(), ctypes.byref(p))
    if rc != 0:
        sys.exit(f"llama_model_quantize failed ({rc})")


if __name__ == "__main__":
    main()
