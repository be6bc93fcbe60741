// A tiny hybrid model shape shared by the whole-model tests (finite differences in double):
// 3 layers, D = 8, 2 heads, T = 5 (one full and one partial KDA chunk of 4), 4 experts top-2,
// sparse selection from step 0 with top-3 keys, and the indexer loss off (its target is
// detached, so with it the total loss would not be differentiable the way FD sees it).
#pragma once

#include "model/cpu/parameter.h"

namespace moewb::engine::test {

inline ModelDims tinyHybridDims(const char* mixerPattern) {
  ModelDims d;
  d.vocabSize = 11;
  d.dModel = 8;
  d.numLayers = 3;
  d.numHeads = 2;
  d.seqLen = 5;
  d.batchSize = 2;
  d.numExperts = 4;
  d.topK = 2;
  d.dFf = 6;
  d.initStd = 0.5;
  d.auxLossCoef = 0.05;
  d.mixerPattern = mixerPattern;
  d.kda.headDim = 4;
  d.kda.chunkSize = 4;
  d.sparse.kvHeads = 1;
  d.sparse.topK = 3;
  d.sparse.indexerHeads = 2;
  d.sparse.indexerDim = 4;
  d.sparse.warmupSteps = 0;
  d.sparse.indexerLossCoef = 0;
  return d;
}

}  // namespace moewb::engine::test
