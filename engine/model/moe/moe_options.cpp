// MoeOptions helpers: router / activation views, parameter specs and validation
// (see moe_options.h).
#include "model/moe/moe_options.h"

#include <cmath>
#include <sstream>

namespace moewb::engine {

RouterConfig MoeOptions::routerConfig() const {
  RouterConfig config;
  config.score = routerScore;
  config.topK = topK;
  config.routeScale = routeScale;
  config.numGroups = numGroups;
  config.topKGroups = topKGroups;
  return config;
}

GluParams MoeOptions::glu() const {
  return GluParams{activation, situBeta1, situBeta2};
}

std::vector<MoeParamSpec> moeParameterSpecs(const MoeOptions& options, int64_t dModel,
                                            int64_t numExperts, int64_t dFf) {
  const int64_t d = dModel, e = numExperts, f = dFf;
  const int64_t dx = options.latent() ? options.latentDim : d;
  std::vector<MoeParamSpec> specs = {
      {"moe.router", {e, d}, true, MoeParamInit::kNormal},
      {"moe.gate", {e, f, dx}, true, MoeParamInit::kNormal},
      {"moe.up", {e, f, dx}, true, MoeParamInit::kNormal},
      {"moe.down", {e, dx, f}, true, MoeParamInit::kOutput},
  };
  if (options.shared()) {
    const int64_t fs = options.sharedWidth();
    specs.push_back({"moe.shared.gate", {fs, d}, true, MoeParamInit::kNormal});
    specs.push_back({"moe.shared.up", {fs, d}, true, MoeParamInit::kNormal});
    specs.push_back({"moe.shared.down", {d, fs}, true, MoeParamInit::kOutput});
  }
  if (options.latent()) {
    const int64_t dl = options.latentDim;
    specs.push_back({"moe.latent.down", {dl, d}, true, MoeParamInit::kNormal});
    specs.push_back({"moe.latent.up", {d, dl}, true, MoeParamInit::kOutput});
    specs.push_back({"moe.latent.norm", {dl}, false, MoeParamInit::kOnes});
  }
  return specs;
}

std::string moeOptionsError(const MoeOptions& o, int64_t numExperts) {
  std::ostringstream out;
  const int64_t e = numExperts;
  if (o.topK < 1 || o.topK > e) {
    out << "moe.top_k = " << o.topK << ": must be in [1, num_experts = " << e << "]";
  } else if (!(o.routeScale > 0) || !std::isfinite(o.routeScale)) {
    out << "moe.route_scale = " << o.routeScale << ": must be a finite number > 0";
  } else if (o.numGroups < 1 || e % o.numGroups != 0) {
    out << "moe.num_groups = " << o.numGroups << ": must be >= 1 and divide num_experts = " << e;
  } else if (o.numGroups > 1 && (o.topKGroups < 1 || o.topKGroups > o.numGroups)) {
    out << "moe.topk_groups = " << o.topKGroups
        << ": must be in [1, moe.num_groups = " << o.numGroups << "]";
  } else if (o.numGroups > 1 && int64_t(o.topK) > int64_t(o.topKGroups) * (e / o.numGroups)) {
    out << "moe.top_k = " << o.topK << ": more than the " << o.topKGroups * (e / o.numGroups)
        << " experts of moe.topk_groups = " << o.topKGroups << " groups";
  } else if (o.auxLossCoef < 0 || o.seqAuxLossCoef < 0 || o.zLossCoef < 0 || o.biasUpdateRate < 0) {
    out << "moe.aux_loss_coef, moe.seq_aux_loss_coef, moe.z_loss_coef, moe.bias_update_rate: "
           "must be >= 0";
  } else if (o.seqLen < 0) {
    out << "sequence length " << o.seqLen << " for moe.seq_aux_loss_coef: must be >= 0";
  } else if (!std::isfinite(o.capacityFactor)) {
    out << "moe.capacity_factor = " << o.capacityFactor << ": must be finite (<= 0 = dropless)";
  } else if (o.activation == GluKind::kSitu && (!(o.situBeta1 > 0) || !(o.situBeta2 > 0))) {
    out << "moe.situ_beta1 / moe.situ_beta2 = " << o.situBeta1 << " / " << o.situBeta2
        << ": must be > 0";
  } else if (o.numSharedExperts < 0 || (o.numSharedExperts > 0 && o.sharedDFf < 1)) {
    out << "moe.num_shared_experts = " << o.numSharedExperts
        << ", moe.shared_d_ff = " << o.sharedDFf
        << ": need num_shared_experts >= 0 and shared_d_ff >= 1 when used";
  } else if (o.latentDim < 0 || !(o.latentNormEps > 0)) {
    out << "moe.latent_dim = " << o.latentDim << ": must be >= 0 (0 = off), eps > 0";
  }
  return out.str();
}

}  // namespace moewb::engine
