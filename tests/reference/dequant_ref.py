#!/usr/bin/python3
"""Independent numpy reference for the GGUF block formats, written from the
format description (ggml's block layouts), not from Tessera's C++ code.

Usage:
  dequant_ref.py dequant TYPE IN OUT     raw blocks of TYPE -> float32 values
  dequant_ref.py quant TYPE IN OUT       float32 values -> raw blocks (q8_0, q4_0, f16, bf16)

TYPE: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl mxfp4 q2_k q3_k q4_k q5_k q6_k
iq4_xs tq1_0 tq2_0. Every arithmetic step is done in
float32 in the order the format's reference dequantizer uses, so results
are comparable bit for bit.
"""
import sys

import numpy as np

F32 = np.float32


def dequant(t, raw):
    if t == "f32":
        return np.frombuffer(raw, "<f4").copy()
    if t == "f16":
        return np.frombuffer(raw, "<f2").astype(F32)
    if t == "bf16":
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(F32)
    if t == "q8_0":
        # 2-byte half scale d, then 32 signed bytes: x = d * q.
        b = np.frombuffer(raw, [("d", "<f2"), ("qs", "i1", 32)])
        return (b["qs"].astype(F32) * b["d"].astype(F32)[:, None]).ravel()
    if t == "q4_0":
        # d, then 16 bytes: value j in the low nibble of byte j, value j+16
        # in its high nibble; x = d * (nibble - 8).
        b = np.frombuffer(raw, [("d", "<f2"), ("qs", "u1", 16)])
        q = np.concatenate([b["qs"] & 15, b["qs"] >> 4], axis=1).astype(np.int32) - 8
        return (q.astype(F32) * b["d"].astype(F32)[:, None]).ravel()
    if t in ("q4_k", "q5_k"):
        # d, dmin, 12 bytes of 6-bit (scale, min) for 8 sub-blocks of 32,
        # (q5_k: 32 bytes of fifth bits,) 128 bytes of nibbles. Sub-blocks 0-3: scale = s[j] & 63,
        # min = s[j+4] & 63. Sub-blocks 4-7: low 4 bits from byte j+4
        # (scale: low nibble, min: high nibble), top 2 bits from the top
        # bits of byte j-4 (scale) / byte j (min).
        fields = [("d", "<f2"), ("dmin", "<f2"), ("s", "u1", 12)]
        if t == "q5_k":
            fields.append(("qh", "u1", 32))
        b = np.frombuffer(raw, fields + [("qs", "u1", 128)])
        s = b["s"].astype(np.int32)
        sc = np.empty((len(b), 8), np.int32)
        mn = np.empty((len(b), 8), np.int32)
        sc[:, :4] = s[:, 0:4] & 63
        mn[:, :4] = s[:, 4:8] & 63
        sc[:, 4:] = (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)
        mn[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
        # 4 groups of 32 bytes; group g holds sub-block 2g (low nibbles)
        # and 2g+1 (high nibbles).
        qs = b["qs"].reshape(len(b), 4, 32)
        q = np.stack([qs & 15, qs >> 4], axis=2).reshape(len(b), 8, 32).astype(np.int32)
        if t == "q5_k":
            # Sub-block s (0..7), position i: the fifth bit is bit s of qh[i].
            bits = (b["qh"][:, None, :].astype(np.int32) >> np.arange(8)[None, :, None]) & 1
            q = q | (bits << 4)
        q = q.astype(F32)
        d = b["d"].astype(F32)[:, None, None]
        dmin = b["dmin"].astype(F32)[:, None, None]
        d1 = d * sc[:, :, None].astype(F32)
        m1 = dmin * mn[:, :, None].astype(F32)
        return (d1 * q - m1).ravel()
    if t == "q3_k":
        # 32 bytes of third bits (hmask), 64 bytes of 2-bit lows (qs), 12
        # bytes of 6-bit scales for 16 sub-blocks of 16, half d. Value
        # 128 h + 32 j + l: low bits j of qs[32 h + l], third bit 4 h + j of
        # hmask[l]; q = low - 4 where the third bit is clear, else low.
        # Scale s: its nibble is byte s % 8's low (s < 8) or high nibble, its
        # top two bits are bits 2 (s // 4) of byte 8 + s % 4;
        # x = (d * (scale - 32)) * q.
        b = np.frombuffer(raw, [("hm", "u1", 32), ("qs", "u1", 64), ("s", "u1", 12), ("d", "<f2")])
        s = b["s"].astype(np.int32)
        k = np.arange(16)
        nib = np.where(k < 8, s[:, k % 8] & 15, s[:, k % 8] >> 4)
        top = (s[:, 8 + k % 4] >> (2 * (k // 4))) & 3
        sc = (nib | (top << 4)) - 32
        i = np.arange(256)
        h, j, l = i // 128, (i % 128) // 32, i % 32
        low = (b["qs"][:, 32 * h + l].astype(np.int32) >> (2 * j)) & 3
        third = (b["hm"][:, l].astype(np.int32) >> (4 * h + j)) & 1
        q = (low - 4 * (1 - third)).astype(F32)
        dl = b["d"].astype(F32)[:, None] * sc[:, i // 16].astype(F32)
        return (dl * q).ravel()
    if t == "q6_k":
        # 128 bytes low nibbles (ql), 64 bytes 2-bit highs (qh), 16 signed
        # scales (one per 16 values), half d. Per half of 128 values: value
        # j uses ql[j % 64] (low nibble for j < 64, high for j >= 64) and
        # bit pair j // 32 of qh[j % 32]; q = (low | high << 4) - 32;
        # x = d * scale[value // 16] * q.
        b = np.frombuffer(raw, [("ql", "u1", 128), ("qh", "u1", 64), ("sc", "i1", 16), ("d", "<f2")])
        n = len(b)
        j = np.arange(128)
        out = np.empty((n, 256), F32)
        for half in range(2):
            ql = b["ql"][:, 64 * half:64 * half + 64][:, j % 64].astype(np.int32)
            low = np.where(j < 64, ql & 15, ql >> 4)
            qh = b["qh"][:, 32 * half:32 * half + 32][:, j % 32].astype(np.int32)
            high = (qh >> (2 * (j // 32))) & 3
            q = ((low | (high << 4)) - 32).astype(F32)
            sc = b["sc"][:, (128 * half + j) // 16].astype(F32)
            out[:, 128 * half:128 * half + 128] = (b["d"].astype(F32)[:, None] * sc) * q
        return out.ravel()
    if t in ("q4_1", "q5_0", "q5_1", "iq4_nl", "mxfp4"):
        return dequant_32(t, raw)
    if t == "q2_k":
        # 16 bytes of scales (low nibble: scale, high: min, for 16
        # sub-blocks of 16), 64 bytes of 2-bit values in Q3_K's order, half
        # d, half dmin: x = (d * scale) * q - dmin * min.
        b = np.frombuffer(raw, [("s", "u1", 16), ("qs", "u1", 64), ("d", "<f2"), ("dmin", "<f2")])
        q = two_bit_values(b["qs"]).astype(F32)
        s = b["s"][:, np.arange(256) // 16].astype(np.int32)
        dl = b["d"].astype(F32)[:, None] * (s & 15).astype(F32)
        ml = b["dmin"].astype(F32)[:, None] * (s >> 4).astype(F32)
        return (dl * q - ml).ravel()
    if t == "iq4_xs":
        # half d, 16-bit scales_h (2 bits per sub-block), 4 bytes scales_l
        # (a nibble per sub-block), 8 sub-blocks of 32 values as 16 bytes of
        # IQ4_NL nibbles each: x = (d * (ls - 32)) * level.
        b = np.frombuffer(raw, [("d", "<f2"), ("sh", "<u2"), ("sl", "u1", 4), ("qs", "u1", 128)])
        k = np.arange(8)
        ls = ((b["sl"][:, k // 2].astype(np.int32) >> (4 * (k % 2))) & 15) | \
             (((b["sh"][:, None].astype(np.int32) >> (2 * k)) & 3) << 4)
        qs = b["qs"].reshape(len(b), 8, 16).astype(np.int32)
        lev = IQ4[np.concatenate([qs & 15, qs >> 4], axis=2)].astype(F32)  # [n, 8, 32]
        dl = b["d"].astype(F32)[:, None] * (ls - 32).astype(F32)
        return (dl[:, :, None] * lev).ravel()
    if t == "tq2_0":
        # 64 bytes of 2-bit values (Q3_K's order), half d: x = (q - 1) * d.
        b = np.frombuffer(raw, [("qs", "u1", 64), ("d", "<f2")])
        return ((two_bit_values(b["qs"]) - 1).astype(F32) * b["d"].astype(F32)[:, None]).ravel()
    if t == "tq1_0":
        # 48 + 4 bytes of base-3 digits, half d. A byte v holds 5 digits (4 in
        # qh): digit n = ((v * 3^n mod 256) * 3) >> 8. Values: qs[0:32] digit
        # n -> 32 n + m; qs[32:48] digit n -> 160 + 16 n + m; qh digit n ->
        # 240 + 4 n + m. x = (digit - 1) * d.
        b = np.frombuffer(raw, [("qs", "u1", 48), ("qh", "u1", 4), ("d", "<f2")])

        def digits(v, count):  # [n, bytes] -> [n, count * bytes], digit-major
            v = v.astype(np.uint32)
            return np.concatenate([(((v * 3 ** k) & 255) * 3) >> 8 for k in range(count)], axis=1)

        t3 = np.concatenate([digits(b["qs"][:, :32], 5), digits(b["qs"][:, 32:], 5), digits(b["qh"], 4)], axis=1)
        return ((t3.astype(np.int32) - 1).astype(F32) * b["d"].astype(F32)[:, None]).ravel()
    raise SystemExit("unknown type " + t)


# IQ4_NL's 16 levels (the format's non-uniform grid).
IQ4 = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int32)
# E2M1 (OCP MX FP4) magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 times two; bit 3 the sign.
MXFP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int32)


def two_bit_values(qs):
    """[n, 64] bytes -> [n, 256]: value 128 h + 32 j + l in bits 2j of byte 32 h + l."""
    i = np.arange(256)
    return (qs[:, 32 * (i // 128) + i % 32].astype(np.int32) >> (2 * ((i % 128) // 32))) & 3


def dequant_32(t, raw):
    """The 32-value block types; value j < 16 in the low nibble of qs[j],
    value j + 16 in its high nibble; Q5 types' fifth bit of value j is bit j
    of the little-endian 32-bit qh."""
    fields = {"q4_1": [("d", "<f2"), ("m", "<f2")], "q5_0": [("d", "<f2"), ("qh", "<u4")],
              "q5_1": [("d", "<f2"), ("m", "<f2"), ("qh", "<u4")], "iq4_nl": [("d", "<f2")],
              "mxfp4": [("e", "u1")]}[t]
    b = np.frombuffer(raw, fields + [("qs", "u1", 16)])
    q = np.concatenate([b["qs"] & 15, b["qs"] >> 4], axis=1).astype(np.int32)
    if t in ("q5_0", "q5_1"):
        q |= ((b["qh"][:, None].astype(np.int64) >> np.arange(32)) & 1).astype(np.int32) << 4
    if t == "mxfp4":
        # Half the E8M0 scale: 2^(e - 128) (e = 0, 1: the subnormals 2^-128, 2^-127).
        e = b["e"].astype(np.float64)
        d = np.exp2(e - 128).astype(F32)
        return (MXFP4[q].astype(F32) * d[:, None]).ravel()
    d = b["d"].astype(F32)[:, None]
    if t == "iq4_nl":
        return (d * IQ4[q].astype(F32)).ravel()
    if t == "q5_0":
        return ((q - 16).astype(F32) * d).ravel()
    return (q.astype(F32) * d + b["m"].astype(F32)[:, None]).ravel()


def round_half_away(v):
    return np.sign(v) * np.floor(np.abs(v) + F32(0.5))


def quant(t, x):
    if t == "f16":
        return x.astype("<f2").tobytes()
    if t == "bf16":
        u = x.view(np.uint32).astype(np.uint64)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        nan = np.isnan(x)
        r[nan] = ((u[nan] >> 16) | 64).astype(np.uint16)
        return r.astype("<u2").tobytes()
    blocks = x.reshape(-1, 32)
    if t == "q8_0":
        # d = max|x| / 127 (float32), stored as half; q = round-half-away(x / d)
        # computed as x * (1 / d) in float32.
        amax = np.abs(blocks).max(axis=1)
        d = (amax / F32(127)).astype(F32)
        inv = np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0)).astype(F32)
        q = round_half_away(blocks * inv[:, None]).astype(np.int8)
        out = np.zeros(len(blocks), [("d", "<f2"), ("qs", "i1", 32)])
        out["d"] = d.astype(np.float16)
        out["qs"] = q
        return out.tobytes()
    if t == "q4_0":
        # The value of largest magnitude (first one on ties), sign kept, maps
        # to -8: d = max / -8; q = min(15, trunc(x / d + 8.5)).
        idx = np.abs(blocks).argmax(axis=1)
        mx = blocks[np.arange(len(blocks)), idx]
        d = (mx / F32(-8)).astype(F32)
        inv = np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0)).astype(F32)
        v = (blocks * inv[:, None] + F32(8.5)).astype(F32)
        q = np.minimum(15, np.trunc(v).astype(np.int32)).astype(np.uint8)
        out = np.zeros(len(blocks), [("d", "<f2"), ("qs", "u1", 16)])
        out["d"] = d.astype(np.float16)
        out["qs"] = q[:, :16] | (q[:, 16:] << 4)
        return out.tobytes()
    raise SystemExit("cannot quantize to " + t)


def main():
    mode, t, src, dst = sys.argv[1:5]
    raw = open(src, "rb").read()
    with np.errstate(all="ignore"):
        if mode == "dequant":
            out = dequant(t, raw).astype("<f4").tobytes()
        else:
            out = quant(t, np.frombuffer(raw, "<f4").copy())
    open(dst, "wb").write(out)


if __name__ == "__main__":
    main()
