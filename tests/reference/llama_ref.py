"""A float64 numpy forward pass of Llama-family models read from GGUF.

Deliberately written differently from the C++ engine (src/model/arch/*.cc and
the kernels): the whole sequence is processed as matrices, causal attention is
materialised as a [heads, T, T] score matrix with an exact softmax, RoPE is a
multiplication of complex numbers, and grouped-query attention repeats each
KV head for its group of query heads. Hyperparameters come from the GGUF
metadata ("<arch>.embedding_length", ...) as the engine reads them.

Every arithmetic step goes through a `numerics` object (see error_model.py):
`Exact` is plain float64; `Perturbed` adds, at each step, an error of the
size the engine's float32 / int8 arithmetic is allowed to make there, which is
how the comparison derives its tolerance.
"""

import numpy as np

from gguf_ref import GGUFError, GGUFFile
from error_model import Exact

# Architectures this reference knows, and how they differ from "llama".
# qwen2 adds biases to the Q, K and V projections and rotates NeoX-style;
# qwen3 drops the biases and RMS-normalises each head of q and k before
# RoPE. llama (Llama 3.1+) may divide its RoPE frequencies by the factors in
# rope_freqs.weight; llama, mistral and phi3 may declare a sliding window.
# gemma2 / gemma3 (GEMMA below) scale the embeddings by sqrt(n_embd), norm
# the attention and FFN outputs again before the residual, use GELU (tanh)
# instead of SiLU, scale queries by Gemma's query_pre_attn_scalar rule,
# interleave local (windowed) and global layers; gemma2 soft-caps scores and
# logits, gemma3 norms q/k heads and gives local layers their own RoPE base.
# phi3 stores Q/K/V and gate/up fused and may carry LongRoPE factors.
# gpt-oss (GPT_OSS below): biases on Q, K, V and the attention output, a sink
# logit per head in each softmax's sum, a window on even layers.
ARCHS = {
    "llama": {"qkv_bias": False, "neox": False, "qk_norm": False, "rope_freqs": True, "window": True},
    "mistral": {"qkv_bias": False, "neox": False, "qk_norm": False, "rope_freqs": True, "window": True},
    "qwen2": {"qkv_bias": True, "neox": True, "qk_norm": False, "rope_freqs": False, "window": False},
    "qwen3": {"qkv_bias": False, "neox": True, "qk_norm": True, "rope_freqs": False, "window": False},
    "gemma2": {"qkv_bias": False, "neox": True, "qk_norm": False, "rope_freqs": False, "window": False},
    "gemma3": {"qkv_bias": False, "neox": True, "qk_norm": True, "rope_freqs": False, "window": False},
    "phi3": {"qkv_bias": False, "neox": True, "qk_norm": False, "rope_freqs": False, "window": True},
    "qwen2moe": {"qkv_bias": True, "neox": True, "qk_norm": False, "rope_freqs": False, "window": False},
    "qwen3moe": {"qkv_bias": False, "neox": True, "qk_norm": True, "rope_freqs": False, "window": False},
    "gpt-oss": {"qkv_bias": True, "neox": True, "qk_norm": False, "rope_freqs": False, "window": False},
}
# Mixtures of experts (a llama file with llama.expert_count is Mixtral): a
# softmax over the router's logits, the top expert_used_count experts, their
# probabilities renormalised to sum to 1 or not, and Qwen2-MoE's shared
# expert scaled by sigmoid(x . ffn_gate_inp_shexp).
MOE_RENORMALISE = {"llama": True, "qwen2moe": False, "qwen3moe": True, "gpt-oss": False}
# gpt-oss's experts: the router adds a bias, the top k are chosen by logit
# and weighted by a softmax over those k logits alone; every expert matrix
# has a bias; the activation clamps: g = min(gate, 7), u = clip(up, -7, 7),
# act = g * sigmoid(1.702 g) * (u + 1).
GPT_OSS_ALPHA, GPT_OSS_LIMIT = 1.702, 7.0
# Gemma's hyperparameters as llama.cpp fills them in: soft-caps (gemma2's
# defaults when the file has none), the layer count of the 27B model (whose
# queries are scaled by n_embd / n_head instead of head_dim), the period of
# local / global layers and the local layers' default window and RoPE base
# (None: the global layers' base and scaling).
GEMMA = {
    "gemma2": {"attn_softcap": 50.0, "final_softcap": 30.0, "n_layer_27b": 46, "period": 2, "window": 4096,
               "local_base": None},
    "gemma3": {"attn_softcap": 0.0, "final_softcap": 0.0, "n_layer_27b": 62, "period": 6, "window": 0,
               "local_base": 10000.0},
}


class Config:
    def __init__(self, g):
        self.arch = g.get("general.architecture")
        if self.arch not in ARCHS:
            raise GGUFError(f"architecture {self.arch!r} not supported by the reference")
        a = self.arch + "."
        self.n_embd = int(g.get(a + "embedding_length"))
        self.n_layer = int(g.get(a + "block_count"))
        self.n_ff = int(g.get(a + "feed_forward_length"))
        self.n_head = int(g.get(a + "attention.head_count"))
        self.n_head_kv = int(g.get(a + "attention.head_count_kv", self.n_head))
        self.head_dim = int(g.get(a + "attention.key_length", self.n_embd // self.n_head))
        self.n_rot = int(g.get(a + "rope.dimension_count", self.head_dim))
        self.rope_base = float(g.get(a + "rope.freq_base", 10000.0))
        # As llama.cpp reads them: no type means linear, "none" never scales,
        # and the factor divides the angles for linear and YaRN alike.
        self.rope_scaling = g.get(a + "rope.scaling.type", "linear")
        if self.rope_scaling not in ("none", "linear", "yarn"):
            raise GGUFError(f"rope scaling {self.rope_scaling!r} not supported by the reference")
        factor = float(g.get(a + "rope.scaling.factor", g.get(a + "rope.scale_linear", 1.0)))
        self.rope_factor = 1.0 if self.rope_scaling == "none" or factor == 0.0 else factor
        self.orig_ctx = int(g.get(a + "rope.scaling.original_context_length", g.get(a + "context_length")))
        if self.rope_scaling == "yarn":
            self.yarn_orig_ctx = self.orig_ctx
            self.yarn_beta_fast = float(g.get(a + "rope.scaling.yarn_beta_fast", 32.0))
            self.yarn_beta_slow = float(g.get(a + "rope.scaling.yarn_beta_slow", 1.0))
        self.rope_attn_factor = float(g.get(a + "rope.scaling.attn_factor", 1.0))
        self.rms_eps = float(g.get(a + "attention.layer_norm_rms_epsilon", 1e-5))
        traits = ARCHS[self.arch]
        self.qkv_bias = traits["qkv_bias"]
        self.neox = traits["neox"]
        self.qk_norm = traits["qk_norm"]
        self.window = int(g.get(a + "attention.sliding_window", 0)) if traits["window"] else 0
        # Llama 3's per-pair divisors of the RoPE frequencies, if the file has them.
        self.rope_freqs = g.tensor("rope_freqs.weight") if traits["rope_freqs"] and "rope_freqs.weight" in g.tensors else None
        # Phi-3's LongRoPE: short factors before the original context, long ones from it.
        self.long_factors = g.tensor("rope_factors_long.weight") if "rope_factors_long.weight" in g.tensors else None
        self.short_factors = g.tensor("rope_factors_short.weight") if self.long_factors is not None else None
        self.gemma = GEMMA.get(self.arch)
        self.scale = 1.0 / np.sqrt(self.head_dim)
        self.embd_scale = 1.0
        self.attn_softcap = self.final_softcap = 0.0
        self.local = [False] * self.n_layer
        if self.gemma:
            gm = self.gemma
            self.embd_scale = np.sqrt(self.n_embd)
            if self.n_layer == gm["n_layer_27b"]:
                self.scale = 1.0 / np.sqrt(self.n_embd // self.n_head)
            # A query_pre_attn_scalar apart from the rule, as Tessera's
            # convert writes it: the scale itself.
            self.scale = float(g.get(a + "attention.scale", self.scale))
            self.attn_softcap = float(g.get(a + "attn_logit_softcapping", gm["attn_softcap"]))
            self.final_softcap = float(g.get(a + "final_logit_softcapping", gm["final_softcap"]))
            self.local_window = int(g.get(a + "attention.sliding_window", gm["window"]))
            period = int(g.get(a + "attention.sliding_window_pattern", gm["period"]))
            if self.local_window > 0:
                self.local = [il % period != period - 1 for il in range(self.n_layer)]
            self.local_base = float(g.get(a + "rope.freq_base_swa", gm["local_base"] or self.rope_base))
            self.local_factor = 1.0 if gm["local_base"] else self.rope_factor
        self.gpt_oss = self.arch == "gpt-oss"
        if self.gpt_oss:  # even layers local, with the global layers' RoPE
            self.local_window = int(g.get(a + "attention.sliding_window"))
            self.local = [il % 2 == 0 for il in range(self.n_layer)]
        self.n_expert = int(g.get(a + "expert_count", 0))
        if self.n_expert:
            self.n_expert_used = int(g.get(a + "expert_used_count"))
            self.moe_renormalise = MOE_RENORMALISE[self.arch]
            self.shared_expert = int(g.get(a + "expert_shared_feed_forward_length", 0)) > 0
        elif self.arch in ("qwen2moe", "qwen3moe"):
            raise GGUFError(f"{self.arch} without expert_count")
        assert self.n_head % self.n_head_kv == 0
        assert self.n_rot % 2 == 0 and self.n_rot <= self.head_dim


class Matrix:
    """A weight matrix as float64 [rows = out features, cols = in features]
    with the GGUF type it is stored in (which decides the engine's
    activation format, see error_model.py)."""

    def __init__(self, g, name, rows=None):
        self.w = g.tensor(name) if rows is None else g.tensor(name)[rows[0]:rows[1]]
        self.ggml_type = g.tensors[name].ggml_type


class Experts:
    """A stacked expert tensor (numpy shape [n_expert, rows, cols]) as one
    Matrix-like object per expert."""

    def __init__(self, g, name):
        w = g.tensor(name)
        self.ggml_type = g.tensors[name].ggml_type
        self.each = []
        for e in range(w.shape[0]):
            m = Matrix.__new__(Matrix)
            m.w, m.ggml_type = w[e], self.ggml_type
            self.each.append(m)


class LlamaRef:
    count_flips = True  # Perturbed passes count the expert choices their rounding would change

    def __init__(self, path):
        g = GGUFFile(path)
        self.cfg = c = Config(g)
        self.tok_embd = Matrix(g, "token_embd.weight")
        self.n_vocab = self.tok_embd.w.shape[0]
        self.output_norm = g.tensor("output_norm.weight")
        self.output = Matrix(g, "output.weight") if "output.weight" in g.tensors else self.tok_embd
        self.layers = []
        for il in range(c.n_layer):
            p = f"blk.{il}."
            L = {
                "attn_norm": g.tensor(p + "attn_norm.weight"),
                "ffn_norm": g.tensor(p + ("post_attention_norm.weight" if c.gpt_oss else "ffn_norm.weight")),
            }
            if c.gpt_oss:
                L["attn_output.bias"] = g.tensor(p + "attn_output.bias")
                L["attn_sinks"] = g.tensor(p + "attn_sinks.weight")
                L["ffn_gate_inp.bias"] = g.tensor(p + "ffn_gate_inp.bias")
                for m in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
                    L[m + ".bias"] = g.tensor(p + m + ".bias")  # [n_expert, width]
            if c.arch == "phi3":  # fused: attn_qkv = [q; k; v], ffn_up = [gate; up] (rows)
                nq, nkv = c.n_head * c.head_dim, c.n_head_kv * c.head_dim
                qkv = p + "attn_qkv.weight"
                L["attn_q"] = Matrix(g, qkv, (0, nq))
                L["attn_k"] = Matrix(g, qkv, (nq, nq + nkv))
                L["attn_v"] = Matrix(g, qkv, (nq + nkv, nq + 2 * nkv))
                L["ffn_gate"] = Matrix(g, p + "ffn_up.weight", (0, c.n_ff))
                L["ffn_up"] = Matrix(g, p + "ffn_up.weight", (c.n_ff, 2 * c.n_ff))
                names = ("attn_output", "ffn_down")
            elif c.n_expert:
                names = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate_inp")
                for m in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
                    L[m] = Experts(g, p + m + ".weight")
                if c.shared_expert:
                    names += ("ffn_gate_inp_shexp", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp")
            else:
                names = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
            for m in names:
                L[m] = Matrix(g, p + m + ".weight")
            if c.gemma:
                L["post_attention_norm"] = g.tensor(p + "post_attention_norm.weight")
                L["post_ffw_norm"] = g.tensor(p + "post_ffw_norm.weight")
            if c.qkv_bias:
                for m in ("attn_q", "attn_k", "attn_v"):
                    L[m + ".bias"] = g.tensor(p + m + ".bias")
            if c.qk_norm:
                L["attn_q_norm"] = g.tensor(p + "attn_q_norm.weight")
                L["attn_k_norm"] = g.tensor(p + "attn_k_norm.weight")
            self.layers.append(L)

    # -- building blocks ---------------------------------------------------

    def rmsnorm(self, x, w, num):
        ms = np.mean(x * x, axis=-1, keepdims=True)
        y = x / np.sqrt(ms + self.cfg.rms_eps) * w
        return num.reduction_op(y, x.shape[-1])

    def rope_frequencies(self, local=False):
        """(inverse frequency of each rotary pair [n_rot/2], magnitude factor).
        Llama 3's rope_freqs divide the frequencies; linear scaling divides
        them all by the factor; YaRN follows Hugging Face's
        _compute_yarn_parameters: pairs below the correction range keep their
        frequency, pairs above it are divided by the factor, a linear ramp
        between, and cos/sin are scaled by 0.1 ln(factor) + 1."""
        c = self.cfg
        half = c.n_rot // 2
        if local:  # Gemma's local layers
            return c.local_base ** (-2.0 * np.arange(half) / c.n_rot) / c.local_factor, c.rope_attn_factor
        inv_freq = c.rope_base ** (-2.0 * np.arange(half) / c.n_rot)
        if c.rope_freqs is not None:
            inv_freq = inv_freq / c.rope_freqs
        if c.rope_scaling != "yarn":
            return inv_freq / c.rope_factor, c.rope_attn_factor

        def correction_dim(rotations):  # the pair that turns `rotations` times over the original context
            return c.n_rot * np.log(c.yarn_orig_ctx / (rotations * 2 * np.pi)) / (2 * np.log(c.rope_base))

        low = max(np.floor(correction_dim(c.yarn_beta_fast)), 0)
        high = min(np.ceil(correction_dim(c.yarn_beta_slow)), c.n_rot - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(half) - low) / (high - low), 0, 1)
        keep = 1 - ramp  # weight of the unscaled frequency
        inv_freq = (inv_freq / c.rope_factor) * (1 - keep) + inv_freq * keep
        mscale = 0.1 * np.log(c.rope_factor) + 1.0 if c.rope_factor > 1 else 1.0
        return inv_freq, mscale * c.rope_attn_factor

    def rope(self, x, positions, num, local=False):
        """x: [T, heads, head_dim]. Pairs (2i, 2i+1) (normal) or (i, i + n_rot/2)
        (NeoX) of the first n_rot dims rotate by pos * inv_freq_i
        (rope_frequencies), times the magnitude factor."""
        c = self.cfg
        half = c.n_rot // 2
        inv_freq, mscale = self.rope_frequencies(local)
        angle = np.outer(positions, inv_freq)                       # [T, half]
        if c.long_factors is not None:  # Phi-3: the whole pass turns with the short or the long factors
            base = c.rope_base ** (-2.0 * np.arange(half) / c.n_rot) / c.rope_factor
            angle = np.outer(positions, base / (c.long_factors if self.long_pass else c.short_factors))
        rot = mscale * np.exp(1j * angle)[:, None, :]               # [T, 1, half]
        if c.neox:
            re_idx, im_idx = np.arange(half), np.arange(half) + half
        else:
            re_idx, im_idx = np.arange(0, c.n_rot, 2), np.arange(1, c.n_rot, 2)
        z = (x[..., re_idx] + 1j * x[..., im_idx]) * rot
        y = x.copy()
        y[..., re_idx] = z.real
        y[..., im_idx] = z.imag
        return num.rope_op(y, mscale * x, positions, re_idx, im_idx)

    def attention(self, q, k, v, num, window, sinks=None):
        """q: [T, H, d]; k, v: [T, H_kv, d]. Causal, materialised; with a
        sliding window W, query t also masks keys s <= t - W. Gemma 2
        soft-caps the scores: cap * tanh(score / cap). gpt-oss's sinks: one
        more logit per head in the softmax, whose weight goes nowhere."""
        c = self.cfg
        group = c.n_head // c.n_head_kv
        k = np.repeat(k, group, axis=1)  # query head h reads KV head h // group
        v = np.repeat(v, group, axis=1)
        T = q.shape[0]
        scale = c.scale
        scores = np.einsum("thd,shd->hts", q, k) * scale
        scores = num.float_dot(scores, np.einsum("thd,shd->hts", np.abs(q), np.abs(k)) * scale, c.head_dim)
        if c.attn_softcap > 0:
            scores = num.softcap_op(c.attn_softcap * np.tanh(scores / c.attn_softcap), c.attn_softcap)
        masked = np.triu(np.ones((T, T), dtype=bool), k=1)  # the future
        if window > 0:
            masked |= np.tril(np.ones((T, T), dtype=bool), k=-window)  # before the window
        scores = np.where(masked[None], -np.inf, scores)
        if sinks is not None:  # a column of the sink logit, dropped after the softmax
            scores = np.concatenate([scores, np.broadcast_to(sinks[:, None, None], (c.n_head, T, 1))], axis=-1)
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))
        p = p / p.sum(axis=-1, keepdims=True)
        if sinks is not None:
            p = p[..., :T]
        p = num.softmax_op(p, T)
        out = np.einsum("hts,shd->thd", p, v)
        return num.float_dot(out, np.einsum("hts,shd->thd", p, np.abs(v)), T)

    def swiglu(self, h, gate, up, down, num, bias=None):
        """bias: gpt-oss's (gate, up, down) biases of this expert, and its clamped activation."""
        g = num.matmul(h, gate)
        u = num.matmul(h, up)
        if bias is None:
            act = num.transcendental(g / (1.0 + np.exp(-g)) * u)
            return num.matmul(act, down)
        g = np.minimum(num.pointwise(g + bias[0]), GPT_OSS_LIMIT)
        u = np.clip(num.pointwise(u + bias[1]), -GPT_OSS_LIMIT, GPT_OSS_LIMIT)
        act = num.transcendental(g / (1.0 + np.exp(-GPT_OSS_ALPHA * g)) * (u + 1.0))
        return num.pointwise(num.matmul(act, down) + bias[2])

    def moe(self, h, L, il, num):
        """Every expert on every token, then the chosen ones mixed in with
        their weights (the engine instead groups tokens by expert). The
        experts chosen by the exact pass are kept by perturbed passes: the
        tolerance models rounding, not a different choice (compare_logits.py
        checks separately that the choice is not a near tie)."""
        c = self.cfg
        logits = num.matmul(h, L["ffn_gate_inp"])  # [T, n_expert]
        if c.gpt_oss:  # chosen by logit (p keeps their order), weighted below
            p = logits = num.pointwise(logits + L["ffn_gate_inp.bias"])
        else:
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p = num.softmax_op(p / p.sum(axis=1, keepdims=True), c.n_expert)
        if self.deciding:
            order = np.argsort(-p, axis=1, kind="stable")
            self.routes[il] = order[:, : c.n_expert_used]
            srt = np.take_along_axis(p, order, axis=1)
            k = c.n_expert_used
            gap = srt[:, k - 1] - srt[:, k] if k < c.n_expert else np.full(len(p), np.inf)
            self.route_gap = min(self.route_gap, float(gap.min()))
        elif self.count_flips:  # would this pass's rounding have chosen other experts?
            own = np.sort(np.argsort(-p, axis=1, kind="stable")[:, : c.n_expert_used], axis=1)
            self.route_flips += int(np.any(own != np.sort(self.routes[il], axis=1), axis=1).sum())
        chosen = self.routes[il]
        w = np.take_along_axis(p, chosen, axis=1)
        if c.gpt_oss:  # a softmax over the chosen logits
            w = np.exp(w - w.max(axis=1, keepdims=True))
            w = num.softmax_op(w / w.sum(axis=1, keepdims=True), c.n_expert_used)
        if c.moe_renormalise:
            w = w / w.sum(axis=1, keepdims=True)
        out = np.zeros_like(h)
        for e in range(c.n_expert):
            bias = (L["ffn_gate_exps.bias"][e], L["ffn_up_exps.bias"][e], L["ffn_down_exps.bias"][e]) if c.gpt_oss else None
            y = self.swiglu(h, L["ffn_gate_exps"].each[e], L["ffn_up_exps"].each[e], L["ffn_down_exps"].each[e], num,
                            bias)
            we = np.where(chosen == e, w, 0.0).sum(axis=1)  # [T]: expert e's weight per token (0: not chosen)
            out = num.pointwise(out + we[:, None] * y)
        if c.shared_expert:
            gate = num.matmul(h, L["ffn_gate_inp_shexp"]).reshape(-1, 1)  # a vector [n_embd]: one logit per token
            sig = num.transcendental(1.0 / (1.0 + np.exp(-gate)))
            y = self.swiglu(h, L["ffn_gate_shexp"], L["ffn_up_shexp"], L["ffn_down_shexp"], num)
            out = num.pointwise(out + sig * y)
        return out

    # -- the model ---------------------------------------------------------

    # Phi-3's LongRoPE regime (transformers' Phi3 rotary embedding): a pass
    # over a sequence longer than the original context turns every position
    # with the long factors ("sequence"). "row": each row's logits as a decode
    # reaches it, i.e. the last row of a pass over the tokens up to it (rows
    # from the original context on come from the long pass). "long" / "short":
    # forced (llama.cpp chooses by its configured context).
    rope_regime = "sequence"

    def forward(self, tokens, num=None, routes=None):
        c = self.cfg
        T = len(tokens)
        self.long_pass = False
        if c.long_factors is None or self.rope_regime == "short":
            return self._forward(tokens, num, routes)
        if self.rope_regime == "long" or (self.rope_regime == "sequence" and T > c.orig_ctx):
            self.long_pass = True
            return self._forward(tokens, num, routes)
        out = self._forward(tokens, num, routes)
        if self.rope_regime == "row" and T > c.orig_ctx:
            assert routes is None, "row regime: not for mixtures"
            self.long_pass = True
            out[c.orig_ctx:] = self._forward(tokens, num, routes)[c.orig_ctx:]
            self.long_pass = False
        return out

    def _forward(self, tokens, num=None, routes=None):
        """Logits [T, n_vocab] (float64) for every position of `tokens`.
        A mixture's experts are chosen by an Exact pass (plain or int8) unless
        `routes` ({layer: [T, k] expert ids}) are given; Perturbed passes keep
        the last choice."""
        num = num or Exact()
        c = self.cfg
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.min() < 0 or tokens.max() >= self.n_vocab:
            raise ValueError("token id out of range")
        T = len(tokens)
        self.deciding = type(num) is Exact and routes is None  # not a Perturbed pass
        if self.deciding:
            # The experts each token's layer chose, the closest call, and how
            # many choices the perturbed passes since would have made otherwise.
            self.routes, self.route_gap, self.route_flips = {}, np.inf, 0
        elif routes is not None:
            self.routes, self.route_flips = dict(routes), 0
        positions = np.arange(T, dtype=np.float64)
        x = self.tok_embd.w[tokens]  # [T, n_embd]
        if c.embd_scale != 1.0:
            x = num.pointwise(x * c.embd_scale)
        for il, L in enumerate(self.layers):
            local = c.local[il]
            h = self.rmsnorm(x, L["attn_norm"], num)
            q = num.matmul(h, L["attn_q"])
            k = num.matmul(h, L["attn_k"])
            v = num.matmul(h, L["attn_v"])
            if c.qkv_bias:
                q = num.pointwise(q + L["attn_q.bias"])
                k = num.pointwise(k + L["attn_k.bias"])
                v = num.pointwise(v + L["attn_v.bias"])
            q = q.reshape(T, c.n_head, c.head_dim)
            k = k.reshape(T, c.n_head_kv, c.head_dim)
            if c.qk_norm:  # over each head's head_dim values
                q = self.rmsnorm(q, L["attn_q_norm"], num)
                k = self.rmsnorm(k, L["attn_k_norm"], num)
            q = self.rope(q, positions, num, local and not c.gpt_oss)
            k = self.rope(k, positions, num, local and not c.gpt_oss)
            v = v.reshape(T, c.n_head_kv, c.head_dim)
            window = c.local_window if local else c.window
            att = self.attention(q, k, v, num, window, L.get("attn_sinks")).reshape(T, c.n_head * c.head_dim)
            o = num.matmul(att, L["attn_output"])
            if c.gpt_oss:
                o = num.pointwise(o + L["attn_output.bias"])
            if c.gemma:
                o = self.rmsnorm(o, L["post_attention_norm"], num)
            x = num.pointwise(x + o)
            h = self.rmsnorm(x, L["ffn_norm"], num)
            if c.n_expert:
                x = num.pointwise(x + self.moe(h, L, il, num))
                continue
            gate = num.matmul(h, L["ffn_gate"])
            up = num.matmul(h, L["ffn_up"])
            if c.gemma:  # GELU, tanh approximation
                z = np.sqrt(2.0 / np.pi) * (gate + 0.044715 * gate ** 3)
                act = num.transcendental(0.5 * gate * (1.0 + np.tanh(z)) * up)
            else:
                act = num.transcendental(gate / (1.0 + np.exp(-gate)) * up)
            o = num.matmul(act, L["ffn_down"])
            if c.gemma:
                o = self.rmsnorm(o, L["post_ffw_norm"], num)
            x = num.pointwise(x + o)
        h = self.rmsnorm(x, self.output_norm, num)
        logits = num.matmul(h, self.output)
        if c.final_softcap > 0:
            logits = num.transcendental(c.final_softcap * np.tanh(logits / c.final_softcap))
        return logits


def main():
    import argparse

    ap = argparse.ArgumentParser(description="float64 logits of a GGUF Llama/Mistral/Qwen2/Qwen3/Gemma2/Gemma3/Phi3 model")
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("-o", "--out", help="write float64 [T, n_vocab] here; else print argmax per row")
    ap.add_argument("--rope-regime", default="sequence", choices=["sequence", "row", "long", "short"],
                    help="Phi-3 LongRoPE (LlamaRef.rope_regime)")
    args = ap.parse_args()
    ref = LlamaRef(args.model)
    ref.rope_regime = args.rope_regime
    logits = ref.forward([int(t) for t in args.tokens.split(",")])
    if args.out:
        logits.astype("<f8").tofile(args.out)
    else:
        print(",".join(str(int(i)) for i in logits.argmax(axis=1)))


if __name__ == "__main__":
    main()
