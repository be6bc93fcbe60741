// Linear layer y = x W^T with W[out, in] (row-vector convention, ENGINE-MATH §0) and its two
// backward products, dx = dy W and dW += dy^T x, on raw row-major buffers so that grouped
// callers (per-expert blocks of a permuted matrix) can use them on sub-ranges.
//
// The parallel versions split the work into fixed tiles that depend only on the sizes: rows of
// y / dx in tiles of kLinearRowTile, rows of dW in tiles of kLinearWeightTile with the whole
// token reduction inside one GEMM. Each output element is therefore produced by one task in one
// fixed order, and results are identical for any thread count.
// Costs: 2*rows*in*out flops per product.
#pragma once

#include <cstdint>

#include "runtime/thread_pool.h"

namespace moewb::engine {

inline constexpr int64_t kLinearRowTile = 64;     // rows of y or dx per task
inline constexpr int64_t kLinearWeightTile = 16;  // rows of dW per task

// y[rows, out] = x[rows, in] W[out, in]^T (+ y when accumulate). Single-threaded.
template <typename T>
void linearForwardSerial(const T* x, const T* w, T* y, int64_t rows, int64_t in, int64_t out,
                         bool accumulate);
// dx[rows, in] = dy[rows, out] W[out, in] (+ dx when accumulate). Single-threaded.
template <typename T>
void linearBackwardDataSerial(const T* dy, const T* w, T* dx, int64_t rows, int64_t in, int64_t out,
                              bool accumulate);
// dW[outEnd-outBegin rows starting at outBegin, in] += dy[rows, out][:, outBegin:outEnd]^T x[rows,
// in]. Single-threaded; the whole reduction over `rows` is one GEMM.
template <typename T>
void linearBackwardWeightSerial(const T* dy, const T* x, T* dw, int64_t rows, int64_t in,
                                int64_t out, int64_t outBegin, int64_t outEnd);

// Parallel versions of the three products above (tiles as in the file comment).
template <typename T>
void linearForward(ThreadPool& pool, const T* x, const T* w, T* y, int64_t rows, int64_t in,
                   int64_t out, bool accumulate = false);
template <typename T>
void linearBackwardData(ThreadPool& pool, const T* dy, const T* w, T* dx, int64_t rows, int64_t in,
                        int64_t out, bool accumulate = false);
template <typename T>
void linearBackwardWeight(ThreadPool& pool, const T* dy, const T* x, T* dw, int64_t rows,
                          int64_t in, int64_t out);

}  // namespace moewb::engine
