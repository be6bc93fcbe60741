// Helpers for the MoE variant tests: a bundle of every MoE parameter for a MoeOptions, random
// init, the MoeWeights / MoeGrads views, a finite-difference check of all of them, and an
// independent per-expert-loop oracle in double (written from ENGINE-MATH §5, sharing no code
// with the engine) that takes the routing decision and the capacity mask as fixed inputs.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "grad_check.h"
#include "model/cpu/moe_ffn.h"

namespace moewb::engine::test {

template <typename T>
struct MoeParams {
  int64_t d = 0, e = 0, f = 0;
  MoeOptions options;
  Tensor<T> router, gate, up, down;            // [E, D], [E, F, Dx] x2, [E, Dx, F]
  Tensor<T> sharedGate, sharedUp, sharedDown;  // [S Fs, D] x2, [D, S Fs]
  Tensor<T> latentDown, latentUp, latentNorm;  // [Dl, D], [D, Dl], [Dl]

  MoeParams(const MoeOptions& o, int64_t dModel, int64_t experts, int64_t dFf)
      : d(dModel), e(experts), f(dFf), options(o) {
    const int64_t dx = o.latent() ? o.latentDim : d;
    router = Tensor<T>({e, d});
    gate = Tensor<T>({e, f, dx});
    up = Tensor<T>({e, f, dx});
    down = Tensor<T>({e, dx, f});
    if (o.shared()) {
      sharedGate = Tensor<T>({o.sharedWidth(), d});
      sharedUp = Tensor<T>({o.sharedWidth(), d});
      sharedDown = Tensor<T>({d, o.sharedWidth()});
    }
    if (o.latent()) {
      latentDown = Tensor<T>({o.latentDim, d});
      latentUp = Tensor<T>({d, o.latentDim});
      latentNorm = Tensor<T>({o.latentDim});
    }
  }

  std::vector<std::pair<std::string, Tensor<T>*>> all() {
    std::vector<std::pair<std::string, Tensor<T>*>> out = {
        {"router", &router}, {"gate", &gate}, {"up", &up}, {"down", &down}};
    if (options.shared()) {
      out.push_back({"sharedGate", &sharedGate});
      out.push_back({"sharedUp", &sharedUp});
      out.push_back({"sharedDown", &sharedDown});
    }
    if (options.latent()) {
      out.push_back({"latentDown", &latentDown});
      out.push_back({"latentUp", &latentUp});
      out.push_back({"latentNorm", &latentNorm});
    }
    return out;
  }

  // N(0, scale^2) weights (router: routerScale), latent gain 1 + N(0, 0.1^2).
  void randomize(Rng& rng, double scale, double routerScale) {
    for (auto& [name, t] : all()) fillNormal(*t, rng, name == "router" ? routerScale : scale);
    if (options.latent()) {
      for (int64_t i = 0; i < latentNorm.numel(); ++i) latentNorm[i] = T(1 + 0.1 * rng.normal());
    }
  }

  MoeWeights<T> weights(const ExpertBias* bias = nullptr) const {
    MoeWeights<T> w{router, gate, up, down};
    if (options.shared()) {
      w.sharedGate = &sharedGate;
      w.sharedUp = &sharedUp;
      w.sharedDown = &sharedDown;
    }
    if (options.latent()) {
      w.latentDown = &latentDown;
      w.latentUp = &latentUp;
      w.latentNorm = &latentNorm;
    }
    w.bias = bias;
    return w;
  }

  MoeGrads<T> grads() {
    MoeGrads<T> g{router, gate, up, down};
    if (options.shared()) {
      g.sharedGate = &sharedGate;
      g.sharedUp = &sharedUp;
      g.sharedDown = &sharedDown;
    }
    if (options.latent()) {
      g.latentDown = &latentDown;
      g.latentUp = &latentUp;
      g.latentNorm = &latentNorm;
    }
    return g;
  }
};

// Up to `count` element indices of a tensor of `numel` elements, spread evenly (all if fewer).
inline std::vector<int64_t> sampleIndices(int64_t numel, int64_t count = 40) {
  std::vector<int64_t> out;
  if (numel <= count) {
    for (int64_t i = 0; i < numel; ++i) out.push_back(i);
    return out;
  }
  for (int64_t i = 0; i < count; ++i) out.push_back(i * numel / count + (i * 7) % 3);
  return out;
}

// Forward + backward of the MoE FFN in double, then central differences of
// dot(y, dy) + router losses for x and every parameter (sampled).
inline void expectMoeGradientsMatch(const std::string& label, ThreadPool& pool, Tensor<double>& x,
                                    MoeParams<double>& params, const Tensor<double>& dy,
                                    const ExpertBias* bias = nullptr, double tol = 1e-6) {
  const MoeOptions& options = params.options;
  auto loss = [&] {
    MoeSaved<double> saved;
    const double value = dot(moeFfnForward(pool, x, params.weights(bias), options, saved), dy);
    return value + saved.aux.loss;
  };
  MoeSaved<double> saved;
  moeFfnForward(pool, x, params.weights(bias), options, saved);
  MoeParams<double> grads(options, params.d, params.e, params.f);
  Tensor<double> dx =
      moeFfnBackward(pool, dy, x, params.weights(bias), options, saved, grads.grads());
  expectGradientMatches(label + " dx", x, dx, loss, sampleIndices(x.numel()), 1e-5, tol);
  auto gradList = grads.all();
  auto paramList = params.all();
  for (size_t i = 0; i < paramList.size(); ++i) {
    expectGradientMatches(label + " d" + paramList[i].first, *paramList[i].second,
                          *gradList[i].second, loss, sampleIndices(paramList[i].second->numel()),
                          1e-5, tol);
  }
}

// ---- The oracle: scalar loops in double, straight from ENGINE-MATH §5 ----

inline double oracleSigmoid(double v) {
  return 1 / (1 + std::exp(-v));
}

// h = a(g) c(u) for the options' activation.
inline double oracleGlu(const MoeOptions& o, double g, double u) {
  if (o.activation == GluKind::kSwiGlu) return g * oracleSigmoid(g) * u;
  return o.situBeta1 * std::tanh(g / o.situBeta1) * oracleSigmoid(g) * o.situBeta2 *
         std::tanh(u / o.situBeta2);
}

// out[0..dOut) += FFN(in) with gate/up [F, Din] and down [Dout, F] (row-major pointers).
inline void oracleFfn(const MoeOptions& o, const double* in, int64_t din, const double* gate,
                      const double* up, const double* down, int64_t f, int64_t dout, double scale,
                      double* out) {
  std::vector<double> h(static_cast<size_t>(f));
  for (int64_t i = 0; i < f; ++i) {
    double g = 0, u = 0;
    for (int64_t c = 0; c < din; ++c) {
      g += in[c] * gate[i * din + c];
      u += in[c] * up[i * din + c];
    }
    h[size_t(i)] = oracleGlu(o, g, u);
  }
  for (int64_t c = 0; c < dout; ++c) {
    double sum = 0;
    for (int64_t i = 0; i < f; ++i) sum += h[size_t(i)] * down[c * f + i];
    out[c] += scale * sum;
  }
}

struct OracleResult {
  std::vector<double> y;  // [N, D]
  double auxLoss = 0;     // switch + seq + z
};

struct OracleRouting {
  std::vector<double> z;     // [N, E] logits
  std::vector<double> prob;  // [N, E] p: softmax, or s / sum s
  std::vector<double> w;     // [N, k] routing weights of the fixed selection
};

inline OracleRouting oracleRouting(const MoeOptions& o, const Tensor<double>& x,
                                   const MoeParams<double>& p, const Tensor<int32_t>& topExpert) {
  const int64_t n = x.dim(0), d = p.d, e = p.e, k = o.topK;
  OracleRouting r;
  r.z.assign(size_t(n * e), 0.0);
  r.prob.assign(size_t(n * e), 0.0);
  r.w.assign(size_t(n * k), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    double* zt = r.z.data() + t * e;
    double* pt = r.prob.data() + t * e;
    for (int64_t j = 0; j < e; ++j) {
      for (int64_t c = 0; c < d; ++c) zt[j] += x.at(t, c) * p.router.at(j, c);
    }
    double sumAll = 0, sumSel = 0, maxZ = zt[0];
    for (int64_t j = 0; j < e; ++j) maxZ = std::max(maxZ, zt[j]);
    for (int64_t j = 0; j < e; ++j) {
      pt[j] =
          o.routerScore == RouterScore::kSoftmax ? std::exp(zt[j] - maxZ) : oracleSigmoid(zt[j]);
      sumAll += pt[j];
    }
    for (int64_t j = 0; j < e; ++j) pt[j] /= sumAll;
    for (int64_t i = 0; i < k; ++i) sumSel += pt[topExpert.at(t, i)];
    for (int64_t i = 0; i < k; ++i) {
      r.w[size_t(t * k + i)] = o.routeScale * pt[topExpert.at(t, i)] / sumSel;
    }
  }
  return r;
}

// Switch + sequence-level aux losses and the z-loss, with the counts of the fixed selection.
inline double oracleRouterLosses(const MoeOptions& o, const OracleRouting& r,
                                 const Tensor<int32_t>& topExpert, int64_t e) {
  const int64_t n = topExpert.dim(0), k = o.topK;
  auto balance = [&](int64_t t0, int64_t t1) {
    double sum = 0;
    for (int64_t j = 0; j < e; ++j) {
      double count = 0, meanP = 0;
      for (int64_t t = t0; t < t1; ++t) {
        for (int64_t i = 0; i < k; ++i) count += topExpert.at(t, i) == j ? 1 : 0;
        meanP += r.prob[size_t(t * e + j)] / double(t1 - t0);
      }
      sum += count / double(k * (t1 - t0)) * meanP;
    }
    return double(e) * sum;
  };
  double loss = o.auxLossCoef * balance(0, n);
  if (o.seqAuxLossCoef != 0) {
    const int64_t len = o.seqLen > 0 ? o.seqLen : n, seqs = n / len;
    for (int64_t s = 0; s < seqs; ++s) {
      loss += o.seqAuxLossCoef * balance(s * len, (s + 1) * len) / double(seqs);
    }
  }
  if (o.zLossCoef != 0) {
    for (int64_t t = 0; t < n; ++t) {
      double sum = 0;
      for (int64_t j = 0; j < e; ++j) sum += std::exp(r.z[size_t(t * e + j)]);
      loss += o.zLossCoef * std::log(sum) * std::log(sum) / double(n);
    }
  }
  return loss;
}

// Routed output [N, Dx] on the dispatch source (x, or u = x Wdown^T): a loop over experts, each
// over its kept tokens.
inline std::vector<double> oracleRouted(const MoeOptions& o, const Tensor<double>& x,
                                        const MoeParams<double>& p, const OracleRouting& r,
                                        const Tensor<int32_t>& topExpert,
                                        const Tensor<uint8_t>& keep) {
  const int64_t n = x.dim(0), d = p.d, k = o.topK;
  const int64_t dx = o.latent() ? o.latentDim : d;
  std::vector<double> src(size_t(n * dx));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < dx; ++c) {
      if (!o.latent()) {
        src[size_t(t * dx + c)] = x.at(t, c);
        continue;
      }
      for (int64_t c2 = 0; c2 < d; ++c2) {
        src[size_t(t * dx + c)] += x.at(t, c2) * p.latentDown.at(c, c2);
      }
    }
  }
  std::vector<double> routed(size_t(n * dx));
  for (int64_t ex = 0; ex < p.e; ++ex) {
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < k; ++i) {
        if (topExpert.at(t, i) != ex || (!keep.empty() && keep.at(t, i) == 0)) continue;
        oracleFfn(o, src.data() + t * dx, dx, p.gate.row(ex), p.up.row(ex), p.down.row(ex), p.f, dx,
                  r.w[size_t(t * k + i)], routed.data() + t * dx);
      }
    }
  }
  return routed;
}

// The MoE layer with the routing decision topExpert[N, k] and keep[N, k] (empty = all kept)
// fixed.
inline OracleResult moeOracle(const MoeOptions& o, const Tensor<double>& x,
                              const MoeParams<double>& p, const Tensor<int32_t>& topExpert,
                              const Tensor<uint8_t>& keep) {
  const int64_t n = x.dim(0), d = p.d;
  const int64_t dx = o.latent() ? o.latentDim : d;
  const OracleRouting routing = oracleRouting(o, x, p, topExpert);
  const std::vector<double> routed = oracleRouted(o, x, p, routing, topExpert, keep);
  OracleResult out;
  out.y.assign(size_t(n * d), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    double* yt = out.y.data() + t * d;
    const double* r = routed.data() + t * dx;
    if (!o.latent()) {
      for (int64_t c = 0; c < d; ++c) yt[c] = r[c];
    } else {  // RMSNorm_lat, then Wup
      double ms = 0;
      for (int64_t c = 0; c < dx; ++c) ms += r[c] * r[c] / double(dx);
      const double rstd = 1 / std::sqrt(ms + o.latentNormEps);
      for (int64_t c = 0; c < d; ++c) {
        for (int64_t c2 = 0; c2 < dx; ++c2) {
          yt[c] += r[c2] * rstd * p.latentNorm[c2] * p.latentUp.at(c, c2);
        }
      }
    }
    if (o.shared()) {
      oracleFfn(o, x.row(t), d, p.sharedGate.data(), p.sharedUp.data(), p.sharedDown.data(),
                o.sharedWidth(), d, 1.0, yt);
    }
  }
  out.auxLoss = oracleRouterLosses(o, routing, topExpert, p.e);
  return out;
}

// Runs the MoE FFN (double, random weights and inputs from `seed`) and checks it against the
// oracle with the same routing decision and mask: y and the router losses to ~1e-12, and every
// analytic gradient (x and all parameters, sampled) against central differences of the oracle.
inline void expectMatchesOracle(const std::string& label, const MoeOptions& o, int64_t n, int64_t d,
                                int64_t e, int64_t f, uint64_t seed, double inputScale = 1.0,
                                double weightScale = 0.6, const ExpertBias* bias = nullptr,
                                double tol = 1e-6) {
  ThreadPool pool(2);
  Rng rng(seed);
  MoeParams<double> p(o, d, e, f);
  p.randomize(rng, weightScale, 1.0);
  Tensor<double> x = randomTensor<double>({n, d}, rng, inputScale);
  Tensor<double> dy = randomTensor<double>({n, d}, rng);
  MoeSaved<double> saved;
  Tensor<double> y = moeFfnForward(pool, x, p.weights(bias), o, saved);
  const OracleResult want = moeOracle(o, x, p, saved.route.topExpert, saved.keep);
  for (int64_t i = 0; i < y.numel(); ++i) {
    ASSERT_NEAR(y[i], want.y[size_t(i)], 1e-12 * (1 + std::abs(want.y[size_t(i)])))
        << label << " y[" << i << "]";
  }
  EXPECT_NEAR(saved.aux.loss, want.auxLoss, 1e-13 * (1 + std::abs(want.auxLoss))) << label;
  MoeParams<double> grads(o, d, e, f);
  Tensor<double> dx = moeFfnBackward(pool, dy, x, p.weights(bias), o, saved, grads.grads());
  auto loss = [&] {
    const OracleResult r = moeOracle(o, x, p, saved.route.topExpert, saved.keep);
    double value = r.auxLoss;
    for (int64_t i = 0; i < dy.numel(); ++i) value += r.y[size_t(i)] * dy[i];
    return value;
  };
  expectGradientMatches(label + " oracle dx", x, dx, loss, sampleIndices(x.numel()), 1e-5, tol);
  auto gradList = grads.all();
  auto paramList = p.all();
  for (size_t i = 0; i < paramList.size(); ++i) {
    expectGradientMatches(label + " oracle d" + paramList[i].first, *paramList[i].second,
                          *gradList[i].second, loss, sampleIndices(paramList[i].second->numel()),
                          1e-5, tol);
  }
}

}  // namespace moewb::engine::test
