#include "model/tensor_parallel.h"

#include <cstring>
#include <map>
#include <mutex>

#include "adapters/lora.h"
#include "core/error.h"

namespace tessera {
namespace {

enum class Kind : uint8_t { kStop = 0, kStep = 1, kAdapter = 2, kDropAdapter = 3 };

// A step's bytes: fixed-size values and length-prefixed vectors, host order
// (every rank runs this binary on the same kind of machine).
class Writer {
 public:
  template <class T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  template <class T>
  void put_vector(const std::vector<T>& v) {
    put<uint64_t>(v.size());
    if (!v.empty()) out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <class T>
  T get() {
    T v;
    TESSERA_CHECK(pos_ + sizeof v <= in_.size(), kInternal, "tensor parallelism: a step message is cut short");
    std::memcpy(&v, in_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  template <class T>
  void get_vector(std::vector<T>& v) {
    const uint64_t n = get<uint64_t>();
    TESSERA_CHECK(pos_ + n * sizeof(T) <= in_.size(), kInternal, "tensor parallelism: a step message is cut short");
    v.resize(n);
    if (n > 0) std::memcpy(v.data(), in_.data() + pos_, n * sizeof(T));  // an empty vector's data() may be null
    pos_ += n * sizeof(T);
  }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

template <class T>
bool any_set(const std::vector<T*>& v) {
  for (T* p : v) {
    if (p != nullptr) return true;
  }
  return false;
}

// What a step carries beyond numbers, which the other ranks could not follow.
void check_followable(const ForwardBatch& b) {
  const char* what = !b.key_shifts.empty()     ? "bounded KV caches (shifted keys)"
                     : any_set(b.key_depth)    ? "SpAtten's cascade"
                                               : nullptr;
  for (const kernels::AttentionSeq& q : b.seqs) {
    if (what == nullptr && (q.key_pos != nullptr || q.key_mass != nullptr)) what = "bounded KV caches (H2O, SpAtten, windows)";
  }
  TESSERA_CHECK(what == nullptr, kInvalidArgument, "tensor parallelism (--tp) does not support {} yet", what);
}

// The step's plain vectors, in message order (both directions).
template <class Batch, class F>
void batch_vectors(Batch& b, F&& f) {
  f(b.copies);
  f(b.tokens);
  f(b.positions);
  f(b.slots);
  f(b.long_rope);
  f(b.skip_layers);
  f(b.logit_rows);  // every rank computes its vocabulary slice of them
}

// An adapter's weights, whole, for the other ranks to take their parts of.
std::string encode_adapter(const LoraAdapter& a, int32_t index) {
  Writer w;
  w.put(Kind::kAdapter);
  w.put(index);
  w.put(a.alpha);
  w.put<uint64_t>(a.layers.size());
  for (const auto& layer : a.layers) {
    for (const LoraPair& p : layer) {
      w.put(p.rank);
      w.put(p.in);
      w.put(p.out);
      w.put(p.scale);
      w.put(p.type);
      w.put_vector(p.a);
      w.put_vector(p.b);
      w.put_vector(p.a_packed);
      w.put_vector(p.b_packed);
    }
  }
  return w.take();
}

LoraAdapter decode_adapter(Reader& r) {
  LoraAdapter a;
  a.alpha = r.get<float>();
  a.layers.resize(r.get<uint64_t>());
  for (auto& layer : a.layers) {
    for (LoraPair& p : layer) {
      p.rank = r.get<int64_t>();
      p.in = r.get<int64_t>();
      p.out = r.get<int64_t>();
      p.scale = r.get<float>();
      p.type = r.get<kernels::LoraWeightType>();
      r.get_vector(p.a);
      r.get_vector(p.b);
      r.get_vector(p.a_packed);
      r.get_vector(p.b_packed);
    }
  }
  return a;
}

// n_embd: the rows of soft prompts' virtual tokens travel by value (a
// prompt's few, in the steps that hold them).
std::string encode_step(const ForwardBatch& b, const KvCache& kv, const std::vector<int32_t>& adapter_of_seq,
                        int64_t n_embd) {
  check_followable(b);
  Writer w;
  w.put(Kind::kStep);
  w.put<uint64_t>(reinterpret_cast<uintptr_t>(&kv));  // which of rank 0's caches
  const KvCacheShape& shape = kv.shape();
  w.put(shape.num_blocks);
  w.put(shape.block_size);
  w.put(shape.type);
  w.put<uint8_t>(shape.hadamard ? 1 : 0);
  batch_vectors(b, [&w](const auto& v) { w.put_vector(v); });
  w.put_vector(adapter_of_seq);
  w.put<uint64_t>(b.seqs.size());
  for (const kernels::AttentionSeq& q : b.seqs) {
    w.put(q.q_begin);
    w.put(q.q_len);
    w.put(q.kv_len);
    const int64_t n_blocks = (q.kv_len + shape.block_size - 1) / shape.block_size;
    w.put_vector(std::vector<int32_t>(q.block_table, q.block_table + n_blocks));
  }
  std::vector<int32_t> rows_at;  // tokens whose input is a given row
  std::vector<float> rows;
  for (size_t i = 0; i < b.embd_rows.size(); ++i) {
    if (b.embd_rows[i] == nullptr) continue;
    rows_at.push_back(static_cast<int32_t>(i));
    rows.insert(rows.end(), b.embd_rows[i], b.embd_rows[i] + n_embd);
  }
  w.put_vector(rows_at);
  w.put_vector(rows);
  return w.take();
}

}  // namespace

struct TensorParallelModel::Adapters {
  std::mutex mu;
  std::map<uint64_t, int32_t> index_of_uid;  // rank 0's whole adapters, by uid
  std::map<int32_t, std::unique_ptr<LoraAdapter>> parts;  // rank 0's part of each, by index
  int32_t next_index = 0;
  // Whole adapters freed since (their watchers' notice): their parts go.
  std::shared_ptr<LoraRetired> retired = std::make_shared<LoraRetired>();
};

TensorParallelModel::TensorParallelModel(std::unique_ptr<Model> shard, dist::Group& group)
    : shard_(std::move(shard)), group_(group), adapters_(std::make_unique<Adapters>()) {}

TensorParallelModel::~TensorParallelModel() {
  Writer w;
  w.put(Kind::kStop);
  group_.broadcast(w.take(), 0);
}

size_t TensorParallelModel::adapter_parts() const {
  std::lock_guard<std::mutex> lock(adapters_->mu);
  return adapters_->parts.size();
}

void TensorParallelModel::drop_freed_adapters() const {
  for (const uint64_t uid : adapters_->retired->take()) {
    const auto it = adapters_->index_of_uid.find(uid);
    if (it == adapters_->index_of_uid.end()) continue;
    Writer w;
    w.put(Kind::kDropAdapter);
    w.put(it->second);
    group_.broadcast(w.take(), 0);
    adapters_->parts.erase(it->second);
    adapters_->index_of_uid.erase(it);
  }
}

void TensorParallelModel::forward(const ForwardBatch& batch, KvCache& kv, ForwardState& state) const {
  {
    std::lock_guard<std::mutex> lock(adapters_->mu);
    drop_freed_adapters();
  }
  if (!any_set(batch.seq_lora)) {
    group_.broadcast(encode_step(batch, kv, {}, shard_->config().n_embd), 0);
    shard_->forward(batch, kv, state);
    return;
  }
  // Each sequence's adapter by index, sending the ones not sent yet; this
  // rank computes with its parts.
  std::vector<int32_t> index(batch.seq_lora.size(), -1);
  ForwardBatch& mine = state.own_batch;
  mine = batch;  // into last step's capacity
  {
    std::lock_guard<std::mutex> lock(adapters_->mu);
    for (size_t i = 0; i < batch.seq_lora.size(); ++i) {
      const LoraAdapter* a = batch.seq_lora[i];
      if (a == nullptr) continue;
      auto [it, added] = adapters_->index_of_uid.emplace(a->uid, adapters_->next_index);
      if (added) {
        ++adapters_->next_index;
        group_.broadcast(encode_adapter(*a, it->second), 0);
        adapters_->parts[it->second] = std::make_unique<LoraAdapter>(lora_part(*a, 0, group_.size()));
        a->watchers.watch(a->uid, adapters_->retired);  // its parts go when it does
      }
      index[i] = it->second;
      mine.seq_lora[i] = adapters_->parts.at(it->second).get();
    }
  }
  group_.broadcast(encode_step(batch, kv, index, shard_->config().n_embd), 0);
  shard_->forward(mine, kv, state);
}

int64_t follow_steps(const Model& shard, dist::Group& group, ThreadPool& pool) {
  std::map<uint64_t, std::unique_ptr<KvCache>> caches;  // by rank 0's cache
  ForwardState state;
  state.ctx.pool = &pool;
  state.ctx.isa = active_isa();
  state.ctx.ws = &state.ws;
  ForwardBatch b;
  std::vector<std::vector<int32_t>> tables;
  std::map<int32_t, std::unique_ptr<LoraAdapter>> adapters;  // this rank's parts, by rank 0's index
  std::vector<int32_t> adapter_of_seq, rows_at;
  std::vector<float> rows;
  const int64_t E = shard.config().n_embd;
  for (int64_t steps = 0;;) {
    const std::string message = group.broadcast("", 0);
    Reader r(message);
    const Kind kind = r.get<Kind>();
    if (kind == Kind::kStop) return steps;
    if (kind == Kind::kAdapter) {
      const int32_t index = r.get<int32_t>();
      std::unique_ptr<LoraAdapter>& part = adapters[index];
      TESSERA_CHECK(part == nullptr, kInternal, "tensor parallelism: adapter {} sent twice", index);
      part = std::make_unique<LoraAdapter>(lora_part(decode_adapter(r), group.rank(), group.size()));
      continue;
    }
    if (kind == Kind::kDropAdapter) {
      TESSERA_CHECK(adapters.erase(r.get<int32_t>()) == 1, kInternal, "tensor parallelism: dropping an unknown adapter");
      continue;
    }
    ++steps;
    const uint64_t id = r.get<uint64_t>();
    KvCacheShape shape;
    shape.num_blocks = r.get<int32_t>();
    shape.block_size = r.get<int32_t>();
    shape.type = r.get<DType>();
    shape.hadamard = r.get<uint8_t>() != 0;
    shape.key_mean = shard.key_mean();
    std::unique_ptr<KvCache>& kv = caches[id];
    if (!kv || kv->shape().num_blocks != shape.num_blocks || kv->shape().block_size != shape.block_size ||
        kv->shape().type != shape.type || kv->shape().hadamard != shape.hadamard) {
      kv = std::make_unique<KvCache>(shard.config(), shape);  // a new cache at that address
    }
    b.clear();
    batch_vectors(b, [&r](auto& v) { r.get_vector(v); });
    r.get_vector(adapter_of_seq);
    tables.resize(r.get<uint64_t>());
    for (std::vector<int32_t>& t : tables) {
      kernels::AttentionSeq q;
      q.q_begin = r.get<int32_t>();
      q.q_len = r.get<int32_t>();
      q.kv_len = r.get<int32_t>();
      r.get_vector(t);
      q.block_table = t.data();
      b.seqs.push_back(q);
    }
    r.get_vector(rows_at);
    r.get_vector(rows);
    if (!rows_at.empty()) {
      b.embd_rows.assign(b.tokens.size(), nullptr);
      for (size_t k = 0; k < rows_at.size(); ++k) b.embd_rows.at(static_cast<size_t>(rows_at[k])) = rows.data() + k * E;
    }
    if (!adapter_of_seq.empty()) {
      b.seq_lora.assign(adapter_of_seq.size(), nullptr);
      for (size_t i = 0; i < adapter_of_seq.size(); ++i) {
        const int32_t a = adapter_of_seq[i];
        if (a < 0) continue;
        const auto it = adapters.find(a);
        TESSERA_CHECK(it != adapters.end(), kInternal, "tensor parallelism: unknown adapter {}", a);
        b.seq_lora[i] = it->second.get();
      }
    }
    shard.forward(b, *kv, state);
  }
}

}  // namespace tessera
