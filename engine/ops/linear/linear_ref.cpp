// Reference linear products over OpenBLAS GEMM, tiled for the thread pool (see linear.h).
#include <algorithm>

#include "ops/linear/linear.h"
#include "runtime/tensor/gemm.h"

namespace moewb::engine {

template <typename T>
void linearForwardSerial(const T* x, const T* w, T* y, int64_t rows, int64_t in, int64_t out,
                         bool accumulate) {
  gemm<T>(false, true, rows, out, in, T(1), x, in, w, in, accumulate ? T(1) : T(0), y, out);
}

template <typename T>
void linearBackwardDataSerial(const T* dy, const T* w, T* dx, int64_t rows, int64_t in, int64_t out,
                              bool accumulate) {
  gemm<T>(false, false, rows, in, out, T(1), dy, out, w, in, accumulate ? T(1) : T(0), dx, in);
}

template <typename T>
void linearBackwardWeightSerial(const T* dy, const T* x, T* dw, int64_t rows, int64_t in,
                                int64_t out, int64_t outBegin, int64_t outEnd) {
  gemm<T>(true, false, outEnd - outBegin, in, rows, T(1), dy + outBegin, out, x, in, T(1),
          dw + outBegin * in, in);
}

template <typename T>
void linearForward(ThreadPool& pool, const T* x, const T* w, T* y, int64_t rows, int64_t in,
                   int64_t out, bool accumulate) {
  pool.parallelForRange(rows, kLinearRowTile, [&](int64_t begin, int64_t end) {
    linearForwardSerial(x + begin * in, w, y + begin * out, end - begin, in, out, accumulate);
  });
}

template <typename T>
void linearBackwardData(ThreadPool& pool, const T* dy, const T* w, T* dx, int64_t rows, int64_t in,
                        int64_t out, bool accumulate) {
  pool.parallelForRange(rows, kLinearRowTile, [&](int64_t begin, int64_t end) {
    linearBackwardDataSerial(dy + begin * out, w, dx + begin * in, end - begin, in, out,
                             accumulate);
  });
}

template <typename T>
void linearBackwardWeight(ThreadPool& pool, const T* dy, const T* x, T* dw, int64_t rows,
                          int64_t in, int64_t out) {
  pool.parallelForRange(out, kLinearWeightTile, [&](int64_t begin, int64_t end) {
    linearBackwardWeightSerial(dy, x, dw, rows, in, out, begin, end);
  });
}

#define MOEWB_INSTANTIATE_LINEAR(T)                                                              \
  template void linearForwardSerial<T>(const T*, const T*, T*, int64_t, int64_t, int64_t, bool); \
  template void linearBackwardDataSerial<T>(const T*, const T*, T*, int64_t, int64_t, int64_t,   \
                                            bool);                                               \
  template void linearBackwardWeightSerial<T>(const T*, const T*, T*, int64_t, int64_t, int64_t, \
                                              int64_t, int64_t);                                 \
  template void linearForward<T>(ThreadPool&, const T*, const T*, T*, int64_t, int64_t, int64_t, \
                                 bool);                                                          \
  template void linearBackwardData<T>(ThreadPool&, const T*, const T*, T*, int64_t, int64_t,     \
                                      int64_t, bool);                                            \
  template void linearBackwardWeight<T>(ThreadPool&, const T*, const T*, T*, int64_t, int64_t,   \
                                        int64_t);
MOEWB_INSTANTIATE_LINEAR(float)
MOEWB_INSTANTIATE_LINEAR(double)

}  // namespace moewb::engine
