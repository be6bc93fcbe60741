// MoeOptions: every switch of one MoE FFN layer (ENGINE-MATH §5.1-5.9), with defaults equal to
// the original layer (softmax top-k router, Switch aux loss, dropless, no shared experts, no
// latent projection, SwiGLU, unfused stages), plus the list of the layer's parameters for each
// setting (moeParameterSpecs) and a validity check (moeOptionsError).
//
// Parameter initialisation guidance (what moeParameterSpecs' `init` means):
//  - kNormal: N(0, init_std): router, expert gate/up, shared gate/up, latent down.
//  - kOutput: N(0, init_std / sqrt(2 L)) like the other residual-writing projections: expert
//    down (moe.down), shared down, latent up (the projection that writes the residual stream when
//    a latent projection is used).
//  - kOnes: RMSNorm gains (latent norm), no weight decay.
//  The aux-loss-free bias (ExpertBias) is not a parameter: it starts at 0 and only
//  updateExpertBias changes it. The latent norm makes the routed output's scale independent of
//  the expert weights' scale, so Wup alone sets the routed branch's size at init.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/experts/glu_activation.h"
#include "ops/capacity/capacity.h"
#include "ops/router/router.h"

namespace moewb::engine {

struct MoeOptions {
  int32_t topK = 2;           // experts per token k
  double auxLossCoef = 0.01;  // alpha of the Switch aux loss (0 disables its gradient)
  // Router (§5.1).
  RouterScore routerScore = RouterScore::kSoftmax;  // softmax top-k after, or sigmoid + normalise
  double routeScale = 1.0;  // multiplies the routing weights (DeepSeek-V3: 2.5)
  int32_t numGroups = 1;    // G expert groups for group-limited selection (1 = off)
  int32_t topKGroups = 1;   // groups kept per token when numGroups > 1
  // Balancing (§5.2, §5.3).
  double seqAuxLossCoef = 0;  // alpha of the sequence-level aux loss (0 = off)
  int64_t seqLen = 0;         // tokens per sequence for the sequence-level loss (T; 0 = all N)
  double zLossCoef = 0;       // c of the router z-loss (0 = off)
  double biasUpdateRate = 0;  // gamma of the aux-loss-free bias update (0 = no bias)
  // Capacity (§5.5).
  double capacityFactor = 0;                   // cf; <= 0 = dropless
  DropPolicy dropPolicy = DropPolicy::kProbs;  // which pairs an over-full expert keeps
  // Expert FFNs (§5.6-5.8).
  GluKind activation = GluKind::kSwiGlu;  // routed and shared experts
  double situBeta1 = 4.0;                 // SiTU gate soft clip
  double situBeta2 = 25.0;                // SiTU linear-branch soft clip
  int32_t numSharedExperts = 0;           // always-active experts on the full-width x
  int64_t sharedDFf = 0;                  // hidden width F_s of one shared expert
  int64_t latentDim = 0;                  // D_lat of the latent projection (0 = off)
  double latentNormEps = 1e-5;            // eps of the post-aggregation RMSNorm
  // Fusion of stage boundaries (§5.9); results equal the unfused stages.
  bool permuteIntoExperts = false;  // experts gather x rows by index; no xPerm
  bool combineIntoExperts = false;  // experts apply the routing weight; combine only sums

  RouterConfig routerConfig() const;
  GluParams glu() const;
  bool latent() const { return latentDim > 0; }
  bool shared() const { return numSharedExperts > 0; }
  int64_t sharedWidth() const { return int64_t(numSharedExperts) * sharedDFf; }
};

enum class MoeParamInit { kNormal, kOutput, kOnes };

struct MoeParamSpec {
  std::string name;            // relative to the layer prefix: "moe.router", "moe.latent.up", ...
  std::vector<int64_t> shape;  // row-major
  bool decay = true;           // weight decay (false for norm gains)
  MoeParamInit init = MoeParamInit::kNormal;
};

// Every parameter of one MoE layer in a fixed order: moe.router [E, D], moe.gate / moe.up
// [E, F, Dx], moe.down [E, Dx, F] (Dx = D, or latentDim with a latent projection), then when
// enabled moe.shared.gate / moe.shared.up [S Fs, D], moe.shared.down [D, S Fs], moe.latent.down
// [Dl, D], moe.latent.up [D, Dl], moe.latent.norm [Dl].
std::vector<MoeParamSpec> moeParameterSpecs(const MoeOptions& options, int64_t dModel,
                                            int64_t numExperts, int64_t dFf);

// "" when `options` is valid for `numExperts` experts, else a message naming the offending
// field by its proposed config key (moe.top_k, moe.num_groups, ...) and the accepted range.
std::string moeOptionsError(const MoeOptions& options, int64_t numExperts);

}  // namespace moewb::engine
