// Kernel micro-benchmarks. Run e.g.
//   build/bench/tessera_kernels_bench --benchmark_filter='gemv/q8_0' --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
// Names: read_bw/<threads>, gemv/<type>[_packed]/<isa>/<rows>x<cols>/t<threads> (counter GB/s = weight bytes
// per second), gemm/<type>/<isa>/<rows>x<cols>/n<tokens>/t<threads> (counter GFLOP/s), and
// op/<name>/<isa>, lora/<isa>/<type>/<in>x<out>/r<rank>/n<tokens> (a LoRA delta's shrink + expand: GFLOP/s,
// and GB/s of adapter weights), qmoe/<isa>/<rows>x<cols>/n<tokens>/t<threads> (QMoE ternary experts of
// Gaussian weights rounded to {min, 0, max}: Gweights/s, ns per codeword, GB/s of codes). GEMV cycles through enough copies of the matrix to exceed the last-level cache,
// so it measures streaming from memory as a decode step does.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstring>
#include <memory>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/cpu.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernels/lora_delta.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/qmoe.h"
#include "kernels/quant.h"
#include "kernels/sparse.h"
#include "kernels/sparse_input.h"
#include "kernels/peak.h"
#include "kernels/w8a8.h"
#include "quant/qmoe.h"

namespace tessera::kernels {
namespace {

constexpr size_t kStreamBytes = 256u << 20;  // well past any L3

ThreadPool& pool_of(int threads) {
  static ThreadPool p1(1), p2(2);
  return threads == 1 ? p1 : p2;
}

// Random weights of `type` (valid scales, random quants), `copies` matrices back to back.
AlignedBuffer<uint8_t> make_weights(DType type, int64_t rows, int64_t cols, int copies) {
  const size_t rb = row_bytes(type, cols);
  AlignedBuffer<uint8_t> buf(rb * static_cast<size_t>(rows) * copies);
  std::mt19937 rng(1);
  std::vector<float> v(static_cast<size_t>(cols));
  std::normal_distribution<float> g(0.0f, 0.02f);
  if (can_quantize(type)) {
    for (int64_t r = 0; r < rows * copies; ++r) {
      for (auto& x : v) x = g(rng);
      quantize_row(type, v.data(), buf.data() + rb * static_cast<size_t>(r), cols);
    }
    return buf;
  }
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(rng());
  const DTypeTraits tr = dtype_traits(type);
  const fp16_t d = f32_to_fp16(0.001f);
  for (size_t b = 0; b < buf.size() / tr.type_size; ++b) {
    uint8_t* blk = buf.data() + b * tr.type_size;
    if (type == DType::kQ4_K) {
      std::memcpy(blk, &d, 2);
      std::memcpy(blk + 2, &d, 2);
    } else {
      std::memcpy(blk + (type == DType::kQ3_K ? 108 : 208), &d, 2);  // Q3_K, Q6_K
    }
  }
  return buf;
}

void run_matmul(benchmark::State& st, DType type, Isa isa, int64_t rows, int64_t cols, int64_t n_tokens,
                int threads, bool packed) {
  if (!isa_supported(isa)) {
    st.SkipWithError("ISA not supported by this CPU");
    return;
  }
  const size_t mat_bytes = row_bytes(type, cols) * static_cast<size_t>(rows);
  const int copies = n_tokens == 1 ? static_cast<int>((kStreamBytes + mat_bytes - 1) / mat_bytes) : 1;
  AlignedBuffer<uint8_t> w = make_weights(type, rows, cols, copies);
  AlignedBuffer<float> x(static_cast<size_t>(n_tokens * cols)), y(static_cast<size_t>(n_tokens * rows));
  std::mt19937 rng(2);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto& v : x) v = g(rng);
  Workspace ws;
  KernelContext ctx{&pool_of(threads), isa, &ws};
  // Packed: each copy prepared once (as the model loader does), the
  // originals then left unread.
  std::vector<PreparedWeight> prepared;
  for (int i = 0; i < copies; ++i) {
    const WeightView wv{type, w.data() + mat_bytes * static_cast<size_t>(i), rows, cols, row_bytes(type, cols)};
    prepared.push_back(packed ? prepare_weight(wv) : PreparedWeight{wv, {}, {}});
  }
  int c = 0;
  for (auto _ : st) {
    matmul(prepared[static_cast<size_t>(c)], x.data(), cols, n_tokens, y.data(), rows, ctx);
    benchmark::DoNotOptimize(y.data());
    c = (c + 1) % copies;
  }
  const double iters = static_cast<double>(st.iterations());
  st.counters["GB/s"] = benchmark::Counter(iters * static_cast<double>(mat_bytes) / 1e9, benchmark::Counter::kIsRate);
  st.counters["GFLOP/s"] =
      benchmark::Counter(iters * 2.0 * rows * cols * n_tokens / 1e9, benchmark::Counter::kIsRate);
}

// Sparse matrices (kernels/sparse.h) of Gaussian weights with half of each
// row pruned at random: GB/s of sparse bytes read, and `dense_GB/s`, the
// dense Q8_0 / Q4_0 bytes the same product would read (the speedup over a
// dense kernel at equal time is their ratio). Decode streams from memory
// (copies past the LLC); `cached` keeps one copy (the kernel's own rate).
void sparse_bench(benchmark::State& st, DType type, Isa isa, int64_t rows, int64_t cols, int64_t n_tokens,
                  int threads, bool cached) {
  if (!isa_supported(isa)) {
    st.SkipWithError("ISA not supported by this CPU");
    return;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::bernoulli_distribution keep(0.5);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& v : w) v = keep(rng) ? g(rng) : 0.0f;
  const std::vector<uint8_t> one = encode_sparse(type, w.data(), rows, cols);
  const int copies = cached || n_tokens > 1 ? 1 : static_cast<int>((kStreamBytes + one.size() - 1) / one.size());
  std::vector<std::vector<uint8_t>> mats(static_cast<size_t>(copies), one);
  AlignedBuffer<float> x(static_cast<size_t>(n_tokens * cols)), y(static_cast<size_t>(n_tokens * rows));
  for (auto& v : x) v = g(rng) * 50.0f;
  Workspace ws;
  KernelContext ctx{&pool_of(threads), isa, &ws};
  int c = 0;
  for (auto _ : st) {
    const PreparedWeight pw{WeightView{type, mats[static_cast<size_t>(c)].data(), rows, cols, 0}, {}, {}};
    matmul(pw, x.data(), cols, n_tokens, y.data(), rows, ctx);
    benchmark::DoNotOptimize(y.data());
    c = (c + 1) % copies;
  }
  const double iters = static_cast<double>(st.iterations());
  const double dense = static_cast<double>(row_bytes(sparse_dense_type(type), cols) * static_cast<size_t>(rows));
  st.counters["GB/s"] = benchmark::Counter(iters * static_cast<double>(one.size()) / 1e9, benchmark::Counter::kIsRate);
  st.counters["dense_GB/s"] = benchmark::Counter(iters * dense / 1e9, benchmark::Counter::kIsRate);
}

// Contextual sparsity's products on a Q8_0 matrix (streamed copies): `down`
// multiplies the transposed [rows, cols] matrix by inputs with half of the
// columns zero (kernels/sparse_input.h); `up` gathers half of the rows
// (matmul_rows). GB/s of the bytes they need (kept rows or columns, and
// every scale of the transposed layout), and `dense_GB/s`, the whole
// matrix's Q8_0 bytes per time (the speedup over a dense product at equal
// time is dense_GB/s over the dense kernel's GB/s).
void contextual_bench(benchmark::State& st, bool down, Isa isa, int64_t rows, int64_t cols, int64_t n_tokens,
                      int threads) {
  if (!isa_supported(isa)) {
    st.SkipWithError("ISA not supported by this CPU");
    return;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& v : w) v = g(rng);
  const size_t rb = row_bytes(DType::kQ8_0, cols);
  std::vector<uint8_t> q(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) quantize_row(DType::kQ8_0, w.data() + r * cols, q.data() + r * rb, cols);
  const WeightView view{DType::kQ8_0, q.data(), rows, cols, rb};
  const size_t dense = q.size();
  const int copies = static_cast<int>((kStreamBytes + dense - 1) / dense);
  std::vector<TransposedQ8_0> ts;
  std::vector<std::vector<uint8_t>> qs;
  for (int c = 0; c < copies; ++c) {
    if (down) ts.push_back(transpose_q8_0(view)); else qs.push_back(q);
  }
  std::bernoulli_distribution keep(0.5);
  const int64_t in = down ? cols : rows;  // the kept units: input columns (down) or rows (up)
  std::vector<int32_t> kept;
  for (int64_t i = 0; i < in; ++i) if (keep(rng)) kept.push_back(static_cast<int32_t>(i));
  AlignedBuffer<float> x(static_cast<size_t>(n_tokens * cols)), y(static_cast<size_t>(n_tokens * (rows + cols)));
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < cols; ++i) x[static_cast<size_t>(t * cols + i)] = down ? 0.0f : g(rng) * 50.0f;
    for (const int32_t i : kept) if (down) x[static_cast<size_t>(t * cols + i)] = g(rng) * 50.0f;
  }
  Workspace ws;
  KernelContext ctx{&pool_of(threads), isa, &ws};
  int c = 0;
  for (auto _ : st) {
    if (down) {
      sparse_input_matmul(ts[static_cast<size_t>(c)], x.data(), cols, n_tokens, y.data(), rows, ctx);
    } else {
      const WeightView v{DType::kQ8_0, qs[static_cast<size_t>(c)].data(), rows, cols, rb};
      matmul_rows(v, kept, x.data(), cols, n_tokens, y.data(), static_cast<int64_t>(kept.size()), ctx);
    }
    benchmark::DoNotOptimize(y.data());
    c = (c + 1) % copies;
  }
  const double iters = static_cast<double>(st.iterations());
  const double frac = static_cast<double>(kept.size()) / static_cast<double>(in);
  const double read = down ? frac * static_cast<double>(rows * cols) + 2.0 * static_cast<double>(rows * cols / 32)
                           : frac * static_cast<double>(dense);
  st.counters["GB/s"] = benchmark::Counter(iters * read / 1e9, benchmark::Counter::kIsRate);
  st.counters["dense_GB/s"] = benchmark::Counter(iters * static_cast<double>(dense) / 1e9, benchmark::Counter::kIsRate);
}

// Reads kStreamBytes with 256-bit loads, split over the pool's threads:
// the roofline for GEMV.
void read_bandwidth(benchmark::State& st, int threads) {
  static AlignedBuffer<uint8_t> buf(kStreamBytes);
  std::memset(buf.data(), 1, buf.size());
  ThreadPool& pool = pool_of(threads);
  for (auto _ : st) {
    pool.run([&](int tid, int nth) {
      const size_t n = buf.size() / 32;
      const __m128i* p = reinterpret_cast<const __m128i*>(buf.data());
      __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
      // 16-byte SSE2 loads: this file is plain x86-64 (no AVX), and a
      // read loop is bound by memory, not by the load width.
      for (size_t i = 2 * (n * tid / nth); i < 2 * (n * (tid + 1) / nth); i += 8) {
        a0 = _mm_add_epi64(a0, _mm_load_si128(p + i));
        a1 = _mm_add_epi64(a1, _mm_load_si128(p + i + 2));
        a2 = _mm_add_epi64(a2, _mm_load_si128(p + i + 4));
        a3 = _mm_add_epi64(a3, _mm_load_si128(p + i + 6));
        a0 = _mm_add_epi64(a0, _mm_load_si128(p + i + 1));
        a1 = _mm_add_epi64(a1, _mm_load_si128(p + i + 3));
        a2 = _mm_add_epi64(a2, _mm_load_si128(p + i + 5));
        a3 = _mm_add_epi64(a3, _mm_load_si128(p + i + 7));
      }
      __m128i s = _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3));
      benchmark::DoNotOptimize(s);
    });
  }
  st.counters["GB/s"] = benchmark::Counter(static_cast<double>(st.iterations()) * buf.size() / 1e9,
                                           benchmark::Counter::kIsRate);
}

void ops_bench(benchmark::State& st, const std::string& op, Isa isa) {
  if (!isa_supported(isa)) {
    st.SkipWithError("ISA not supported by this CPU");
    return;
  }
  const int64_t n = 2048, tokens = 64;
  AlignedBuffer<float> a(n * tokens), b(n * tokens), c(n * tokens);
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = g(rng);
    b[i] = g(rng);
  }
  RopeParams rp;
  rp.n_rot = 64;
  for (auto _ : st) {
    for (int64_t t = 0; t < tokens; ++t) {
      float* at = a.data() + t * n;
      if (op == "rmsnorm") rmsnorm(at, b.data(), c.data() + t * n, n, 1e-5f, isa);
      if (op == "rope") rope(at, n / 64, 64, 100 + t, rp, isa);
      if (op == "silu_mul") silu_mul(at, b.data() + t * n, n, isa);
      if (op == "add") add_inplace(at, b.data() + t * n, n, isa);
    }
    benchmark::DoNotOptimize(a.data());
  }
  st.SetItemsProcessed(st.iterations() * n * tokens);
}

// A LoRA delta (kernels/lora_delta.h) of n tokens with one adapter pair:
// shrink, then expand. n = 1 cycles through enough pairs to exceed the
// last-level cache (BGMV: each decode token of a batch has its own adapter,
// whose weights come from memory); n > 1 reuses one pair (SGMV: a prefill
// segment, weights from cache).
void lora_bench(benchmark::State& st, Isa isa, int64_t in, int64_t out, int64_t rank, int64_t n,
                kernels::LoraWeightType type) {
  if (!isa_supported(isa)) {
    st.SkipWithError("ISA not supported by this CPU");
    return;
  }
  const int64_t a_bytes = rank * kernels::lora_row_bytes(type, in), b_bytes = rank * kernels::lora_row_bytes(type, out);
  const size_t pair_bytes = static_cast<size_t>(a_bytes + b_bytes);
  const size_t copies = n == 1 ? (kStreamBytes + pair_bytes - 1) / pair_bytes : 1;
  AlignedBuffer<uint8_t> w(pair_bytes * copies);
  AlignedBuffer<float> x(static_cast<size_t>(n * in)), y(static_cast<size_t>(n * out));
  AlignedBuffer<float> ax(static_cast<size_t>(n * rank));
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  std::vector<float> row(static_cast<size_t>(std::max(in, out)));
  for (size_t c = 0; c < copies; ++c) {  // [rank][in], then B [rank][out], rows in `type`
    uint8_t* p = w.data() + c * pair_bytes;
    for (int64_t k = 0; k < 2 * rank; ++k) {
      const int64_t len = k < rank ? in : out;
      for (int64_t j = 0; j < len; ++j) row[static_cast<size_t>(j)] = u(rng);
      kernels::lora_pack_row(type, row.data(), len, p);
      p += kernels::lora_row_bytes(type, len);
    }
  }
  for (size_t i = 0; i < x.size(); ++i) x[i] = u(rng);
  size_t c = 0;
  for (auto _ : st) {
    const uint8_t* a = w.data() + c * pair_bytes;
    lora_shrink(a, rank, in, 1.0f, x.data(), in, nullptr, n, ax.data(), isa, type);
    lora_expand(a + a_bytes, rank, out, ax.data(), y.data(), out, nullptr, n, isa, type);
    benchmark::DoNotOptimize(y.data());
    c = (c + 1) % copies;
  }
  const double iters = static_cast<double>(st.iterations());
  st.counters["GB/s"] = benchmark::Counter(iters * static_cast<double>(pair_bytes) / 1e9, benchmark::Counter::kIsRate);
  st.counters["GFLOP/s"] = benchmark::Counter(iters * 2.0 * static_cast<double>(rank * (in + out) * n) / 1e9,
                                              benchmark::Counter::kIsRate);
}

struct Shape {
  int64_t rows, cols;
};

// QMoE: 16 experts of Gaussian weights, rounded (~89% zeros at 2048
// columns), each call one expert in turn, as a decode step reads them.
void qmoe_bench(benchmark::State& st, Isa isa, int64_t rows, int64_t cols, int64_t n, int threads) {
  if (!isa_supported(isa)) {
    st.SkipWithError("ISA not supported");
    return;
  }
  constexpr int64_t kExperts = 16;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  std::vector<quant::TernaryMatrix> mats;
  for (int64_t e = 0; e < kExperts; ++e) {
    for (float& f : w) f = nd(rng);
    mats.push_back(quant::ternary_rtn(w.data(), rows, cols));
  }
  const std::vector<uint8_t> bytes = quant::encode_qmoe(mats);
  const QmoeView v = parse_qmoe(bytes.data(), bytes.size(), cols, rows, kExperts, "bench");
  std::vector<float> x(static_cast<size_t>(n * cols)), y(static_cast<size_t>(n * rows));
  for (float& f : x) f = nd(rng);
  Workspace ws;
  const KernelContext ctx{&pool_of(threads), isa, &ws};
  int64_t e = 0;
  for (auto _ : st) {
    qmoe_matmul(v, e, x.data(), cols, n, y.data(), rows, ctx);
    e = (e + 1) % kExperts;
    benchmark::DoNotOptimize(y.data());
  }
  const double iters = static_cast<double>(st.iterations());
  st.counters["Gweights/s"] = benchmark::Counter(iters * static_cast<double>(rows * cols) / 1e9, benchmark::Counter::kIsRate);
  st.counters["GB/s"] = benchmark::Counter(iters * static_cast<double>(v.n_codes) / kExperts / 1e9, benchmark::Counter::kIsRate);
  st.counters["ns/codeword"] = benchmark::Counter(iters * static_cast<double>(v.n_codes) / kExperts,
                                                  benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// W8A8 products (kernels/w8a8.h) of a rows x cols matrix by n tokens:
// multiply-adds per second (GMAC/s; its activations' quantization
// included) and, for n > 1, `peak_frac`: that rate over the ISA's widest
// int8 multiply-add alone on the same threads (kernels/peak.h).
void w8a8_bench(benchmark::State& st, Isa isa, bool amx, int64_t rows, int64_t cols, int64_t n_tokens, int threads,
                int bits) {
  if (!isa_supported(isa) || (amx && !amx_usable())) {
    st.SkipWithError("ISA not supported by this CPU");
    return;
  }
  std::mt19937 rng(4);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(rows * cols)), sw(static_cast<size_t>(rows));
  for (float& v : w) v = g(rng) * 0.02f;
  std::vector<int8_t> q(w.size());
  if (bits == 4) {
    quantize_rows_w4(w.data(), rows, cols, q.data(), sw.data());
  } else {
    quantize_rows_w8(w.data(), rows, cols, q.data(), sw.data());
  }
  const W8Matrix m = bits == 4 ? pack_w4(q.data(), sw.data(), rows, cols) : pack_w8(q.data(), sw.data(), rows, cols);
  AlignedBuffer<float> x(static_cast<size_t>(n_tokens * cols)), y(static_cast<size_t>(n_tokens * rows));
  for (auto& v : x) v = g(rng);
  Workspace ws;
  KernelContext ctx{&pool_of(threads), isa, &ws};
  for (auto _ : st) {
    const W8A8Kernels& k = amx ? w8a8_kernels_amx()
                           : isa == Isa::kAvx512 ? w8a8_kernels_avx512()
                           : isa == Isa::kAvx2 ? w8a8_kernels_avx2() : w8a8_kernels_ref();
    matmul_w8a8_with(k, m, x.data(), cols, n_tokens, y.data(), rows, ctx);
    benchmark::DoNotOptimize(y.data());
  }
  const double macs = static_cast<double>(rows) * cols * n_tokens;
  st.counters["GMAC/s"] = benchmark::Counter(static_cast<double>(st.iterations()) * macs / 1e9, benchmark::Counter::kIsRate);
  if (n_tokens > 1 && isa != Isa::kScalar) {
    static std::map<std::pair<Isa, int>, double> peaks;  // measured once per ISA and thread count
    double& peak = peaks[{isa, threads}];
    if (peak == 0.0) peak = measure_compute_peak(pool_of(threads), isa, 0.2, 3).int8_hw_macs_per_s;
    st.counters["peak_frac"] =
        benchmark::Counter(static_cast<double>(st.iterations()) * macs / peak, benchmark::Counter::kIsRate);
  }
}

void register_all() {
  for (int threads : {1, 2}) {
    benchmark::RegisterBenchmark(("read_bw/t" + std::to_string(threads)).c_str(), read_bandwidth, threads)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  const DType types[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                         DType::kQ4_0, DType::kQ3_K, DType::kQ4_K, DType::kQ6_K};
  const Isa isas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};
  // 110m-like and 1b-like projections; 32000 x 768 is the 110m output matrix.
  const Shape gemv_shapes[] = {{768, 768},   {2048, 768},  {768, 2048}, {32000, 768},
                               {2048, 2048}, {8192, 2048}, {2048, 8192}};
  const Shape gemm_shapes[] = {{768, 768}, {2048, 768}, {768, 2048}, {2048, 2048}, {8192, 2048}, {2048, 8192}};
  for (bool down : {true, false}) {
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      for (int threads : {1, 2}) {
        for (int64_t n : {int64_t{1}, int64_t{4}}) {
          const Shape s = down ? Shape{2048, 5632} : Shape{5632, 2048};
          const std::string name = std::string(down ? "contextual/down/" : "contextual/up/") + std::string(isa_name(isa)) + "/" +
                                   std::to_string(s.rows) + "x" + std::to_string(s.cols) + "/n" + std::to_string(n) +
                                   "/t" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), contextual_bench, down, isa, s.rows, s.cols, n, threads)
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
  for (DType type : {DType::kSpQ8_0, DType::kSpQ4_0}) {
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      for (int threads : {1, 2}) {
        for (const Shape& s : {Shape{2048, 2048}, Shape{5632, 2048}, Shape{2048, 5632}}) {
          for (int64_t n : {int64_t{1}, int64_t{4}, int64_t{8}, int64_t{128}}) {
            for (bool cached : {false, true}) {
              if (cached && n > 1) continue;
              const std::string name = "sparse/" + std::string(dtype_name(type)) + "/" + std::string(isa_name(isa)) + "/" +
                                       std::to_string(s.rows) + "x" + std::to_string(s.cols) + "/n" + std::to_string(n) +
                                       "/t" + std::to_string(threads) + (cached ? "/cached" : "");
              benchmark::RegisterBenchmark(name.c_str(), sparse_bench, type, isa, s.rows, s.cols, n, threads, cached)
                  ->UseRealTime()
                  ->Unit(benchmark::kMicrosecond);
            }
          }
        }
      }
    }
  }
  for (DType type : types) {
    const std::string tn = std::string(dtype_name(type));
    for (Isa isa : isas) {
      const std::string in = std::string(isa_name(isa));
      const bool can_pack = type == DType::kQ8_0 || type == DType::kQ4_0 || type == DType::kQ3_K || type == DType::kQ4_K ||
                            type == DType::kQ6_K;
      for (bool packed : {false, true}) {
        if (packed && !can_pack) continue;
        const std::string tp = tn + (packed ? "_packed" : "");
        for (int threads : {1, 2}) {
          for (const Shape& s : gemv_shapes) {
            const std::string name = "gemv/" + tp + "/" + in + "/" + std::to_string(s.rows) + "x" +
                                     std::to_string(s.cols) + "/t" + std::to_string(threads);
            benchmark::RegisterBenchmark(name.c_str(), run_matmul, type, isa, s.rows, s.cols, int64_t{1}, threads,
                                         packed)
                ->UseRealTime()
                ->Unit(benchmark::kMicrosecond);
          }
          for (int64_t n : {int64_t{4}, int64_t{16}, int64_t{128}}) {
            for (const Shape& s : gemm_shapes) {
              const std::string name = "gemm/" + tp + "/" + in + "/" + std::to_string(s.rows) + "x" +
                                       std::to_string(s.cols) + "/n" + std::to_string(n) + "/t" +
                                       std::to_string(threads);
              benchmark::RegisterBenchmark(name.c_str(), run_matmul, type, isa, s.rows, s.cols, n, threads, packed)
                  ->UseRealTime()
                  ->Unit(benchmark::kMillisecond);
            }
          }
        }
      }
    }
  }
  for (int bits : {8, 4}) {  // W8A8, W4A8 (decode reads the nibbles in place)
    for (int table = 0; table < 4; ++table) {  // scalar, avx2, avx512 (VNNI), amx
      const Isa isa = table == 3 ? Isa::kAvx512 : isas[table];
      for (int threads : {1, 2}) {
        for (int64_t n : {int64_t{1}, int64_t{128}, int64_t{512}}) {
          const std::string name = std::string(bits == 4 ? "w4a8/" : "w8a8/") + std::string(table == 3 ? "amx" : isa_name(isa)) +
                                   "/2048x2048/n" + std::to_string(n) + "/t" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), w8a8_bench, isa, table == 3, int64_t{2048}, int64_t{2048}, n, threads,
                                       bits)
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
  // 110m-like linears (768 -> 768, 768 -> 2048) with a rank-16 adapter,
  // kept in each --lora-type.
  for (Isa isa : isas) {
    for (auto type : {kernels::LoraWeightType::kF32, kernels::LoraWeightType::kF16, kernels::LoraWeightType::kQ8_0}) {
      for (int64_t out : {int64_t{768}, int64_t{2048}}) {
        for (int64_t n : {int64_t{1}, int64_t{64}}) {
          const std::string name = "lora/" + std::string(isa_name(isa)) + "/" + kernels::lora_weight_type_name(type) +
                                   "/768x" + std::to_string(out) + "/r16/n" + std::to_string(n);
          benchmark::RegisterBenchmark(name.c_str(), lora_bench, isa, int64_t{768}, out, int64_t{16}, n, type)
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
  for (Isa isa : isas) {
    for (int64_t n : {int64_t{1}, int64_t{4}}) {
      for (int threads : {1, 2}) {
        const std::string name = "qmoe/" + std::string(isa_name(isa)) + "/1024x2048/n" + std::to_string(n) + "/t" +
                                 std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), qmoe_bench, isa, int64_t{1024}, int64_t{2048}, n, threads)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  for (const char* op : {"rmsnorm", "rope", "silu_mul", "add"}) {
    for (Isa isa : isas) {
      benchmark::RegisterBenchmark(("op/" + std::string(op) + "/" + std::string(isa_name(isa))).c_str(), ops_bench,
                                   std::string(op), isa);
    }
  }
}

}  // namespace
}  // namespace tessera::kernels

int main(int argc, char** argv) {
  tessera::kernels::register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
