// HostReadback: many device tensors read back with one wait, values and shapes intact, across
// resets (staging memory reused) and with reads larger than one staging block.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "runtime/cuda/host_readback.h"

namespace moewb::engine::cuda {
namespace {

using HostReadbackTest = CudaTest;

TEST_F(HostReadbackTest, ReadsEveryTensorWithOneWaitAcrossResets) {
  HostReadback readback;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    readback.reset();
    std::vector<Tensor<float>> floats;
    std::vector<Tensor<int32_t>> ints;
    std::vector<size_t> floatReads, intReads;
    // 1, 64, 0 and 5000 elements: an empty read and one larger than a 4 KiB staging block.
    for (int64_t n : {int64_t(1), int64_t(64), int64_t(0), int64_t(5000)}) {
      floats.push_back(randomTensor({n}, uint64_t(100 * round + n)));
      Tensor<int32_t> ids({n, 1});
      for (int64_t i = 0; i < n; ++i) ids[i] = int32_t(round * 1000 + 3 * i - 7);
      ints.push_back(std::move(ids));
      MOEWB_ASSIGN_OR_FAIL(auto f, toDevice(context(), floats.back(), MemoryCategory::kWorkspace));
      MOEWB_ASSIGN_OR_FAIL(auto d, toDevice(context(), ints.back(), MemoryCategory::kWorkspace));
      MOEWB_ASSIGN_OR_FAIL(size_t fi, readback.add(context(), f));
      MOEWB_ASSIGN_OR_FAIL(size_t di, readback.add(context(), d));
      floatReads.push_back(fi);
      intReads.push_back(di);
      MOEWB_ASSERT_OK(context().synchronize());  // the device tensors die at the end of the scope
    }
    MOEWB_ASSERT_OK(readback.wait(context()));
    for (size_t k = 0; k < floats.size(); ++k) {
      const Tensor<float> f = readback.take<float>(floatReads[k]);
      const Tensor<int32_t> d = readback.take<int32_t>(intReads[k]);
      ASSERT_EQ(f.shape(), floats[k].shape());
      ASSERT_EQ(d.shape(), ints[k].shape());
      for (int64_t i = 0; i < f.numel(); ++i) ASSERT_EQ(f[i], floats[k][i]) << k << " " << i;
      for (int64_t i = 0; i < d.numel(); ++i) ASSERT_EQ(d[i], ints[k][i]) << k << " " << i;
    }
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
