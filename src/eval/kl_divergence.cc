#include "eval/kl_divergence.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "engine/sampler.h"
#include "engine/sequence_runner.h"
#include "tokenizer/tokenizer.h"

namespace tessera::engine {
namespace {

constexpr char kMagic[8] = {'T', 'S', 'K', 'L', 'B', 'A', 'S', 'E'};
constexpr uint32_t kVersion = 1;

struct Header {
  int64_t n_ctx = 0, n_vocab = 0, n_chunks = 0, n_rows = 0;
  uint64_t token_hash = 0;
};
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 4 * 8 + 8;

size_t row_record_bytes(int64_t n_vocab) { return 12 + 2 * static_cast<size_t>(n_vocab); }

// The chunks perplexity() scores: same count, same BOS substitution, rows
// first..n_ctx-2 of each chunk predicting the token after them.
struct Chunking {
  int64_t n_ctx, n_chunks, first;
};

Chunking chunking(const Model& model, std::span<const int32_t> tokens, const PerplexityOptions& opt) {
  const int64_t n_ctx = opt.n_ctx;
  TESSERA_CHECK(n_ctx >= 8, kInvalidArgument, "context {} is too small for perplexity", n_ctx);
  TESSERA_CHECK(n_ctx <= model.config().n_ctx_train, kOutOfRange, "context {} exceeds the model's {}", n_ctx,
                model.config().n_ctx_train);
  const int64_t n = static_cast<int64_t>(tokens.size());
  TESSERA_CHECK(n >= 2 * n_ctx, kInvalidArgument,
                "the text has {} tokens; perplexity with context {} needs at least {}", n, n_ctx, 2 * n_ctx);
  int64_t n_chunks = n / n_ctx;
  if (opt.max_chunks > 0) n_chunks = std::min(n_chunks, opt.max_chunks);
  return {n_ctx, n_chunks, n_ctx / 2};
}

uint64_t token_hash(std::span<const int32_t> tokens, int64_t n) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t v = static_cast<uint32_t>(tokens[static_cast<size_t>(i)]);
    for (int b = 0; b < 4; ++b, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ull;
  }
  return h;
}

// Calls row(logits of position j, next token) for every scored position, in order.
template <class RowFn>
void run_chunks(const Model& model, const Tokenizer& tok, std::span<const int32_t> tokens,
                const PerplexityOptions& opt, const Chunking& ch, ThreadPool& pool,
                const std::function<void(int64_t, int64_t)>& progress, RowFn&& row) {
  const int64_t V = model.config().n_vocab;
  SequenceRunner runner(model,
                        {.n_ctx = ch.n_ctx, .kv_type = opt.kv_type, .kv_hadamard = opt.kv_hadamard, .max_batch_tokens = opt.n_batch, .lora = opt.lora,
                         .long_rope = opt.long_rope},
                        pool);
  std::vector<int32_t> chunk(static_cast<size_t>(ch.n_ctx));
  for (int64_t c = 0; c < ch.n_chunks; ++c) {
    std::copy(tokens.begin() + c * ch.n_ctx, tokens.begin() + (c + 1) * ch.n_ctx, chunk.begin());
    if (tok.add_bos() && tok.bos_id() >= 0) chunk[0] = tok.bos_id();
    runner.reset();
    const std::span<const float> logits = runner.append(chunk, /*all_logits=*/true);
    for (int64_t j = ch.first; j < ch.n_ctx - 1; ++j) {
      row(logits.subspan(static_cast<size_t>(j * V), static_cast<size_t>(V)),
          tokens[static_cast<size_t>(c * ch.n_ctx + j + 1)]);
    }
    if (progress) progress(c + 1, ch.n_chunks);
  }
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <class T>
T get(const uint8_t*& p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return v;
}

// Mean and standard error of the mean.
std::pair<double, double> mean_error(double sum, double sum2, double n) {
  const double mean = sum / n;
  const double var = sum2 / n - mean * mean;
  return {mean, n > 1 && var > 0 ? std::sqrt(var / (n - 1)) : 0.0};
}

}  // namespace

KlRow kl_row(std::span<const float> base, std::span<const float> logits, int32_t next) {
  TESSERA_ASSERT(base.size() == logits.size() && next >= 0 && static_cast<size_t>(next) < base.size());
  // log-sum-exp in double: the divergence of close models is small, and a
  // float rounding of it would shift every row's value by up to an ulp of it.
  float top_logit = logits[0];
  for (float v : logits) top_logit = std::max(top_logit, v);
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - top_logit);
  const double lse = top_logit + std::log(sum);
  double kld = 0.0;
  size_t top_base = 0, top = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    const double lb = base[i];
    kld += std::exp(lb) * (lb - (static_cast<double>(logits[i]) - lse));
    if (base[i] > base[top_base]) top_base = i;
    if (logits[i] > logits[top]) top = i;
  }
  KlRow r;
  r.kld = kld;
  r.same_top = top_base == top;
  r.base_logp = base[static_cast<size_t>(next)];
  r.logp = static_cast<double>(logits[static_cast<size_t>(next)]) - lse;
  return r;
}

KlResult summarize_kl(std::span<const KlRow> rows) {
  KlResult k;
  k.n_rows = static_cast<int64_t>(rows.size());
  TESSERA_CHECK(!rows.empty(), kInvalidArgument, "KL divergence of no rows");
  const double n = static_cast<double>(rows.size());
  double nll = 0, nll2 = 0, nll_base = 0, lr = 0, lr2 = 0, kl = 0, kl2 = 0, top = 0, dp2 = 0;
  std::vector<double> klds;
  klds.reserve(rows.size());
  for (const KlRow& r : rows) {
    nll -= r.logp;
    nll2 += r.logp * r.logp;
    nll_base -= r.base_logp;
    const double d = r.base_logp - r.logp;
    lr += d;
    lr2 += d * d;
    kl += r.kld;
    kl2 += r.kld * r.kld;
    top += r.same_top ? 1.0 : 0.0;
    const double dp = std::exp(r.logp) - std::exp(r.base_logp);
    dp2 += dp * dp;
    klds.push_back(r.kld);
  }
  k.ppl = std::exp(nll / n);
  k.nll_error = mean_error(nll, nll2, n).second;
  k.ppl_base = std::exp(nll_base / n);
  k.ppl_ratio = k.ppl / k.ppl_base;
  std::tie(k.mean_ln_ratio, k.ln_ratio_error) = mean_error(lr, lr2, n);
  std::tie(k.kld_mean, k.kld_error) = mean_error(kl, kl2, n);
  k.same_top = top / n;
  k.same_top_error = n > 1 ? std::sqrt(k.same_top * (1.0 - k.same_top) / (n - 1)) : 0.0;
  k.rms_dp = std::sqrt(dp2 / n);
  std::sort(klds.begin(), klds.end());
  k.kld_min = klds.front();
  k.kld_max = klds.back();
  for (double q : KlResult::kQuantiles) {
    const double pos = q * (n - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, klds.size() - 1);
    k.kld_quantiles.push_back(klds[lo] + (pos - static_cast<double>(lo)) * (klds[hi] - klds[lo]));
  }
  return k;
}

PerplexityResult save_kl_base(const Model& model, const Tokenizer& tok, std::span<const int32_t> tokens,
                              const PerplexityOptions& opt, ThreadPool& pool, const std::string& path,
                              const std::function<void(int64_t, int64_t)>& progress) {
  const Chunking ch = chunking(model, tokens, opt);
  const int64_t V = model.config().n_vocab;
  const std::string tmp = path + ".partial";
  FilePtr f(std::fopen(tmp.c_str(), "wb"));
  TESSERA_CHECK(f != nullptr, kIo, "cannot create '{}'", tmp);
  std::string head(kMagic, sizeof kMagic);
  put<uint32_t>(head, kVersion);
  put<uint32_t>(head, 0);
  put<int64_t>(head, ch.n_ctx);
  put<int64_t>(head, V);
  put<int64_t>(head, ch.n_chunks);
  put<int64_t>(head, ch.n_chunks * (ch.n_ctx - 1 - ch.first));
  put<uint64_t>(head, token_hash(tokens, ch.n_chunks * ch.n_ctx));
  TESSERA_ASSERT(head.size() == kHeaderBytes);
  bool ok = std::fwrite(head.data(), 1, head.size(), f.get()) == head.size();
  std::string rec;
  std::vector<float> lp(static_cast<size_t>(V));
  std::vector<KlRow> rows;  // the base against itself: only its log-probabilities matter
  run_chunks(model, tok, tokens, opt, ch, pool, progress, [&](std::span<const float> r, int32_t next) {
        const float lse = log_sum_exp(r);
        float lo = INFINITY, hi = -INFINITY;
        for (size_t i = 0; i < lp.size(); ++i) {
          lp[i] = r[i] - lse;
          lo = std::min(lo, lp[i]);
          hi = std::max(hi, lp[i]);
        }
        const float step = hi > lo ? (hi - lo) / 65535.0f : 1.0f;
        rec.clear();
        put<float>(rec, lo);
        put<float>(rec, step);
        put<float>(rec, lp[static_cast<size_t>(next)]);
        KlRow self;
        self.base_logp = self.logp = static_cast<double>(r[static_cast<size_t>(next)]) - log_sum_exp(r);
        rows.push_back(self);
        for (float v : lp) {
          const float u = std::nearbyint((v - lo) / step);
          put<uint16_t>(rec, static_cast<uint16_t>(std::clamp(u, 0.0f, 65535.0f)));
        }
        ok = ok && std::fwrite(rec.data(), 1, rec.size(), f.get()) == rec.size();
      });
  ok = ok && std::fflush(f.get()) == 0;
  f.reset();
  TESSERA_CHECK(ok && std::rename(tmp.c_str(), path.c_str()) == 0, kIo, "cannot write '{}'", path);
  const KlResult k = summarize_kl(rows);
  PerplexityResult res;
  res.n_tokens = static_cast<int64_t>(tokens.size());
  res.n_chunks = ch.n_chunks;
  res.n_scored = k.n_rows;
  res.nll_mean = std::log(k.ppl);
  res.nll_std_error = k.nll_error;
  res.ppl = k.ppl;
  res.ppl_error = k.ppl * k.nll_error;
  return res;
}

KlResult kl_divergence(const Model& model, const Tokenizer& tok, std::span<const int32_t> tokens,
                       const PerplexityOptions& opt, ThreadPool& pool, const std::string& base_path,
                       const std::function<void(int64_t, int64_t)>& progress) {
  const Chunking ch = chunking(model, tokens, opt);
  const int64_t V = model.config().n_vocab;
  FilePtr f(std::fopen(base_path.c_str(), "rb"));
  TESSERA_CHECK(f != nullptr, kIo, "cannot open '{}'", base_path);
  uint8_t hb[kHeaderBytes];
  TESSERA_CHECK(std::fread(hb, 1, sizeof hb, f.get()) == sizeof hb && std::memcmp(hb, kMagic, 8) == 0,
                kCorruptFile, "{}: not a Tessera KL base file (save one with --kl-base)", base_path);
  const uint8_t* p = hb + 8;
  const uint32_t version = get<uint32_t>(p);
  TESSERA_CHECK(version == kVersion, kCorruptFile, "{}: KL base version {} (this build reads {})", base_path,
                version, kVersion);
  get<uint32_t>(p);
  Header h;
  h.n_ctx = get<int64_t>(p);
  h.n_vocab = get<int64_t>(p);
  h.n_chunks = get<int64_t>(p);
  h.n_rows = get<int64_t>(p);
  h.token_hash = get<uint64_t>(p);
  TESSERA_CHECK(h.n_ctx == ch.n_ctx && h.n_chunks == ch.n_chunks, kInvalidArgument,
                "{}: base was saved with context {} and {} chunks; this run has context {} and {} chunks", base_path,
                h.n_ctx, h.n_chunks, ch.n_ctx, ch.n_chunks);
  TESSERA_CHECK(h.n_vocab == V, kInvalidArgument, "{}: base has a vocabulary of {}, this model {}", base_path,
                h.n_vocab, V);
  TESSERA_CHECK(h.n_rows == ch.n_chunks * (ch.n_ctx - 1 - ch.first), kCorruptFile, "{}: {} rows, expected {}",
                base_path, h.n_rows, ch.n_chunks * (ch.n_ctx - 1 - ch.first));
  TESSERA_CHECK(h.token_hash == token_hash(tokens, ch.n_chunks * ch.n_ctx), kInvalidArgument,
                "{}: base was saved from other tokens (another text or tokenizer)", base_path);
  std::fseek(f.get(), 0, SEEK_END);
  const long size = std::ftell(f.get());
  const size_t want = kHeaderBytes + static_cast<size_t>(h.n_rows) * row_record_bytes(V);
  TESSERA_CHECK(size >= 0 && static_cast<size_t>(size) == want, kCorruptFile, "{}: {} bytes, expected {}",
                base_path, size, want);
  std::fseek(f.get(), static_cast<long>(kHeaderBytes), SEEK_SET);

  std::vector<uint8_t> rec(row_record_bytes(V));
  std::vector<float> base(static_cast<size_t>(V));
  std::vector<KlRow> rows;
  rows.reserve(static_cast<size_t>(h.n_rows));
  run_chunks(model, tok, tokens, opt, ch, pool, progress, [&](std::span<const float> r, int32_t next) {
    TESSERA_CHECK(std::fread(rec.data(), 1, rec.size(), f.get()) == rec.size(), kCorruptFile,
                  "{}: truncated", base_path);
    const uint8_t* q = rec.data();
    const float lo = get<float>(q), step = get<float>(q), exact = get<float>(q);
    TESSERA_CHECK(std::isfinite(lo) && std::isfinite(step) && step > 0 && std::isfinite(exact), kCorruptFile,
                  "{}: a row has a non-finite scale", base_path);
    for (float& v : base) v = lo + step * static_cast<float>(get<uint16_t>(q));
    const float lse = log_sum_exp(base);
    for (float& v : base) v -= lse;
    KlRow row = kl_row(base, r, next);
    row.base_logp = exact;
    rows.push_back(row);
  });
  return summarize_kl(rows);
}

}  // namespace tessera::engine
