// quant/rotate.h: QuaRot's offline rotation, tensor by tensor.
#include "quant/rotate.h"

#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "format/gguf_writer.h"
#include "kernels/rotation.h"
#include "model/weights.h"
#include "quant/calibration.h"
#include "quant/quantize_model.h"

namespace tessera::quant {
namespace {

bool name_ends(const std::string& s, std::string_view tail) { return std::string_view(s).ends_with(tail); }

// "blk.12.attn_q.weight" -> "attn_q.weight"; "" outside the blocks.
std::string block_part(const std::string& name) {
  const std::optional<int64_t> layer = layer_of_tensor(name);
  return layer && *layer >= 0 ? name.substr(fmt::format("blk.{}.", *layer).size()) : std::string();
}

struct Dims {
  int64_t n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0;
};

Dims read_dims(const gguf::File& in, const std::string& arch) {
  Dims d;
  d.n_embd = static_cast<int64_t>(in.get_uint(arch + ".embedding_length"));
  d.n_head = static_cast<int64_t>(in.get_uint(arch + ".attention.head_count"));
  d.n_head_kv = static_cast<int64_t>(in.get_uint_or(arch + ".attention.head_count_kv", static_cast<uint64_t>(d.n_head)));
  d.head_dim = static_cast<int64_t>(
      in.get_uint_or(arch + ".attention.key_length", static_cast<uint64_t>(d.n_embd / std::max<int64_t>(d.n_head, 1))));
  // A mixture may have no dense FFN width (its experts' is another key).
  d.n_ff = static_cast<int64_t>(in.get_uint_or(arch + ".feed_forward_length", 1));
  TESSERA_CHECK(d.n_embd > 0 && d.n_head > 0 && d.n_head_kv > 0 && d.head_dim > 0 && d.n_ff > 0, kCorruptFile,
                "rotate: {} has a zero dimension", in.path());
  const uint64_t value_length = in.get_uint_or(arch + ".attention.value_length", static_cast<uint64_t>(d.head_dim));
  TESSERA_CHECK(value_length == static_cast<uint64_t>(d.head_dim), kInvalidArgument,
                "rotate: value heads of {} and key heads of {} are not supported", value_length, d.head_dim);
  return d;
}

// A matrix in double, [rows][cols] (GGUF: ne[0] = cols).
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  double* row(int64_t r) { return v.data() + r * cols; }
};

Mat read_mat(const gguf::TensorInfo& t) {
  const std::vector<float> f = read_f32(t);
  Mat m;
  m.cols = t.ne[0];
  m.rows = static_cast<int64_t>(f.size()) / m.cols;
  m.v.assign(f.begin(), f.end());
  return m;
}

// Rows [r0, r1), columns [c0, c0 + r.n) of each: x <- R x (a reader's W R^T).
void rotate_row_segments(Mat& m, const kernels::Rotation& r, int64_t c0, int64_t r0 = 0, int64_t r1 = -1) {
  if (r1 < 0) r1 = m.rows;
  for (int64_t i = r0; i < r1; ++i) kernels::rotate_f64(r, m.row(i) + c0);
}

// Columns, rows [r0, r0 + r.n) of each: x <- R x (a writer's R W).
void rotate_col_segments(Mat& m, const kernels::Rotation& r, int64_t r0 = 0) {
  std::vector<double> col(static_cast<size_t>(r.n));
  for (int64_t c = 0; c < m.cols; ++c) {
    for (int64_t i = 0; i < r.n; ++i) col[static_cast<size_t>(i)] = m.v[static_cast<size_t>((r0 + i) * m.cols + c)];
    kernels::rotate_f64(r, col.data());
    for (int64_t i = 0; i < r.n; ++i) m.v[static_cast<size_t>((r0 + i) * m.cols + c)] = col[static_cast<size_t>(i)];
  }
}

void scale_cols(Mat& m, const std::vector<float>& g) {
  TESSERA_CHECK(static_cast<int64_t>(g.size()) == m.cols, kCorruptFile, "rotate: a norm of {} values before a matrix of {} inputs",
                g.size(), m.cols);
  for (int64_t i = 0; i < m.rows; ++i) {
    for (int64_t c = 0; c < m.cols; ++c) m.row(i)[c] *= g[static_cast<size_t>(c)];
  }
}

class Rotator {
 public:
  Rotator(const gguf::File& in, const RotateOptions& opt)
      : in_(in), opt_(opt), arch_(in.get_string("general.architecture")), d_(read_dims(in, arch_)),
        res_(kernels::make_rotation(d_.n_embd, opt.seed)), head_(kernels::make_rotation(d_.head_dim, opt.seed + 1)),
        ffn_(kernels::make_rotation(d_.n_ff, opt.seed + 2)) {
    static const std::set<std::string> kArchs = {"llama", "qwen2", "qwen3", "phi3", "qwen2moe", "qwen3moe", "gpt-oss",
                                                 "gemma2", "gemma3"};
    TESSERA_CHECK(kArchs.count(arch_) != 0, kInvalidArgument,
                  "rotate: architecture '{}' is not supported (llama and mixtral, qwen2, qwen3, phi3, gemma2, gemma3, "
                  "qwen2moe, qwen3moe, gpt-oss)", arch_);
    gemma_ = arch_ == "gemma2" || arch_ == "gemma3";
    TESSERA_CHECK(opt.seed <= UINT32_MAX - 2, kInvalidArgument,
                  "rotate: seed {} does not fit the file's 32-bit rotation keys (with seed + 2)", opt.seed);
    // gpt-oss's FFN norm has llama.cpp's name for a norm after attention.
    ffn_norm_ = arch_ == "gpt-oss" ? "post_attention_norm.weight" : "ffn_norm.weight";
    for (const gguf::TensorInfo& t : in.tensors()) {
      if (name_ends(t.name, "_exps.weight")) moe_ = true;
      const bool post_norm = arch_ != "gpt-oss" && (t.name.find("post_attention_norm") != std::string::npos ||
                                                    t.name.find("post_ffw_norm") != std::string::npos);
      TESSERA_CHECK(!post_norm || gemma_, kInvalidArgument,
                    "rotate: '{}' does not commute with a rotation of the residual stream", t.name);
      if (post_norm) continue;  // Gemma's: kept, its output rotated at run time
      if (name_ends(t.name, "norm.weight") && t.name.find("attn_q_norm") == std::string::npos &&
          t.name.find("attn_k_norm") == std::string::npos) {
        norms_[t.name] = read_f32(t);
      }
    }
    TESSERA_CHECK(norms_.count("output_norm.weight") != 0, kCorruptFile, "rotate: {} has no output_norm.weight", in.path());
    if (moe_ && opt_.online_ffn) {
      // No run-time rotation inside the experts (DecoderModel refuses the
      // key with a mixture): their down matrices keep their input basis.
      TESSERA_LOG_INFO("rotate: {} is a mixture of experts: no run-time rotation of ffn_down's input", in.path());
      opt_.online_ffn = false;
    }
  }

  void write(const std::string& out_path) {
    gguf::Writer w;
    for (const auto& [k, v] : in_.metadata()) {
      if (k != "general.file_type" && k != "general.quantized_by") w.set_value(k, v);
    }
    w.set_u32("general.file_type", gguf::llama_file_type(DType::kF32));
    w.set_string("general.quantized_by", fmt::format("tessera quantize --method quarot --type f32 --rotation-seed {}{}", opt_.seed,
                                                     opt_.online_ffn ? "" : " --no-online-ffn"));
    if (opt_.online_ffn) w.set_u32(kFfnRotationKey, static_cast<uint32_t>(opt_.seed + 2));
    if (gemma_) w.set_u32(kPostNormRotationKey, static_cast<uint32_t>(opt_.seed));
    const bool tied = in_.find_tensor("output.weight") == nullptr;
    for (const gguf::TensorInfo& t : in_.tensors()) {
      add(w, t.name, t);
      if (tied && t.name == "token_embd.weight") add(w, "output.weight", t);
    }
    w.write(out_path);
  }

 private:
  // The rotated tensor `name`, computed from `t` when the writer asks.
  void add(gguf::Writer& w, const std::string& name, const gguf::TensorInfo& t) {
    const bool transformed = name_ends(name, "norm.weight") ? norms_.count(name) != 0 : role(name) != Role::kCopy;
    if (!transformed) {
      w.add_tensor(name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                   [&t](uint8_t* out, size_t n) { std::memcpy(out, t.data, n); });
      return;
    }
    w.add_tensor(name, DType::kF32, std::vector<int64_t>(t.ne, t.ne + t.n_dims), [this, name, &t](uint8_t* out, size_t n) {
      const std::vector<float> v = compute(name, t);
      TESSERA_CHECK(n == v.size() * sizeof(float), kInternal, "rotate: size of '{}'", name);
      std::memcpy(out, v.data(), n);
    });
  }

  enum class Role {
    kCopy, kEmbedding, kOutput, kReaderAttn, kReaderFfn, kValue, kQkv, kValueBias, kAttnOut, kDown, kWriterBias,
    kDownExperts, kDownExpertsBias
  };

  Role role(const std::string& name) const {
    if (name == "token_embd.weight") return Role::kEmbedding;
    if (name == "output.weight") return Role::kOutput;
    const std::string s = block_part(name);
    if (s == "attn_q.weight" || s == "attn_k.weight") return Role::kReaderAttn;
    if (s == "attn_v.weight") return Role::kValue;
    if (s == "attn_qkv.weight") return Role::kQkv;
    if (s == "attn_v.bias") return opt_.heads ? Role::kValueBias : Role::kCopy;
    if (s == "attn_output.weight") return Role::kAttnOut;
    // Readers of the FFN norm: a dense FFN's gate and up, the router, the
    // experts' gate and up ([n_expert][rows][n_embd]: rows of n_embd all
    // the same), the shared expert's gate, up and gating vector.
    if (s == "ffn_gate.weight" || s == "ffn_up.weight" || s == "ffn_gate_inp.weight" || s == "ffn_gate_exps.weight" ||
        s == "ffn_up_exps.weight" || s == "ffn_gate_shexp.weight" || s == "ffn_up_shexp.weight" ||
        s == "ffn_gate_inp_shexp.weight") {
      return Role::kReaderFfn;
    }
    if (s == "ffn_down.weight" || s == "ffn_down_shexp.weight") return Role::kDown;
    if (s == "attn_output.bias" || s == "ffn_down.bias" || s == "ffn_down_shexp.bias") return Role::kWriterBias;
    if (s == "ffn_down_exps.weight") return Role::kDownExperts;
    if (s == "ffn_down_exps.bias") return Role::kDownExpertsBias;
    return Role::kCopy;
  }

  const std::vector<float>& norm_of(const std::string& name) const {
    const auto it = norms_.find(name);
    TESSERA_CHECK(it != norms_.end(), kCorruptFile, "rotate: {} has no '{}'", in_.path(), name);
    return it->second;
  }

  std::string block_norm(const std::string& name, const char* which) const {
    return fmt::format("blk.{}.{}", *layer_of_tensor(name), which);
  }

  std::vector<float> compute(const std::string& name, const gguf::TensorInfo& t) const {
    if (norms_.count(name) != 0) return std::vector<float>(norms_.at(name).size(), 1.0f);
    Mat m = read_mat(t);
    const int64_t kv_dim = d_.n_head_kv * d_.head_dim;
    switch (role(name)) {
      case Role::kEmbedding: rotate_row_segments(m, res_, 0); break;
      case Role::kOutput:
        scale_cols(m, norm_of("output_norm.weight"));
        rotate_row_segments(m, res_, 0);
        break;
      case Role::kReaderAttn:
      case Role::kValue:
      case Role::kQkv:
        scale_cols(m, norm_of(block_norm(name, "attn_norm.weight")));
        rotate_row_segments(m, res_, 0);
        if (opt_.heads && role(name) != Role::kReaderAttn) {
          const int64_t v0 = m.rows - kv_dim;  // attn_qkv: q, k, then v rows
          for (int64_t h = 0; h < d_.n_head_kv; ++h) rotate_col_segments(m, head_, v0 + h * d_.head_dim);
        }
        break;
      case Role::kValueBias:
        for (int64_t h = 0; h < d_.n_head_kv; ++h) kernels::rotate_f64(head_, m.v.data() + h * d_.head_dim);
        break;
      case Role::kAttnOut:
        if (opt_.heads) {
          for (int64_t h = 0; h < d_.n_head; ++h) rotate_row_segments(m, head_, h * d_.head_dim);
        }
        if (!gemma_) rotate_col_segments(m, res_);  // Gemma's post-norm reads it unrotated
        break;
      case Role::kReaderFfn:
        scale_cols(m, norm_of(block_norm(name, ffn_norm_.c_str())));
        rotate_row_segments(m, res_, 0);
        break;
      case Role::kDown:
        if (opt_.online_ffn && name_ends(name, "ffn_down.weight")) rotate_row_segments(m, ffn_, 0);
        if (!gemma_) rotate_col_segments(m, res_);
        break;
      case Role::kWriterBias: kernels::rotate_f64(res_, m.v.data()); break;
      case Role::kDownExperts:  // [n_expert][n_embd][n_ff_exp]: each expert's columns
        for (int64_t r0 = 0; r0 < m.rows; r0 += d_.n_embd) rotate_col_segments(m, res_, r0);
        break;
      case Role::kDownExpertsBias:  // [n_expert][n_embd]
        for (int64_t i = 0; i < static_cast<int64_t>(m.v.size()); i += d_.n_embd) kernels::rotate_f64(res_, m.v.data() + i);
        break;
      case Role::kCopy: break;
    }
    return std::vector<float>(m.v.begin(), m.v.end());
  }

  const gguf::File& in_;
  RotateOptions opt_;
  std::string arch_;
  Dims d_;
  kernels::Rotation res_, head_, ffn_;
  std::map<std::string, std::vector<float>> norms_;
  std::string ffn_norm_;  // the block norm the FFN reads
  bool moe_ = false;
  // Gemma 2/3: the post-norms stay, their outputs are rotated at run time
  // (kPostNormRotationKey), so attn_output and ffn_down keep their outputs.
  bool gemma_ = false;
};

}  // namespace

void rotate_model(const gguf::File& in, const RotateOptions& opt, const std::string& out_path) {
  Rotator(in, opt).write(out_path);
  TESSERA_LOG_INFO("rotate: wrote {}", out_path);
}

}  // namespace tessera::quant
