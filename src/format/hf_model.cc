#include "format/hf_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "kernels/quant.h"
#include "format/model_config.h"
#include "format/hf_internal.h"
#include "format/json_file.h"
#include "format/safetensors.h"

namespace tessera::hf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  TESSERA_CHECK(out.good(), kIo, "cannot write {}", path);
}

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// llama.cpp's `permute` of q_proj / k_proj: within each head, HF's row
// (half, i) (rotate-half: first halves of the rotary pairs, then second
// halves) becomes GGUF's row 2 i + half (interleaved pairs). `to_gguf`
// false is the inverse.
std::vector<uint8_t> permute_rows(const uint8_t* src, int64_t rows, size_t row_bytes, int64_t n_head, bool to_gguf) {
  std::vector<uint8_t> out(static_cast<size_t>(rows) * row_bytes);
  const int64_t hd = rows / n_head, half = hd / 2;
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t r = 0; r < hd; ++r) {
      const int64_t hf_row = h * hd + r;
      const int64_t gguf_row = h * hd + (r % half) * 2 + r / half;
      const int64_t from = to_gguf ? hf_row : gguf_row, to = to_gguf ? gguf_row : hf_row;
      std::memcpy(out.data() + static_cast<size_t>(to) * row_bytes, src + static_cast<size_t>(from) * row_bytes,
                  row_bytes);
    }
  }
  return out;
}

// Gemma's norm weights: GGUF holds 1 + w, HF w. In F32 whatever they were stored as.
std::vector<uint8_t> shift_norm(DType type, const uint8_t* src, int64_t n, float delta) {
  std::vector<uint8_t> out(static_cast<size_t>(n) * sizeof(float));
  float* v = reinterpret_cast<float*>(out.data());
  kernels::dequantize_row(type, src, v, n);
  for (int64_t i = 0; i < n; ++i) v[i] += delta;
  return out;
}

// The safetensors files of a folder: one model.safetensors, or the shards
// its index names (each opened once, every indexed tensor found in its shard).
std::vector<std::shared_ptr<safetensors::File>> open_weights(const std::string& dir) {
  std::vector<std::shared_ptr<safetensors::File>> files;
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (!fs::exists(index_path)) {
    const std::string single = dir + "/model.safetensors";
    TESSERA_CHECK(fs::exists(single), kIo, "{}: no model.safetensors or model.safetensors.index.json", dir);
    files.push_back(std::make_shared<safetensors::File>(safetensors::File::open(single)));
    return files;
  }
  const json index = read_json_file(index_path);
  const auto map = index.is_object() ? index.find("weight_map") : index.end();
  TESSERA_CHECK(map != index.end() && map->is_object(), kCorruptFile, "{}: no \"weight_map\" object", index_path);
  std::map<std::string, size_t> by_name;  // shard file -> index in files
  size_t n_indexed = 0;
  for (const auto& [tensor, shard] : map->items()) {
    TESSERA_CHECK(shard.is_string(), kCorruptFile, "{}: weight_map['{}'] is not a file name", index_path, tensor);
    const std::string name = shard.get<std::string>();
    TESSERA_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..", kCorruptFile,
                  "{}: weight_map['{}'] = '{}' is not a file in the folder", index_path, tensor, name);
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      files.push_back(std::make_shared<safetensors::File>(safetensors::File::open(dir + "/" + name)));
      it = by_name.emplace(name, files.size() - 1).first;
    }
    TESSERA_CHECK(files[it->second]->find(tensor) != nullptr, kCorruptFile, "{}: tensor '{}' is not in {} (as {} says)",
                  dir, tensor, name, index_path);
    ++n_indexed;
  }
  size_t n_held = 0;
  for (const auto& f : files) n_held += f->tensors().size();
  TESSERA_CHECK(n_held == n_indexed, kCorruptFile, "{}: the shards hold {} tensors, the index names {}", index_path,
                n_held, n_indexed);
  return files;
}

std::shared_ptr<const void> own(std::vector<uint8_t> bytes, gguf::TensorInfo& t) {
  auto p = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  t.data = p->data();
  t.n_bytes = p->size();
  return p;
}

// One expert's matrix of a stack, as found in the folder.
struct ExpertPart {
  gguf::TensorInfo t;
  std::string where;
};

// The per-expert matrices of each stack ("blk.N.ffn_up_exps.weight") copied
// into one 3-D tensor, [cols, rows, n_expert] as llama.cpp's converter
// stacks them: every expert 0..n-1 present once, all of one shape and type.
void stack_experts(const std::string& dir, std::map<std::string, std::map<int64_t, ExpertPart>>& stacks,
                   std::vector<gguf::TensorInfo>& tensors, std::vector<std::shared_ptr<const void>>& owners) {
  for (auto& [name, parts] : stacks) {
    const int64_t n = static_cast<int64_t>(parts.size());
    TESSERA_CHECK(parts.begin()->first == 0 && parts.rbegin()->first == n - 1, kCorruptFile,
                  "{}: the experts of '{}' are not numbered 0..{} (found {} to {})", dir, name, n - 1,
                  parts.begin()->first, parts.rbegin()->first);
    const gguf::TensorInfo& first = parts.begin()->second.t;
    std::vector<uint8_t> bytes(first.n_bytes * static_cast<size_t>(n));
    for (const auto& [e, part] : parts) {
      TESSERA_CHECK(part.t.n_dims == 2 && first.n_dims == 2 && part.t.ne[0] == first.ne[0] &&
                        part.t.ne[1] == first.ne[1] && part.t.type == first.type,
                    kCorruptFile, "{} is {} {}, but expert 0 of its stack is {} {}", part.where,
                    dtype_name(part.t.type), part.t.shape_string(), dtype_name(first.type), first.shape_string());
      std::memcpy(bytes.data() + static_cast<size_t>(e) * first.n_bytes, part.t.data, first.n_bytes);
    }
    gguf::TensorInfo t;
    t.name = name;
    t.type = first.type;
    t.n_dims = 3;
    t.ne[0] = first.ne[0];
    t.ne[1] = first.ne[1];
    t.ne[2] = n;
    owners.push_back(own(std::move(bytes), t));
    tensors.push_back(std::move(t));
  }
}

}  // namespace

bool is_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

std::string tokenizer_json_path(const std::string& dir) { return dir + "/tokenizer.json"; }

gguf::File open_folder(const std::string& dir) {
  const std::string config_path = dir + "/config.json";
  TESSERA_CHECK(fs::exists(config_path), kIo,
                "{}: a directory without config.json: neither a GGUF file nor a Hugging Face model folder", dir);
  const json config = read_json_file(config_path);
  TESSERA_CHECK(config.is_object() && config.contains("model_type") && config["model_type"].is_string(), kCorruptFile,
                "{}: no \"model_type\" string", config_path);
  const Family& fam = family_by_model_type(config["model_type"].get<std::string>(), config_path);
  TranslatedConfig tc = translate_config(config, fam, config_path);
  tc.metadata.emplace_back("general.name", string_value(fs::path(dir).lexically_normal().filename().string()));
  const std::string tok_config = dir + "/tokenizer_config.json";
  if (fs::exists(tok_config)) {
    const json tc_json = read_json_file(tok_config);
    const auto it = tc_json.is_object() ? tc_json.find("chat_template") : tc_json.end();
    if (it != tc_json.end() && it->is_string()) {
      tc.metadata.emplace_back("tokenizer.chat_template",
                               string_value(it->get<std::string>()));
    }
  }

  std::vector<std::shared_ptr<const void>> owners;
  std::vector<gguf::TensorInfo> tensors;
  std::map<std::string, std::map<int64_t, ExpertPart>> stacks;  // a mixture's experts, by GGUF stack
  for (const auto& file : open_weights(dir)) {
    owners.push_back(file->mapping());
    for (const safetensors::Tensor& st : file->tensors()) {
      const std::string where = fmt::format("{}: tensor '{}'", file->path(), st.name);
      if (st.name == "lm_head.weight" && tc.tied) continue;  // some checkpoints store the tied copy too
      if (ends_with(st.name, ".self_attn.rotary_emb.inv_freq")) continue;  // recomputed from rope_theta
      gguf::TensorInfo t;
      t.name = to_gguf_name(fam, st.name);
      const ExpertName expert = to_gguf_expert_name(fam, st.name);
      if (expert.expert >= 0) t.name = expert.gguf;
      if (t.name.empty()) {
        fail(ErrorCode::kCorruptFile, "{} is not used by Tessera's '{}' model (it may change what the model computes)",
             where, fam.model_type);
      }
      t.type = safetensors::to_dtype(st.dtype, where);
      if (st.shape.empty() || st.shape.size() > 4) {
        fail(ErrorCode::kCorruptFile, "{} has {} dimensions (1 to 4 supported)", where, st.shape.size());
      }
      t.n_dims = static_cast<int>(st.shape.size());
      for (int d = 0; d < t.n_dims; ++d) t.ne[d] = st.shape[st.shape.size() - 1 - static_cast<size_t>(d)];
      TESSERA_CHECK(t.n_elements() > 0, kCorruptFile, "{} is empty", where);
      t.data = st.data;
      t.n_bytes = st.n_bytes;
      if (expert.expert >= 0) {
        const bool fresh = stacks[t.name].emplace(expert.expert, ExpertPart{t, where}).second;
        TESSERA_CHECK(fresh, kCorruptFile, "{}: expert {} of '{}' appears twice", where, expert.expert, t.name);
        continue;
      }
      if (fam.permute_qk && (ends_with(t.name, ".attn_q.weight") || ends_with(t.name, ".attn_k.weight"))) {
        const int64_t heads = ends_with(t.name, ".attn_q.weight") ? tc.n_head : tc.n_head_kv;
        TESSERA_CHECK(t.n_dims == 2 && t.ne[1] % (2 * heads) == 0, kCorruptFile, "{}: {} rows do not split into {} "
                      "heads of rotary pairs", where, t.ne[1], heads);
        owners.push_back(own(permute_rows(st.data, t.ne[1], row_bytes(t.type, t.ne[0]), heads, true), t));
      } else if (fam.norm_plus_one && ends_with(t.name, "norm.weight") && t.n_dims == 1) {
        owners.push_back(own(shift_norm(t.type, st.data, t.ne[0], 1.0f), t));
        t.type = DType::kF32;
      }
      tensors.push_back(std::move(t));
    }
  }
  stack_experts(dir, stacks, tensors, owners);
  for (auto& [name, values] : tc.vectors) {
    gguf::TensorInfo t;
    t.name = name;
    t.n_dims = 1;
    t.ne[0] = static_cast<int64_t>(values.size());
    std::vector<uint8_t> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    owners.push_back(own(std::move(bytes), t));
    tensors.push_back(std::move(t));
  }
  const auto has = [&](std::string_view name) {
    return std::any_of(tensors.begin(), tensors.end(), [&](const gguf::TensorInfo& t) { return t.name == name; });
  };
  TESSERA_CHECK(tc.tied || has("output.weight"), kCorruptFile, "{}: missing tensor 'lm_head.weight' "
                "(tie_word_embeddings is false)", dir);
  for (const gguf::TensorInfo& t : tensors) {
    if (t.name == "token_embd.weight" && tc.n_vocab > 0 && t.ne[1] != tc.n_vocab) {
      fail(ErrorCode::kCorruptFile, "{}: vocab_size {} but model.embed_tokens.weight has {} rows", config_path,
           tc.n_vocab, t.ne[1]);
    }
  }
  return gguf::File::assemble(dir, std::move(tc.metadata), std::move(tensors), std::move(owners));
}

std::string hf_tensor_name(const gguf::File& view, const std::string& gguf_name) {
  return to_hf_name(family_for_export(view), gguf_name);
}

void export_folder(const gguf::File& f, const std::string& dir, const ExportOptions& options) {
  const Family& fam = family_for_export(f);
  std::error_code ec;
  fs::create_directories(dir, ec);
  TESSERA_CHECK(!ec, kIo, "cannot create {}: {}", dir, ec.message());
  const ModelConfig m = read_config(f);
  write_text(dir + "/config.json", export_config(f, fam).dump(2) + "\n");

  std::vector<std::vector<uint8_t>> owned;
  owned.reserve(f.tensors().size());
  std::vector<safetensors::TensorToWrite> out;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (t.name == "rope_freqs.weight" || t.name.rfind("rope_factors_", 0) == 0) continue;  // in config.json
    if (!to_hf_expert_name(fam, t.name, 0).empty()) {  // a stack of experts: one HF tensor each
      TESSERA_CHECK(t.n_dims == 3, kInvalidArgument, "{}: '{}' is not a 3-D stack of experts", f.path(), t.name);
      const size_t per_expert = t.n_bytes / static_cast<size_t>(t.ne[2]);
      for (int64_t e = 0; e < t.ne[2]; ++e) {
        safetensors::TensorToWrite w;
        w.name = to_hf_expert_name(fam, t.name, e);
        w.type = t.type;
        w.shape = {t.ne[1], t.ne[0]};
        w.data = t.data + static_cast<size_t>(e) * per_expert;
        out.push_back(std::move(w));
      }
      continue;
    }
    safetensors::TensorToWrite w;
    w.name = to_hf_name(fam, t.name);
    TESSERA_CHECK(!w.name.empty(), kInvalidArgument, "{}: tensor '{}' has no name in HF's '{}'", f.path(), t.name,
                  fam.model_type);
    w.type = t.type;
    safetensors::dtype_string(t.type);
    for (int d = t.n_dims - 1; d >= 0; --d) w.shape.push_back(t.ne[d]);
    w.data = t.data;
    if (fam.permute_qk && (ends_with(t.name, ".attn_q.weight") || ends_with(t.name, ".attn_k.weight"))) {
      const int64_t heads = ends_with(t.name, ".attn_q.weight") ? m.n_head : m.n_head_kv;
      owned.push_back(permute_rows(t.data, t.ne[1], row_bytes(t.type, t.ne[0]), heads, false));
      w.data = owned.back().data();
    } else if (fam.norm_plus_one && ends_with(t.name, "norm.weight") && t.n_dims == 1) {
      owned.push_back(shift_norm(t.type, t.data, t.ne[0], -1.0f));
      w.data = owned.back().data();
      w.type = DType::kF32;
    }
    out.push_back(std::move(w));
  }

  auto bytes_of = [](const safetensors::TensorToWrite& w) {
    int64_t n = 1;
    for (int64_t d : w.shape) n *= d;
    return static_cast<int64_t>(row_bytes(w.type, n));
  };
  std::vector<std::vector<safetensors::TensorToWrite>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (safetensors::TensorToWrite& w : out) {
    const int64_t b = bytes_of(w);
    if (options.max_shard_bytes > 0 && in_shard > 0 && in_shard + b > options.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    in_shard += b;
    total += b;
    shards.back().push_back(std::move(w));
  }
  if (options.max_shard_bytes <= 0) {
    safetensors::write(dir + "/model.safetensors", shards[0]);
    return;
  }
  json map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = fmt::format("model-{:05}-of-{:05}.safetensors", i + 1, shards.size());
    safetensors::write(dir + "/" + name, shards[i]);
    for (const auto& w : shards[i]) map[w.name] = name;
  }
  write_text(dir + "/model.safetensors.index.json",
             json{{"metadata", {{"total_size", total}}}, {"weight_map", map}}.dump(2) + "\n");
}

}  // namespace tessera::hf
