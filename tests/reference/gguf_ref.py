"""An independent GGUF reader and dequantizer for the numpy reference.

Written from the GGUF specification (ggml's docs/gguf.md) and the ggml block
definitions, not from Tessera's C++ reader, so that a misreading of the
format in one is not silently shared by the other.

File layout (all little-endian):
    u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
    n_kv x  (string key, u32 value_type, value)
    n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset)
    padding to general.alignment (default 32)
    tensor data; each offset is relative to the start of this section and a
    multiple of the alignment.
A string is a u64 byte count followed by the bytes (no terminator). An array
value is u32 element type, u64 count, then the elements; arrays may nest.
Version 1 used u32 for counts and lengths; versions 2 and 3 use u64 (v3 only
added big-endian support, signalled by the byte order of the version field).

Only numpy and the standard library are used (run with /usr/bin/python3).
"""

import struct

import numpy as np

import dequant_ref

GGUF_MAGIC = b"GGUF"

# Metadata value types.
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64, T_F64 = range(13)
_SCALAR_FORMATS = {
    T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i",
    T_F32: "<f", T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d",
}

# Tensor types (ggml_type numbering) this reader can turn into numbers:
# name, elements per block, bytes per block.
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0, GGML_Q3_K, GGML_Q4_K, GGML_BF16 = 0, 1, 2, 8, 11, 12, 30
TENSOR_TYPES = {
    GGML_F32: ("F32", 1, 4),
    GGML_F16: ("F16", 1, 2),
    GGML_Q4_0: ("Q4_0", 32, 18),
    GGML_Q8_0: ("Q8_0", 32, 34),
    GGML_Q3_K: ("Q3_K", 256, 110),
    GGML_Q4_K: ("Q4_K", 256, 144),
    GGML_BF16: ("BF16", 1, 2),
}
# Tessera's sparse matrices (src/kernels/sparse.h, docs/FORMATS.md "SPRS"):
# variable size, read from their own header.
SP_Q8_0, SP_Q4_0 = 4097, 4098
SPARSE_TYPES = {SP_Q8_0: "SP_Q8_0", SP_Q4_0: "SP_Q4_0"}


class GGUFError(Exception):
    pass


class _Reader:
    def __init__(self, buf, name):
        self.buf = buf
        self.pos = 0
        self.name = name

    def take(self, n, what):
        if n > len(self.buf) - self.pos:
            raise GGUFError(f"{self.name}: truncated reading {what} at offset {self.pos}")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt, what):
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size, what))[0]

    def string(self, what):
        n = self.scalar("<Q", what)
        return bytes(self.take(n, what)).decode("utf-8", errors="surrogateescape")

    def value(self, vtype, what, depth=0):
        if vtype in _SCALAR_FORMATS:
            return self.scalar(_SCALAR_FORMATS[vtype], what)
        if vtype == T_STRING:
            return self.string(what)
        if vtype == T_ARRAY:
            if depth > 16:
                raise GGUFError(f"{self.name}: arrays nested too deep in {what}")
            etype = self.scalar("<I", what)
            count = self.scalar("<Q", what)
            if etype in _SCALAR_FORMATS:
                fmt = _SCALAR_FORMATS[etype]
                size = struct.calcsize(fmt)
                raw = self.take(count * size, what)
                return list(struct.unpack("<" + fmt[1:] * count, raw)) if count else []
            return [self.value(etype, what, depth + 1) for _ in range(count)]
        raise GGUFError(f"{self.name}: unknown value type {vtype} in {what}")


class TensorInfo:
    def __init__(self, name, ne, ggml_type, offset):
        self.name = name
        self.ne = ne            # innermost dimension first, as in the file
        self.ggml_type = ggml_type
        self.offset = offset    # from the start of the data section

    @property
    def shape(self):
        """numpy shape (outermost first)."""
        return tuple(reversed(self.ne))

    @property
    def type_name(self):
        if self.ggml_type in SPARSE_TYPES:
            return SPARSE_TYPES[self.ggml_type]
        return TENSOR_TYPES.get(self.ggml_type, (f"type{self.ggml_type}",))[0]

    def n_bytes(self):
        if self.ggml_type in SPARSE_TYPES:
            return self.var_bytes
        if self.ggml_type not in TENSOR_TYPES:
            raise GGUFError(f"tensor '{self.name}': unsupported type {self.ggml_type}")
        _, block, size = TENSOR_TYPES[self.ggml_type]
        n = int(np.prod(self.ne, dtype=np.int64))
        if self.ne[0] % block:
            raise GGUFError(f"tensor '{self.name}': row {self.ne[0]} not a multiple of {block}")
        return n // block * size


class GGUFFile:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.path = path
        r = _Reader(memoryview(self.buf), path)
        if bytes(r.take(4, "magic")) != GGUF_MAGIC:
            raise GGUFError(f"{path}: not a GGUF file")
        self.version = r.scalar("<I", "version")
        if self.version not in (2, 3):
            raise GGUFError(f"{path}: unsupported GGUF version {self.version}")
        n_tensors = r.scalar("<Q", "tensor count")
        n_kv = r.scalar("<Q", "metadata count")
        self.metadata = {}
        self.metadata_types = {}
        for _ in range(n_kv):
            key = r.string("metadata key")
            vtype = r.scalar("<I", key)
            if key in self.metadata:
                raise GGUFError(f"{path}: duplicate key {key}")
            self.metadata[key] = r.value(vtype, key)
            self.metadata_types[key] = vtype
        self.alignment = int(self.metadata.get("general.alignment", 32))
        self.tensors = {}
        for _ in range(n_tensors):
            name = r.string("tensor name")
            n_dims = r.scalar("<I", name)
            ne = [r.scalar("<Q", name) for _ in range(n_dims)]
            ggml_type = r.scalar("<I", name)
            offset = r.scalar("<Q", name)
            self.tensors[name] = TensorInfo(name, ne, ggml_type, offset)
        self.data_offset = -(-r.pos // self.alignment) * self.alignment
        for t in self.tensors.values():
            if t.ggml_type in SPARSE_TYPES:
                at = self.data_offset + t.offset
                if bytes(self.buf[at:at + 4]) != b"SPRS":
                    raise GGUFError(f"{path}: tensor '{t.name}' has no SPRS header")
                t.var_bytes = int(np.frombuffer(self.buf, dtype="<u8", count=1, offset=at + 8)[0])
            if t.offset % self.alignment:
                raise GGUFError(f"{path}: tensor '{t.name}' offset {t.offset} misaligned")
            end = self.data_offset + t.offset + t.n_bytes()
            if end > len(self.buf):
                raise GGUFError(f"{path}: tensor '{t.name}' extends past the end of the file")

    def get(self, key, default=None):
        return self.metadata.get(key, default)

    def raw(self, name):
        t = self.tensors[name]
        start = self.data_offset + t.offset
        return np.frombuffer(self.buf, dtype=np.uint8, count=t.n_bytes(), offset=start)

    def tensor(self, name):
        """The tensor as float64, numpy shape (outermost first), values
        exactly as stored (dequantization is exact in float64)."""
        t = self.tensors[name]
        if t.ggml_type in SPARSE_TYPES:
            flat = dequantize_sparse(self.raw(name), t.ne)
        else:
            flat = dequantize(t.ggml_type, self.raw(name), int(np.prod(t.ne, dtype=np.int64)))
        out = flat.reshape(t.shape)
        # Tessera's any-shape storage: rows padded with zero columns to a
        # whole block, the true width in tessera.padded_cols.<name>.
        # Q4_K stores w = d q - m: a padding column in a sub-block that also
        # holds real columns is 0 rounded to that sub-block's grid, not
        # exactly 0 (it meets a zero activation); wholly padded sub-blocks are 0.
        width = self.get("tessera.padded_cols." + name, None)
        if width is not None:
            w = int(width)
            first_zero = w if t.ggml_type != GGML_Q4_K else -(-w // 32) * 32
            if not 0 < w < t.ne[0] or np.any(out[..., first_zero:] != 0):
                raise GGUFError(f"{name}: bad padding to {t.ne[0]} columns from {width}")
            out = out[..., : int(width)]
        return out


def _f16(raw_u16):
    return raw_u16.view("<f2").astype(np.float64)


def dequantize_sparse(raw, ne):
    """A sparse tensor's bytes -> float64[rows * cols], read from the layout
    in docs/FORMATS.md: a 64-byte header, the start of each group of 16
    rows' stream, then the streams: per super-block of 64 columns 16 tile
    masks (u64; tile j: bit 4 r + i keeps row r's column 4 j + i) and the 16
    rows' f16 scales, then tile 0's kept values in bit order, tile 1's, ...
    (int8 q stored as the byte q + 128, or 4-bit q with w = d (q - 8), two a
    byte, low nibble first, each tile starting on a byte)."""
    hdr = raw[:64]
    value_type, block = (int(v) for v in hdr[16:24].view("<u4"))
    rows, cols, stream_bytes, kept = (int(v) for v in hdr[24:56].view("<u8"))
    if block != 64 or cols != ne[0] or rows * cols != int(np.prod(ne, dtype=np.int64)):
        raise GGUFError(f"sparse header {rows} x {cols} block {block} against shape {ne}")
    G = 16
    nb, groups = cols // 64, -(-rows // G)
    starts = raw[64:64 + 8 * (groups + 1)].view("<u8").astype(np.int64)
    streams = raw[64 + 8 * (groups + 1):]
    out = np.zeros((groups * G, cols))
    pos = np.arange(64, dtype=np.uint64)
    n_kept = 0
    for g in range(groups):
        at = int(starts[g])
        for b in range(nb):
            masks = streams[at:at + 8 * G].view("<u8")
            d = _f16(streams[at + 8 * G:at + 10 * G].copy().view("<u2"))
            at += 10 * G
            q = np.zeros((G, 64))
            for j in range(G):
                bits = ((masks[j] >> pos) & np.uint64(1)).astype(bool)
                k = int(bits.sum())
                if value_type == 8:
                    vals = streams[at:at + k].astype(np.float64) - 128  # stored as q + 128
                    at += k
                else:
                    nbytes = -(-k // 2)
                    packed = streams[at:at + nbytes]
                    vals = np.stack([packed & 15, packed >> 4], axis=1).reshape(-1)[:k].astype(np.float64) - 8
                    at += nbytes
                where = np.nonzero(bits)[0]
                q[where // 4, 4 * j + where % 4] = vals
                n_kept += k
            out[G * g:G * g + G, 64 * b:64 * b + 64] = d[:, None] * q
        if at != int(starts[g + 1]):
            raise GGUFError(f"sparse group {g}: stream ends at {at}, the next starts at {int(starts[g + 1])}")
    if n_kept != kept or int(starts[groups]) != stream_bytes:
        raise GGUFError(f"sparse: {n_kept} kept, the header says {kept}")
    return out[:rows].reshape(-1)


def dequantize(ggml_type, raw, n):
    """Bytes of n elements of `ggml_type` -> float64[n]."""
    if ggml_type == GGML_F32:
        return raw.view("<f4").astype(np.float64)
    if ggml_type == GGML_F16:
        return raw.view("<f2").astype(np.float64)
    if ggml_type == GGML_BF16:
        # bfloat16 is the top half of an IEEE binary32.
        bits = raw.view("<u2").astype(np.uint32) << 16
        return bits.view("<f4").astype(np.float64)
    if ggml_type == GGML_Q8_0:
        # block_q8_0: f16 d; int8 qs[32]; x = d * q.
        blocks = raw.reshape(-1, 34)
        d = _f16(blocks[:, 0:2].copy().view("<u2")).reshape(-1, 1)
        q = blocks[:, 2:].copy().view(np.int8).astype(np.float64)
        return (d * q).reshape(n)
    if ggml_type in (GGML_Q3_K, GGML_Q4_K):
        # The block formats' own numpy reference (float32 steps in
        # llama.cpp's order), exact in float64 from there.
        kind = "q3_k" if ggml_type == GGML_Q3_K else "q4_k"
        return dequant_ref.dequant(kind, raw.tobytes()).astype(np.float64)
    if ggml_type == GGML_Q4_0:
        # block_q4_0: f16 d; u8 qs[16]; element j is the low nibble of qs[j],
        # element j + 16 its high nibble; x = d * (nibble - 8).
        blocks = raw.reshape(-1, 18)
        d = _f16(blocks[:, 0:2].copy().view("<u2")).reshape(-1, 1)
        qs = blocks[:, 2:].astype(np.int64)
        q = np.concatenate([(qs & 0x0F) - 8, (qs >> 4) - 8], axis=1).astype(np.float64)
        return (d * q).reshape(n)
    raise GGUFError(f"dequantize: unsupported tensor type {ggml_type}")


if __name__ == "__main__":
    import sys

    g = GGUFFile(sys.argv[1])
    print(f"version {g.version}, alignment {g.alignment}, data at {g.data_offset}")
    for k, v in g.metadata.items():
        s = repr(v)
        print(f"  {k} = {s[:80] + '...' if len(s) > 80 else s}")
    for t in g.tensors.values():
        print(f"  {t.name:32s} {t.type_name:5s} {t.ne}")
