// QuaRot's rotations (docs/QUANTIZATION.md, "QuaRot"): an orthogonal n x n
// matrix R that spreads each vector's outlier features over all of them, so
// that its values quantize well, applied offline to weights (a reader W of a
// rotated vector becomes W R^T: each of its rows rotated by R) and online to
// activations where no weight can absorb it (the input of ffn_down).
//
//   R = (M (x) H_p / sqrt(p)) D
//
// D: pseudo-random signs from the seed; H_p: the Sylvester Hadamard matrix
// of the largest power of two p dividing n, applied by the fast
// Walsh-Hadamard transform to each run of p consecutive features; M: for n
// that is not a power of two, a pseudo-random orthogonal m x m matrix (m =
// n / p, odd) mixing feature a*p + b of every run a (QuaRot takes a known
// Hadamard matrix of order m where one exists; any orthogonal matrix keeps
// the model invariant, and a random one spreads as well). Cost per vector:
// n log2(p) adds plus n m multiply-adds.
//
// The vector kernels compute every value with the scalar reference's
// operations in its order (butterflies a + b, a - b; products summed in row
// order, no fused multiply-add): bit-identical on every ISA.
#pragma once

#include <cstdint>
#include <vector>

#include "core/cpu.h"
#include "kernels/kernel_context.h"

namespace tessera::kernels {

struct Rotation {
  int64_t n = 0;
  int64_t p = 1;               // largest power of two dividing n
  int64_t m = 1;               // n / p
  std::vector<float> signs;    // [n], +1 or -1
  std::vector<float> mix;      // [m][m] row-major, orthogonal; empty when m == 1
  std::vector<double> mix64;   // the same in double (offline transforms)
};

Rotation make_rotation(int64_t n, uint64_t seed);

// x[r] <- R x[r] for n_rows rows of r.n floats, `stride` apart.
void rotate_rows(const Rotation& r, float* x, int64_t n_rows, int64_t stride, Isa isa);
// The same, rows split over ctx's pool when there are enough of them (a
// prompt's; each row's result does not depend on the split).
void rotate_rows(const Rotation& r, float* x, int64_t n_rows, int64_t stride, const KernelContext& ctx);
// The scalar reference of rotate_rows, one row.
void rotate_ref(const Rotation& r, float* x);
// x <- R x in double precision (offline weight transforms).
void rotate_f64(const Rotation& r, double* x);
// x <- R^T x in double precision.
void rotate_transpose_f64(const Rotation& r, double* x);
// R as a dense row-major [n][n] matrix, built column by column from its
// definition (tests compare the fast transform with it).
std::vector<double> rotation_dense(const Rotation& r);

// The unnormalised Walsh-Hadamard transform of p (a power of two) values,
// in place (butterflies x_j + x_{j+h}, x_j - x_{j+h} for h = 1, 2, 4, ...).
void fwht(float* x, int64_t p);

// The per-ISA row kernel (rotation_<isa>.cc); POD arguments only.
struct RotationArgs {
  int64_t n, p, m;
  const float* signs;
  const float* mix;  // nullptr when m == 1
  float norm;        // 1 / sqrt(p) as a float
  float* scratch;    // [n]
};
using RotateRowFn = void (*)(const RotationArgs& a, float* x);
RotateRowFn rotate_row_avx2();
RotateRowFn rotate_row_avx512();

}  // namespace tessera::kernels
