// patchify: raster order of patches, [C, p, p] order inside a patch, and an exact inverse.
#include "ops/patchify/patchify.h"

#include <gtest/gtest.h>

#include <vector>

namespace moewb::engine {
namespace {

TEST(Patchify, HandBuiltFourByFourImage) {
  const PatchGrid grid{1, 4, 2};
  ASSERT_EQ(grid.numPatches(), 4);
  ASSERT_EQ(grid.patchDim(), 4);
  std::vector<float> image(16);
  for (int i = 0; i < 16; ++i) image[size_t(i)] = float(i);  // pixel (y, x) = 4 y + x
  std::vector<float> patches(16);
  patchify(grid, image.data(), patches.data());
  const std::vector<float> expected = {0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15};
  EXPECT_EQ(patches, expected);
}

TEST(Patchify, UnpatchifyIsTheExactInverseWithChannels) {
  const PatchGrid grid{3, 6, 3};
  std::vector<float> image(size_t(3 * 6 * 6));
  for (size_t i = 0; i < image.size(); ++i) image[i] = float(i) * 0.5f - 7.0f;
  std::vector<float> patches(image.size()), back(image.size());
  patchify(grid, image.data(), patches.data());
  EXPECT_EQ(patches[size_t(grid.patchDim())], image[3]);  // patch (0, 1) starts at column 3
  unpatchify(grid, patches.data(), back.data());
  EXPECT_EQ(back, image);
}

}  // namespace
}  // namespace moewb::engine
