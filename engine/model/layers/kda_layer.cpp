// The KDA mixer layer: projections through linear.h, the short convs, L2 norms and gate from
// kda_gate.h, the chunked core from kda.h, and the gated per-head RMSNorm here (see kda_layer.h).
#include "model/layers/kda_layer.h"

#include <cmath>

#include "ops/linear/linear.h"

namespace moewb::engine {
namespace {

constexpr int64_t kRowGrain = 64;
constexpr int64_t kColumnGrain = 16;

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// y = x W^T for x [rows, in], W [out, in], as a new [rows, out] tensor.
template <typename T>
Tensor<T> project(ThreadPool& pool, const Tensor<T>& x, const Tensor<T>& w) {
  Tensor<T> y({x.dim(0), w.dim(0)});  // [rows, out]
  linearForward(pool, x.data(), w.data(), y.data(), x.dim(0), w.dim(1), w.dim(0));
  return y;
}

// Backward of `project`: dx (+)= dy W and dW += dy^T x.
template <typename T>
void projectBackward(ThreadPool& pool, const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>& w,
                     Tensor<T>& dw, Tensor<T>& dx, bool accumulate) {
  linearBackwardData(pool, dy.data(), w.data(), dx.data(), x.dim(0), w.dim(1), w.dim(0),
                     accumulate);
  linearBackwardWeight(pool, dy.data(), x.data(), dw.data(), x.dim(0), w.dim(1), w.dim(0));
}

// sum[c] += sum_rows m[row, c], in row order per column tile.
template <typename T>
void addColumnSums(ThreadPool& pool, const Tensor<T>& m, Tensor<T>& sum) {
  const int64_t rows = m.dim(0), cols = m.dim(1);
  pool.parallelForRange(cols, kColumnGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t c = begin; c < end; ++c) sum[c] += m.at(row, c);
    }
  });
}

// ctx = o rstd normWeight sigmoid(gate) per (token, head); writes rstd [N, H].
template <typename T>
Tensor<T> gatedNormForward(ThreadPool& pool, const KdaDims& dims, const Tensor<T>& o,
                           const Tensor<T>& gate, const Tensor<T>& normWeight, Tensor<T>& rstd) {
  const int64_t n = dims.tokens(), h = dims.numHeads, kd = dims.headDim;
  Tensor<T> ctx({n, h * kd});  // [N, P]
  rstd = Tensor<T>({n, h});    // [N, H]
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      for (int64_t head = 0; head < h; ++head) {
        const T* on = o.row(row) + head * kd;
        T sumSq = 0;
        for (int64_t d = 0; d < kd; ++d) sumSq += on[d] * on[d];
        const T r = T(1) / std::sqrt(sumSq / T(kd) + T(dims.normEps));
        rstd.at(row, head) = r;
        const T* gr = gate.row(row) + head * kd;
        T* cr = ctx.row(row) + head * kd;
        for (int64_t d = 0; d < kd; ++d) cr[d] = on[d] * r * normWeight[d] * sigmoid(gr[d]);
      }
    }
  });
  return ctx;
}

// Backward of gatedNormForward: returns do [N, P]; writes dGate [N, P]; adds into dNormWeight.
// With on = o rstd and s = sigmoid(gate): dGate = dCtx on w s (1 - s), dOn = dCtx s w,
// do = rstd (dOn - on mean(dOn on)), dw += sum dCtx s on.
template <typename T>
Tensor<T> gatedNormBackward(ThreadPool& pool, const KdaDims& dims, const Tensor<T>& dCtx,
                            const Tensor<T>& o, const Tensor<T>& gate, const Tensor<T>& normWeight,
                            const Tensor<T>& rstd, Tensor<T>& dGate, Tensor<T>& dNormWeight) {
  const int64_t n = dims.tokens(), h = dims.numHeads, kd = dims.headDim;
  Tensor<T> dO({n, h * kd});       // [N, P]
  Tensor<T> wTerms({n, h * kd});   // [N, P] dCtx s on, summed into dNormWeight
  dGate = Tensor<T>({n, h * kd});  // [N, P]
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      for (int64_t head = 0; head < h; ++head) {
        const int64_t col = head * kd;
        const T r = rstd.at(row, head);
        T dot = 0;  // sum_d dOn_d on_d
        for (int64_t d = 0; d < kd; ++d) {
          const T s = sigmoid(gate.at(row, col + d));
          const T on = o.at(row, col + d) * r;
          const T dz = dCtx.at(row, col + d) * s;  // gradient of on * normWeight
          dGate.at(row, col + d) = dz * on * normWeight[d] * (T(1) - s);
          wTerms.at(row, col + d) = dz * on;
          dO.at(row, col + d) = dz * normWeight[d];  // dOn for now
          dot += dO.at(row, col + d) * on;
        }
        const T meanDot = dot / T(kd);
        for (int64_t d = 0; d < kd; ++d) {
          dO.at(row, col + d) = r * (dO.at(row, col + d) - o.at(row, col + d) * r * meanDot);
        }
      }
    }
  });
  pool.parallelForRange(kd, kColumnGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = 0; row < n; ++row) {
      for (int64_t head = 0; head < h; ++head) {
        for (int64_t d = begin; d < end; ++d) dNormWeight[d] += wTerms.at(row, head * kd + d);
      }
    }
  });
  return dO;
}

template <typename T>
void checkLayerShapes(const KdaDims& dims, const Tensor<T>& x, const KdaWeights<T>& w) {
  MOEWB_CHECK(x.rank() == 2 && x.dim(0) == dims.tokens() && x.dim(1) == dims.dModel);
  const std::vector<KdaParameterShape> shapes = kdaParameterShapes(dims);
  const Tensor<T>* tensors[] = {&w.wq,  &w.wk,  &w.wv,         &w.convQ,  &w.convK, &w.convV,
                                &w.wf1, &w.wf2, &w.aLog,       &w.dtBias, &w.wb,    &w.wg1,
                                &w.wg2, &w.bg,  &w.normWeight, &w.wo};
  for (size_t i = 0; i < shapes.size(); ++i) {
    int64_t numel = 1;
    for (int64_t extent : shapes[i].shape) numel *= extent;
    MOEWB_CHECK_MSG(tensors[i]->numel() == numel, "KDA weight " << shapes[i].name);
  }
}

}  // namespace

template <typename T>
Tensor<T> kdaForward(ThreadPool& pool, const KdaDims& dims, const Tensor<T>& x,
                     const KdaWeights<T>& weights, KdaSaved<T>& saved) {
  checkLayerShapes(dims, x, weights);
  const int64_t kd = dims.headDim;
  saved.qProj = project(pool, x, weights.wq);
  saved.kProj = project(pool, x, weights.wk);
  saved.vProj = project(pool, x, weights.wv);
  saved.qAct =
      kdaShortConvForward(pool, dims.batch, dims.seqLen, saved.qProj, weights.convQ, saved.qConv);
  saved.kAct =
      kdaShortConvForward(pool, dims.batch, dims.seqLen, saved.kProj, weights.convK, saved.kConv);
  saved.v =
      kdaShortConvForward(pool, dims.batch, dims.seqLen, saved.vProj, weights.convV, saved.vConv);
  saved.q =
      kdaL2NormForward(pool, kd, 1.0 / std::sqrt(double(kd)), dims.l2Eps, saved.qAct, saved.qRinv);
  saved.k = kdaL2NormForward(pool, kd, 1.0, dims.l2Eps, saved.kAct, saved.kRinv);
  saved.fLow = project(pool, x, weights.wf1);
  saved.f = project(pool, saved.fLow, weights.wf2);
  saved.g = kdaGateForward(pool, dims.gateParams(), saved.f, weights.aLog, weights.dtBias);
  saved.beta = project(pool, x, weights.wb);
  for (int64_t i = 0; i < saved.beta.numel(); ++i) saved.beta[i] = sigmoid(saved.beta[i]);
  Tensor<T> noState, finalState;
  saved.o = kdaChunkForward(pool, dims.coreDims(), saved.q, saved.k, saved.v, saved.g, saved.beta,
                            noState, finalState, &saved.core);
  saved.gLow = project(pool, x, weights.wg1);
  saved.gate = project(pool, saved.gLow, weights.wg2);
  for (int64_t row = 0; row < dims.tokens(); ++row) {
    for (int64_t c = 0; c < dims.innerDim(); ++c) saved.gate.at(row, c) += weights.bg[c];
  }
  saved.ctx = gatedNormForward(pool, dims, saved.o, saved.gate, weights.normWeight, saved.oRstd);
  return project(pool, saved.ctx, weights.wo);
}

template <typename T>
Tensor<T> kdaBackward(ThreadPool& pool, const KdaDims& dims, const Tensor<T>& dy,
                      const Tensor<T>& x, const KdaWeights<T>& weights, const KdaSaved<T>& saved,
                      const KdaGrads<T>& grads) {
  checkLayerShapes(dims, x, weights);
  const int64_t n = dims.tokens(), p = dims.innerDim(), r = dims.rank(), kd = dims.headDim;
  MOEWB_CHECK(dy.numel() == n * dims.dModel);
  Tensor<T> dx({n, dims.dModel});  // [N, D]
  Tensor<T> dCtx({n, p});          // [N, P]
  projectBackward(pool, dy, saved.ctx, weights.wo, grads.wo, dCtx, false);
  Tensor<T> dGate;  // [N, P]
  Tensor<T> dO = gatedNormBackward(pool, dims, dCtx, saved.o, saved.gate, weights.normWeight,
                                   saved.oRstd, dGate, grads.normWeight);
  addColumnSums(pool, dGate, grads.bg);
  Tensor<T> dGLow({n, r});  // [N, R]
  projectBackward(pool, dGate, saved.gLow, weights.wg2, grads.wg2, dGLow, false);
  projectBackward(pool, dGLow, x, weights.wg1, grads.wg1, dx, false);

  Tensor<T> noState;
  KdaCoreGrads<T> core = kdaChunkBackward(pool, dims.coreDims(), dO, noState, saved.q, saved.k,
                                          saved.v, saved.g, saved.beta, noState, saved.core);
  for (int64_t i = 0; i < core.dbeta.numel(); ++i) {
    core.dbeta[i] *= saved.beta[i] * (T(1) - saved.beta[i]);  // through the sigmoid
  }
  projectBackward(pool, core.dbeta, x, weights.wb, grads.wb, dx, true);
  Tensor<T> df = kdaGateBackward(pool, dims.gateParams(), core.dg, saved.f, saved.g, weights.aLog,
                                 weights.dtBias, grads.aLog, grads.dtBias);
  Tensor<T> dFLow({n, r});  // [N, R]
  projectBackward(pool, df, saved.fLow, weights.wf2, grads.wf2, dFLow, false);
  projectBackward(pool, dFLow, x, weights.wf1, grads.wf1, dx, true);

  Tensor<T> dqAct =
      kdaL2NormBackward(pool, kd, 1.0 / std::sqrt(double(kd)), core.dq, saved.qAct, saved.qRinv);
  Tensor<T> dkAct = kdaL2NormBackward(pool, kd, 1.0, core.dk, saved.kAct, saved.kRinv);
  Tensor<T> dqProj = kdaShortConvBackward(pool, dims.batch, dims.seqLen, dqAct, saved.qProj,
                                          weights.convQ, saved.qConv, grads.convQ);
  Tensor<T> dkProj = kdaShortConvBackward(pool, dims.batch, dims.seqLen, dkAct, saved.kProj,
                                          weights.convK, saved.kConv, grads.convK);
  Tensor<T> dvProj = kdaShortConvBackward(pool, dims.batch, dims.seqLen, core.dv, saved.vProj,
                                          weights.convV, saved.vConv, grads.convV);
  projectBackward(pool, dqProj, x, weights.wq, grads.wq, dx, true);
  projectBackward(pool, dkProj, x, weights.wk, grads.wk, dx, true);
  projectBackward(pool, dvProj, x, weights.wv, grads.wv, dx, true);
  return dx;
}

std::vector<KdaParameterShape> kdaParameterShapes(const KdaDims& dims) {
  const int64_t d = dims.dModel, p = dims.innerDim(), r = dims.rank(), w = dims.convKernel;
  return {{"wq", {p, d}, true},
          {"wk", {p, d}, true},
          {"wv", {p, d}, true},
          {"conv_q", {p, w}, true},
          {"conv_k", {p, w}, true},
          {"conv_v", {p, w}, true},
          {"wf1", {r, d}, true},
          {"wf2", {p, r}, true},
          {"a_log", {dims.numHeads}, false},
          {"dt_bias", {p}, false},
          {"wb", {dims.numHeads, d}, true},
          {"wg1", {r, d}, true},
          {"wg2", {p, r}, true},
          {"bg", {p}, false},
          {"norm_weight", {dims.headDim}, false},
          {"wo", {d, p}, true}};
}

template <typename T>
Tensor<T> kdaMakeTensor(const KdaParameterShape& shape) {
  MOEWB_CHECK(shape.shape.size() == 1 || shape.shape.size() == 2);
  return shape.shape.size() == 1 ? Tensor<T>({shape.shape[0]})
                                 : Tensor<T>({shape.shape[0], shape.shape[1]});
}

template <typename T>
void kdaInitializeParameter(const KdaDims& dims, const std::string& name, Rng& rng, double initStd,
                            int64_t numLayers, Tensor<T>& value) {
  if (name == "bg") {
    value.fill(T(0));
  } else if (name == "norm_weight") {
    value.fill(T(1));
  } else if (name == "a_log") {
    for (int64_t i = 0; i < value.numel(); ++i) {
      value[i] =
          dims.gate == KdaGateKind::kLowerBound ? T(0) : T(std::log(1.0 + 15.0 * rng.uniform()));
    }
  } else if (name == "dt_bias") {
    const double lo = std::log(1e-3), hi = std::log(1e-1);
    for (int64_t i = 0; i < value.numel(); ++i) {
      const double dt = std::max(std::exp(lo + (hi - lo) * rng.uniform()), 1e-4);
      value[i] = T(dt + std::log(-std::expm1(-dt)));  // softplus^-1(dt)
    }
  } else {
    const double stddev =
        name == "wo" ? initStd / std::sqrt(2.0 * double(std::max<int64_t>(numLayers, 1))) : initStd;
    for (int64_t i = 0; i < value.numel(); ++i) value[i] = T(rng.normal() * stddev);
  }
}

template <typename T>
void kdaInitialize(const KdaDims& dims, Rng& rng, double initStd, int64_t numLayers,
                   const KdaGrads<T>& weights) {
  Tensor<T>* tensors[] = {&weights.wq,    &weights.wk,     &weights.wv,         &weights.convQ,
                          &weights.convK, &weights.convV,  &weights.wf1,        &weights.wf2,
                          &weights.aLog,  &weights.dtBias, &weights.wb,         &weights.wg1,
                          &weights.wg2,   &weights.bg,     &weights.normWeight, &weights.wo};
  const std::vector<KdaParameterShape> shapes = kdaParameterShapes(dims);
  for (size_t i = 0; i < shapes.size(); ++i) {
    kdaInitializeParameter(dims, shapes[i].name, rng, initStd, numLayers, *tensors[i]);
  }
}

template <typename T>
KdaParameterSet<T>::KdaParameterSet(const KdaDims& dims) {
  for (const KdaParameterShape& shape : kdaParameterShapes(dims)) {
    tensors.push_back(kdaMakeTensor<T>(shape));
  }
}

template <typename T>
KdaWeights<T> KdaParameterSet<T>::weights() const {
  const std::vector<Tensor<T>>& t = tensors;
  return {t[0], t[1], t[2],  t[3],  t[4],  t[5],  t[6],  t[7],
          t[8], t[9], t[10], t[11], t[12], t[13], t[14], t[15]};
}

template <typename T>
KdaGrads<T> KdaParameterSet<T>::refs() {
  std::vector<Tensor<T>>& t = tensors;
  return {t[0], t[1], t[2],  t[3],  t[4],  t[5],  t[6],  t[7],
          t[8], t[9], t[10], t[11], t[12], t[13], t[14], t[15]};
}

#define MOEWB_INSTANTIATE_KDA_LAYER(T)                                                          \
  template Tensor<T> kdaForward<T>(ThreadPool&, const KdaDims&, const Tensor<T>&,               \
                                   const KdaWeights<T>&, KdaSaved<T>&);                         \
  template Tensor<T> kdaBackward<T>(ThreadPool&, const KdaDims&, const Tensor<T>&,              \
                                    const Tensor<T>&, const KdaWeights<T>&, const KdaSaved<T>&, \
                                    const KdaGrads<T>&);                                        \
  template Tensor<T> kdaMakeTensor<T>(const KdaParameterShape&);                                \
  template void kdaInitializeParameter<T>(const KdaDims&, const std::string&, Rng&, double,     \
                                          int64_t, Tensor<T>&);                                 \
  template void kdaInitialize<T>(const KdaDims&, Rng&, double, int64_t, const KdaGrads<T>&);    \
  template struct KdaParameterSet<T>;
MOEWB_INSTANTIATE_KDA_LAYER(float)
MOEWB_INSTANTIATE_KDA_LAYER(double)

}  // namespace moewb::engine
