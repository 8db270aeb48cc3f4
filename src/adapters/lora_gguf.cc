#include "adapters/lora_gguf.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "kernels/quant.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"

namespace tessera::adapters {
namespace {

// [rows, cols] of F32 out of a 2-D tensor of any type dequantize_row handles.
std::vector<float> read_matrix(const gguf::TensorInfo& t, const std::string& path) {
  TESSERA_CHECK(t.n_dims == 2, kCorruptFile, "{}: LoRA tensor '{}' has {} dimensions, not 2", path, t.name, t.n_dims);
  TESSERA_CHECK(kernels::can_dequantize(t.type), kCorruptFile, "{}: LoRA tensor '{}' has type {}, not supported",
                path, t.name, dtype_name(t.type));
  const int64_t rows = t.ne[1], cols = t.ne[0];
  TESSERA_CHECK(rows >= 1 && cols >= 1 && cols % dtype_traits(t.type).block_size == 0, kCorruptFile,
                "{}: LoRA tensor '{}' {} does not fit its type {}", path, t.name, t.shape_string(), dtype_name(t.type));
  const size_t row_bytes = tessera::row_bytes(t.type, cols);
  TESSERA_CHECK(t.n_bytes >= row_bytes * static_cast<size_t>(rows), kCorruptFile, "{}: LoRA tensor '{}' is truncated",
                path, t.name);
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) kernels::dequantize_row(t.type, t.data + r * row_bytes, m.data() + r * cols, cols);
  return m;
}

}  // namespace

std::shared_ptr<const LoraAdapter> load_lora(const std::string& path, const ModelConfig& base, float scale) {
  const gguf::File f = gguf::File::open(path);
  TESSERA_CHECK(f.get_string_or("general.type", "") == "adapter" && f.get_string_or("adapter.type", "") == "lora",
                kInvalidArgument, "{} is not a LoRA adapter (general.type '{}', adapter.type '{}')", path,
                f.get_string_or("general.type", ""), f.get_string_or("adapter.type", ""));
  const std::string arch = f.get_string_or("general.architecture", base.arch);
  TESSERA_CHECK(arch == base.arch, kInvalidArgument, "{} adapts a '{}' model, not this '{}' model", path, arch, base.arch);
  auto a = std::make_shared<LoraAdapter>();
  a->name = f.get_string_or("general.name", path);
  a->alpha = static_cast<float>(f.get_float_or("adapter.lora.alpha", 0.0));
  a->layers.resize(static_cast<size_t>(base.n_layer));
  int64_t pairs = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    const std::string& name = t.name;
    const bool is_a = name.ends_with(".weight.lora_a"), is_b = name.ends_with(".weight.lora_b");
    TESSERA_CHECK(is_a || is_b, kCorruptFile, "{}: tensor '{}' is not a LoRA half (.weight.lora_a / .lora_b)", path, name);
    if (is_b) continue;  // read with its A
    const std::string stem = name.substr(0, name.size() - std::string(".weight.lora_a").size());
    // blk.<layer>.<target>
    char* end = nullptr;
    const long layer = stem.starts_with("blk.") ? std::strtol(stem.c_str() + 4, &end, 10) : -1;
    TESSERA_CHECK(layer >= 0 && layer < base.n_layer && end != nullptr && *end == '.', kInvalidArgument,
                  "{}: tensor '{}' adapts no layer of this model ({} layers; only blk.N linears are adapted)", path,
                  name, base.n_layer);
    const std::string target = end + 1;
    const auto it = std::find(std::begin(kLoraTargetNames), std::end(kLoraTargetNames), target);
    TESSERA_CHECK(it != std::end(kLoraTargetNames), kInvalidArgument,
                  "{}: tensor '{}' adapts '{}', which has no LoRA support here (attn_q/k/v/output, ffn_gate/up/down)",
                  path, name, target);
    const auto tgt = static_cast<LoraTarget>(it - std::begin(kLoraTargetNames));
    TESSERA_CHECK(!base.moe() || tgt < LoraTarget::kGate, kInvalidArgument,
                  "{}: tensor '{}' adapts '{}', which this mixture of experts does not have (its experts take no "
                  "LoRA here; its attention linears do)", path, name, target);
    const gguf::TensorInfo* tb = f.find_tensor(stem + ".weight.lora_b");
    TESSERA_CHECK(tb != nullptr, kCorruptFile, "{}: '{}' has no matching '{}.weight.lora_b'", path, name, stem);
    const auto [in, out] = lora_target_shape(base, tgt);
    const int64_t rank = t.ne[1];
    TESSERA_CHECK(t.ne[0] == in && tb->ne[0] == rank && tb->ne[1] == out && rank >= 1, kInvalidArgument,
                  "{}: '{}' {} and its lora_b {} do not fit a [{} -> {}] linear (A must be [{}, r], B [r, {}])", path,
                  stem, t.shape_string(), tb->shape_string(), in, out, in, out);
    LoraPair& p = a->layers[static_cast<size_t>(layer)][static_cast<size_t>(tgt)];
    TESSERA_CHECK(p.rank == 0, kCorruptFile, "{}: '{}' appears twice", path, stem);
    p.rank = rank;
    p.in = in;
    p.out = out;
    p.a = read_matrix(t, path);
    // B as the kernels want it: [rank][out] (the file holds [out][rank]).
    const std::vector<float> b = read_matrix(*tb, path);
    p.b.resize(b.size());
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t k = 0; k < rank; ++k) p.b[static_cast<size_t>(k * out + o)] = b[static_cast<size_t>(o * rank + k)];
    }
    // llama.cpp: scale * alpha / rank, or the scale alone without alpha.
    const float s = a->alpha != 0.0f ? scale * a->alpha / static_cast<float>(rank) : scale;
    for (float& v : p.a) v *= s;
    p.scale = 1.0f;
    ++pairs;
  }
  // Every B has its A.
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (!t.name.ends_with(".weight.lora_b")) continue;
    const std::string a_name = t.name.substr(0, t.name.size() - 1) + "a";
    TESSERA_CHECK(f.find_tensor(a_name) != nullptr, kCorruptFile, "{}: '{}' has no matching '{}'", path, t.name, a_name);
  }
  TESSERA_CHECK(pairs > 0, kCorruptFile, "{}: the adapter has no LoRA tensors", path);
  stamp_content_hash(*a);
  return a;
}

std::shared_ptr<const LoraAdapter> sum_loras(const std::vector<std::shared_ptr<const LoraAdapter>>& adapters) {
  TESSERA_CHECK(!adapters.empty(), kInvalidArgument, "no adapters to sum");
  if (adapters.size() == 1) return adapters[0];
  auto sum = std::make_shared<LoraAdapter>();
  sum->layers.resize(adapters[0]->layers.size());
  for (const auto& ad : adapters) {
    sum->name += (sum->name.empty() ? "" : "+") + ad->name;
    TESSERA_CHECK(ad->layers.size() == sum->layers.size(), kInvalidArgument, "adapters for models of different depth");
    for (size_t l = 0; l < ad->layers.size(); ++l) {
      for (int t = 0; t < kNumLoraTargets; ++t) {
        const LoraPair& src = ad->layers[l][static_cast<size_t>(t)];
        if (src.rank == 0) continue;
        LoraPair& dst = sum->layers[l][static_cast<size_t>(t)];
        if (dst.rank == 0) {
          dst = src;
          continue;
        }
        // Ranks appended: rows of A (scales are folded in) and of B ([rank][out]).
        dst.a.insert(dst.a.end(), src.a.begin(), src.a.end());
        dst.b.insert(dst.b.end(), src.b.begin(), src.b.end());
        dst.rank += src.rank;
      }
    }
  }
  stamp_content_hash(*sum);
  return sum;
}

std::shared_ptr<const LoraAdapter> stored_as(std::shared_ptr<const LoraAdapter> a, kernels::LoraWeightType type) {
  if (type == kernels::LoraWeightType::kF32) return a;
  auto out = std::make_shared<LoraAdapter>(*a);
  out->uid = next_lora_uid();
  store_lora(*out, type);
  return out;
}

void write_lora_gguf(const LoraAdapter& a, const std::string& arch, const std::string& path) {
  gguf::Writer w;
  w.set_string("general.type", "adapter");
  w.set_string("adapter.type", "lora");
  w.set_string("general.architecture", arch);
  w.set_f32("adapter.lora.alpha", a.alpha);
  for (size_t il = 0; il < a.layers.size(); ++il) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const LoraPair& p = a.layers[il][static_cast<size_t>(t)];
      if (p.rank == 0) continue;
      TESSERA_CHECK(p.type == kernels::LoraWeightType::kF32, kInvalidArgument, "writing a LoRA adapter: F32 pairs only");
      const std::string stem = "blk." + std::to_string(il) + "." + kLoraTargetNames[t] + ".weight";
      const LoraPair* pp = &p;
      w.add_tensor(stem + ".lora_a", DType::kF32, {p.in, p.rank}, [pp](uint8_t* out, size_t n) {
        std::memcpy(out, pp->a.data(), n);
      });
      // B is kept [rank][out]; the file holds [out][rank].
      w.add_tensor(stem + ".lora_b", DType::kF32, {p.rank, p.out}, [pp](uint8_t* out, size_t) {
        float* o = reinterpret_cast<float*>(out);
        for (int64_t r = 0; r < pp->rank; ++r) {
          for (int64_t j = 0; j < pp->out; ++j) o[j * pp->rank + r] = pp->b[static_cast<size_t>(r * pp->out + j)];
        }
      });
    }
  }
  w.write(path);
}

}  // namespace tessera::adapters
