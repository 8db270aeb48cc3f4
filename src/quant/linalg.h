// Dense symmetric-positive-definite linear algebra for GPTQ, blocked so
// that a 1B model's 8192-wide Hessian takes seconds, not hours: the naive
// loops stream the whole matrix from memory once per column (terabytes at
// n = 8192); these work on 64-column panels that stay in cache, and split
// rows over the pool.
//
// Matrices are n x n, row-major doubles.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"

namespace tessera::quant {

// In place: a's lower triangle becomes L with a = L L^T (right-looking,
// 64-column panels); the strict upper triangle is zeroed. Only the lower
// triangle of the input is read. False if a pivot is not positive (a not
// positive definite); a is then unspecified.
bool cholesky_lower(double* a, int64_t n, ThreadPool* pool);

// In place: the lower-triangular l becomes l^-1 (lower triangular; the
// upper triangle must be zero and stays zero). Diagonal entries must be
// nonzero.
void invert_lower(double* l, int64_t n, ThreadPool* pool);

// h's upper triangle (j >= i) += xt xt^T, with xt [n, k] row-major (row i:
// input channel i over k tokens): a batch of k calibration rows' x x^T in
// one sweep of h instead of k (h of an 8192-wide input is 268 MB).
void add_gram_upper(double* h, const double* xt, int64_t n, int64_t k);

// U, upper triangular, with h^-1 = U^T U: what GPTQ's column loop reads.
// With J the reversal permutation, J h J = L L^T gives h^-1 = J L^-T L^-1 J
// = U^T U for U = J L^-1 J, and J M J of a row-major matrix is its flat
// array reversed. So: reverse, Cholesky, invert, reverse, all in place on
// h (which holds U on return). False if h is not positive definite.
bool inverse_cholesky_upper(double* h, int64_t n, ThreadPool* pool);

}  // namespace tessera::quant
