// Embedding lookup and its gradient scatter: values and a finite-difference check in double.
#include "ops/embedding/embedding.h"

#include <gtest/gtest.h>

#include "grad_check.h"

namespace moewb::engine {
namespace {

using test::expectGradientMatches;
using test::randomTensor;

TEST(Embedding, LooksUpRows) {
  ThreadPool pool(2);
  Rng rng(1);
  Tensor<float> table = randomTensor<float>({5, 3}, rng);  // [V, D]
  Tensor<int32_t> tokens({4});
  const int32_t ids[] = {4, 0, 4, 2};
  for (int i = 0; i < 4; ++i) tokens[i] = ids[i];
  Tensor<float> out = embeddingForward(pool, tokens, table);  // [N, D]
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(out.at(i, j), table.at(ids[i], j));
  }
}

TEST(Embedding, GradientMatchesFiniteDifferences) {
  ThreadPool pool(2);
  Rng rng(2);
  Tensor<double> table = randomTensor<double>({7, 5}, rng);  // [V, D]
  Tensor<int32_t> tokens({9});
  for (int i = 0; i < 9; ++i) tokens[i] = int32_t((i * 3) % 7 == 6 ? 1 : (i * 3) % 7);  // repeats
  Tensor<double> weights = randomTensor<double>({9, 5}, rng);  // [N, D] loss = sum(w * out)
  auto loss = [&] { return test::dot(embeddingForward(pool, tokens, table), weights); };
  Tensor<double> grad({7, 5});
  embeddingBackward(tokens, weights, grad);
  expectGradientMatches("dTable", table, grad, loss);
}

}  // namespace
}  // namespace moewb::engine
