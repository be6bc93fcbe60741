// Cutting images into patches (the ViT "patchify") and its inverse. An image [C, S, S] (channels,
// rows, columns, row-major) with patch size p (p divides S) becomes P = (S/p)^2 patches in raster
// order over the patch grid (patch (i, j) is row i, column j of the grid), each flattened as
// [C, p, p] into C p^2 features. The patches are then linearly embedded by the model. Pure index
// shuffles: O(C S^2), no arithmetic, so no gradient test is needed beyond the round trip.
#pragma once

#include <cstdint>

namespace moewb::engine {

struct PatchGrid {
  int64_t channels = 1;   // C
  int64_t imageSize = 0;  // S, pixels per side
  int64_t patchSize = 1;  // p, pixels per patch side; divides S
  int64_t patchesPerSide() const { return imageSize / patchSize; }
  int64_t numPatches() const { return patchesPerSide() * patchesPerSide(); }
  int64_t patchDim() const { return channels * patchSize * patchSize; }
};

// out[P, C p^2] from image[C, S, S].
void patchify(const PatchGrid& grid, const float* image, float* out);
// image[C, S, S] from patches[P, C p^2] (the exact inverse of patchify).
void unpatchify(const PatchGrid& grid, const float* patches, float* image);

}  // namespace moewb::engine
