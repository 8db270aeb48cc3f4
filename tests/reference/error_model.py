"""How far the engine's logits may be from the float64 reference, and why.

The reference reads the weights exactly as stored (dequantization is exact in
float64), so the only differences left are the engine's arithmetic: float32
rounding everywhere, and int8 activations in the matmuls of quantized weights.
Pushing worst-case bounds through the whole network by hand would give an
astronomically loose result, so `Perturbed` runs the reference forward pass
again and adds, at every step, an error of the size that step may make. The
largest logit movement this causes over a few independent draws is the
model's own error scale P; the comparison allows 2 P.

What is injected (u = 2^-24, the unit roundoff of float32):

* float32 dot product of length K (any summation order: sequential, per-lane
  FMA, pairwise), after the probabilistic bound of Higham & Mary (2019):
      |y^ - y| <= lambda * sqrt(K) * u * sum_i |w_i x_i|,   lambda = 6,
  which fails with probability below 2K exp(-lambda^2 / 2) < 2e-4 per dot
  product for K <= 4096 (SIAM J. Sci. Comput. 41(5), 2019). The bound itself is injected, with a random sign per
  output: a real rounding error is typically ~sqrt(K) times smaller, so this
  part of the allowance is generous, yet still ~1e-4 of the logits' spread.
* int8 activations (Q8_0 / Q4_0 weights: blocks of 32 inputs; Q3_K / Q4_K / Q5_K /
  Q6_K: blocks of 256; kernels/matmul_kernels.h): each
  block of inputs becomes x^ = d q, d = max|x_block| / 127, q = round(x/d),
  so |x_i - x^_i| <= d / 2, and we allow e = d (1/2 + 127 * 2^-11), which also
  covers a scale stored as float16. The worst case of one output,
  sum_i |w_i| e_i, needs all K roundings to line up with the signs of w; it is
  ~1.5 sqrt(K) times the typical error, and injecting it at every output of
  every matmul moves the logits by more than their spread (tried: P ~ 1 std,
  useless). Rounding errors of values spread over many quantization steps
  behave as independent noise uniform on [-d/2, d/2] (the standard
  quantization-noise model), so the int8 step is injected as that: the matmul
  input gets x + eps with eps_i uniform on [-e_i, e_i] (variance 1.26x the
  real one), shared by the matmuls that read the same input (q/k/v, gate/up),
  and the error reaches the output through the actual weights. Exact(int8=True)
  (int8 rounding done exactly as the kernel contract says) must stay within
  the resulting tolerance; compare_logits.py checks that on every model.
  Comparing the engine with that exact-int8 simulation instead, to drop the
  int8 allowance, does not work: one rounding decision flipped by a float32
  difference moves the next matmul's outputs by ~1/sqrt(K) of their
  quantization step, flipping ~sqrt(K)/2 roundings there, so the flips
  avalanche through the layers and the two int8 computations end up as far
  apart as int8 is from exact (measured: up to 3% of std on these models).
* RMSNorm: a sum of K squares, a square root and two products:
  (lambda sqrt(K) + 4) u relative. SiLU x up: exp may be a vectorised
  approximation of a few ulp, so 16 u relative. Softmax: 16 u per exp plus
  the K-term normalisation, (16 + lambda sqrt(K)) u. A residual add or bias:
  2 u relative.
* RoPE: cos/sin rounded to float32 and two products (4 u), and an angle
  pos * base^(-2i/n_rot) that a float32 kernel may get wrong by 2 pos u
  radians: error <= (4 + 2 pos) u (|x_a| + |x_b|) on each rotated element.

Why 2 P is safe yet strict: the float32 part overestimates, the int8 part is
a slightly wider copy of the real noise, and the maximum over ~10^4 logits of
such a deviation varies little between draws, so a correct engine sits at or
below ~P; the factor 2 absorbs the draw-to-draw spread. Measured: over 36
int8 cases (4 shapes x 3 seeds x 3 sequences) the exact-int8 simulation
moved the logits by 0.53..1.00 P, and the engine's int8 kernels land on the
simulation's value. A real bug moves logits far more: planted one at a time
in the C++ (RoPE pairing swapped, GQA head mapping h % n_kv, RMSNorm epsilon
dropped, attention scale 1/sqrt(n_rot), RoPE frequencies over head_dim,
partial rotary ignored, Qwen2 K bias dropped, SiLU sign, Q4_0 offset 7) each
made tests/scripts/numpy_reference.sh fail, typically at 10-1000x the
tolerance on float-weight models (allowed ~1e-4 of the logits' std); the
int8 models (allowed a few percent of std) catch the gross ones.
"""

import numpy as np

U32 = 2.0 ** -24
LAMBDA = 6.0
# GGUF types whose matmuls quantize activations to int8, and the block size.
INT8_ACTIVATION_BLOCK = {2: 32, 8: 32, 11: 256, 12: 256, 13: 256, 14: 256, 4097: 32, 4098: 32}  # Q4_0, Q8_0; Q3_K, Q4_K, Q5_K, Q6_K; SP_Q8_0, SP_Q4_0
INT8_SCALE_SLACK = 0.5 + 127.0 * 2.0 ** -11


def _blocks(x, block):
    """x [rows, k] as [rows, k / block, block], widened with zero columns to
    whole blocks first (the engine does the same for weights stored padded,
    Tessera's any-shape storage), and the width to cut back to."""
    k = x.shape[-1]
    pad = -k % block
    if pad:
        x = np.concatenate([x, np.zeros((x.shape[0], pad))], axis=-1)
    return x.reshape(x.shape[0], -1, block), k


def int8_rounding_bound(x, block):
    """Per-element bound on |x - x^| for int8 blocks of `block` along the last axis."""
    xb, k = _blocks(np.abs(x), block)
    d = xb.max(axis=-1, keepdims=True) / 127.0
    return np.broadcast_to(d * INT8_SCALE_SLACK, xb.shape).reshape(x.shape[0], -1)[:, :k]


def int8_round(x, block):
    """x rounded to int8 blocks exactly as kernels/matmul_kernels.h specifies:
    d = amax / 127, q = round half to even (x / d), x^ = d q."""
    xb, k = _blocks(x, block)
    d = np.abs(xb).max(axis=-1, keepdims=True) / 127.0
    q = np.clip(np.rint(np.divide(xb, d, out=np.zeros_like(xb), where=d > 0)), -127, 127)
    return (q * d).reshape(x.shape[0], -1)[:, :k]


class Exact:
    """Plain float64: every hook returns its argument. With int8=True,
    quantized-weight matmuls round their input with int8_round() first
    (`SimulatedInt8`: what a correct int8 kernel computes, float32 aside)."""

    def __init__(self, int8=False):
        self.int8 = int8

    def matmul(self, x, m):
        block = INT8_ACTIVATION_BLOCK.get(m.ggml_type)
        if block and self.int8:
            x = int8_round(x, block)
        return x @ m.w.T

    def float_dot(self, y, abs_terms, k):
        return y

    def reduction_op(self, y, k):
        return y

    def pointwise(self, y):
        return y

    def transcendental(self, y):
        return y

    def softmax_op(self, p, k):
        return p

    def softcap_op(self, y, cap):
        return y

    def rope_op(self, y, x, positions, re_idx, im_idx):
        return y


def SimulatedInt8():
    return Exact(int8=True)


class Perturbed(Exact):
    """Adds each step's error (see the module comment), seeded; int8 rounding
    is modelled as uniform noise."""

    def __init__(self, seed):
        super().__init__()
        self.rng = np.random.default_rng(seed)
        self._noise_for = None  # the matmul input the current int8 noise belongs to
        self._noise = None

    def _signs(self, shape):
        return self.rng.integers(0, 2, size=shape) * 2.0 - 1.0

    def _relative(self, y, rel):
        return y + self._signs(y.shape) * rel * np.abs(y)

    def matmul(self, x, m):
        k = x.shape[-1]
        abs_w_t = np.abs(m.w).T
        f32 = LAMBDA * np.sqrt(k) * U32 * (np.abs(x) @ abs_w_t)
        block = INT8_ACTIVATION_BLOCK.get(m.ggml_type)
        if block:
            if x is not self._noise_for:
                e = int8_rounding_bound(x, block)
                self._noise_for, self._noise = x, self.rng.uniform(-1.0, 1.0, size=x.shape) * e
            x = x + self._noise
        return x @ m.w.T + self._signs(f32.shape) * f32

    def float_dot(self, y, abs_terms, k):
        return y + self._signs(y.shape) * LAMBDA * np.sqrt(k) * U32 * abs_terms

    def reduction_op(self, y, k):
        return self._relative(y, (LAMBDA * np.sqrt(k) + 4) * U32)

    def pointwise(self, y):
        return self._relative(y, 2 * U32)

    def transcendental(self, y):
        return self._relative(y, 16 * U32)

    def softmax_op(self, p, k):
        return self._relative(p, (16 + LAMBDA * np.sqrt(k)) * U32)

    def softcap_op(self, y, cap):
        # cap - 2 cap / (exp(2 y / cap) + 1) in float32 cancels near 0: an
        # absolute error of a few ulp of cap.
        return y + self._signs(y.shape) * 8 * U32 * cap

    def rope_op(self, y, x, positions, re_idx, im_idx):
        y = y.copy()
        size = np.abs(x[..., re_idx]) + np.abs(x[..., im_idx])
        per_pos = ((4 + 2 * positions) * U32)[:, None, None]
        for idx in (re_idx, im_idx):
            y[..., idx] += self._signs(size.shape) * per_pos * size
        return y


def uses_int8(ref):
    mats = [ref.output] + [L[k] for L in ref.layers for k in L if hasattr(L[k], "ggml_type")]
    return any(m.ggml_type in INT8_ACTIVATION_BLOCK for m in mats)


def propagated_error(ref, tokens, exact_logits, draws=3):
    """P: the largest logit movement over `draws` perturbed forward passes."""
    p = 0.0
    for seed in range(draws):
        pert = ref.forward(tokens, Perturbed(1000 + seed))
        p = max(p, float(np.max(np.abs(pert - exact_logits))))
    return p
