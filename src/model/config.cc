#include "model/config.h"

#include "core/error.h"

namespace tessera {
namespace {

int64_t positive(const gguf::File& f, const std::string& key, int64_t limit) {
  const gguf::Value* v = f.find(key);
  if (v != nullptr && v->type == gguf::ValueType::kArray) {
    fail(ErrorCode::kCorruptFile, "{}: '{}' varies per layer, which Tessera does not support", f.path(), key);
  }
  const uint64_t x = f.get_uint(key);
  if (x == 0 || x > static_cast<uint64_t>(limit)) {
    fail(ErrorCode::kCorruptFile, "{}: '{}' = {} is out of range (1..{})", f.path(), key, x, limit);
  }
  return static_cast<int64_t>(x);
}

}  // namespace

ModelConfig read_config(const gguf::File& f) {
  ModelConfig c;
  c.arch = f.get_string("general.architecture");
  c.name = f.get_string_or("general.name", "");
  const std::string p = c.arch + ".";
  c.n_ctx_train = positive(f, p + "context_length", int64_t{1} << 24);
  c.n_embd = positive(f, p + "embedding_length", 1 << 16);
  c.n_layer = positive(f, p + "block_count", 1024);
  c.n_ff = positive(f, p + "feed_forward_length", 1 << 20);
  c.n_head = positive(f, p + "attention.head_count", 1024);
  c.n_head_kv = f.has(p + "attention.head_count_kv") ? positive(f, p + "attention.head_count_kv", 1024) : c.n_head;
  if (c.n_head % c.n_head_kv != 0) {
    fail(ErrorCode::kCorruptFile, "{}: {} query heads is not a multiple of {} kv heads", f.path(), c.n_head, c.n_head_kv);
  }
  if (f.has(p + "attention.key_length")) {
    c.head_dim = positive(f, p + "attention.key_length", 1024);
    const int64_t vlen = f.has(p + "attention.value_length") ? positive(f, p + "attention.value_length", 1024) : c.head_dim;
    if (vlen != c.head_dim) {
      fail(ErrorCode::kCorruptFile, "{}: key length {} != value length {} is not supported", f.path(), c.head_dim, vlen);
    }
  } else {
    if (c.n_embd % c.n_head != 0) {
      fail(ErrorCode::kCorruptFile, "{}: embedding length {} is not a multiple of {} heads", f.path(), c.n_embd, c.n_head);
    }
    c.head_dim = c.n_embd / c.n_head;
  }
  c.rms_eps = static_cast<float>(f.get_float_or(p + "attention.layer_norm_rms_epsilon", 1e-5));
  if (!(c.rms_eps > 0.0f && c.rms_eps < 1.0f)) {
    fail(ErrorCode::kCorruptFile, "{}: rms epsilon {} is out of range", f.path(), c.rms_eps);
  }
  c.n_rot = f.has(p + "rope.dimension_count") ? positive(f, p + "rope.dimension_count", c.head_dim) : c.head_dim;
  if (c.n_rot % 2 != 0) fail(ErrorCode::kCorruptFile, "{}: rope dimension count {} is odd", f.path(), c.n_rot);
  c.rope_freq_base = static_cast<float>(f.get_float_or(p + "rope.freq_base", 10000.0));
  if (!(c.rope_freq_base > 1.0f)) fail(ErrorCode::kCorruptFile, "{}: rope.freq_base {} is out of range", f.path(), c.rope_freq_base);
  const std::string scaling = f.get_string_or(p + "rope.scaling.type", "none");
  if (scaling == "linear") {
    const double factor = f.get_float_or(p + "rope.scaling.factor", 1.0);
    if (!(factor >= 1.0)) fail(ErrorCode::kCorruptFile, "{}: rope.scaling.factor {} is out of range", f.path(), factor);
    c.rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling != "none") {
    fail(ErrorCode::kCorruptFile, "{}: rope scaling '{}' is not supported", f.path(), scaling);
  }
  return c;
}

}  // namespace tessera
