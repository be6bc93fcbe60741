// Patch cutting and its inverse (see patchify.h).
#include "ops/patchify/patchify.h"

namespace moewb::engine {
namespace {

// Calls visit(imageIndex, patchIndex) for every pixel, in patch-major order.
template <typename Visit>
void forEachPixel(const PatchGrid& g, Visit visit) {
  const int64_t side = g.patchesPerSide(), p = g.patchSize, s = g.imageSize;
  int64_t out = 0;
  for (int64_t gi = 0; gi < side; ++gi) {
    for (int64_t gj = 0; gj < side; ++gj) {
      for (int64_t c = 0; c < g.channels; ++c) {
        for (int64_t y = 0; y < p; ++y) {
          for (int64_t x = 0; x < p; ++x) {
            visit((c * s + gi * p + y) * s + gj * p + x, out++);
          }
        }
      }
    }
  }
}

}  // namespace

void patchify(const PatchGrid& grid, const float* image, float* out) {
  forEachPixel(grid, [&](int64_t pixel, int64_t feature) { out[feature] = image[pixel]; });
}

void unpatchify(const PatchGrid& grid, const float* patches, float* image) {
  forEachPixel(grid, [&](int64_t pixel, int64_t feature) { image[pixel] = patches[feature]; });
}

}  // namespace moewb::engine
