// Expert-parallel experts stage: count exchange, all-to-all-v, chunk sort, grouped experts and
// the way back (see ep_dispatch.h).
#include "model/parallel/ep_dispatch.h"

#include <algorithm>

#include "model/parallel/collective_error.h"

namespace moewb::engine {
namespace {

std::vector<int64_t> prefix(const std::vector<int64_t>& counts) {
  std::vector<int64_t> displs(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) displs[i] = displs[i - 1] + counts[i - 1];
  return displs;
}

std::vector<int64_t> scaled(const std::vector<int64_t>& rows, int64_t width) {
  std::vector<int64_t> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = rows[i] * width;
  return out;
}

int64_t total(const std::vector<int64_t>& v) {
  int64_t sum = 0;
  for (int64_t x : v) sum += x;
  return sum;
}

// Moves the row chunks of `src` between source-major ([rank][local expert], the received order)
// and expert-major ([local expert][rank]) order. counts: [EP * El] rows, source-major.
void sortChunks(const Tensor<float>& src /*[Rl, Dx]*/, Tensor<float>& dst /*[Rl, Dx]*/,
                const std::vector<int64_t>& counts, int64_t ep, int64_t el, bool toExpertMajor) {
  const int64_t width = src.numel() > 0 ? src.numel() / src.dim(0) : 0;
  std::vector<int64_t> sourceMajor(size_t(ep * el), 0), expertMajor(size_t(ep * el), 0);
  int64_t offset = 0;
  for (int64_t s = 0; s < ep; ++s) {
    for (int64_t e = 0; e < el; ++e) {
      sourceMajor[size_t(s * el + e)] = offset;
      offset += counts[size_t(s * el + e)];
    }
  }
  offset = 0;
  for (int64_t e = 0; e < el; ++e) {
    for (int64_t s = 0; s < ep; ++s) {
      expertMajor[size_t(s * el + e)] = offset;
      offset += counts[size_t(s * el + e)];
    }
  }
  for (size_t c = 0; c < counts.size(); ++c) {
    const int64_t from = toExpertMajor ? sourceMajor[c] : expertMajor[c];
    const int64_t to = toExpertMajor ? expertMajor[c] : sourceMajor[c];
    std::copy_n(src.data() + from * width, counts[c] * width, dst.data() + to * width);
  }
}

// All-to-all-v of rows: sendRows[j] rows of `send` to rank j, recvRows[i] rows from rank i.
Tensor<float> exchangeRows(Communicator& comm, const Tensor<float>& send /*[R, Dx]*/, int64_t width,
                           const std::vector<int64_t>& sendRows,
                           const std::vector<int64_t>& recvRows) {
  Tensor<float> recv({total(recvRows), width});  // [sum recvRows, Dx]
  const std::vector<int64_t> sendCounts = scaled(sendRows, width);
  const std::vector<int64_t> recvCounts = scaled(recvRows, width);
  const std::vector<int64_t> sendDispls = prefix(sendCounts);
  const std::vector<int64_t> recvDispls = prefix(recvCounts);
  throwIfFailed(comm.allToAllV(std::span<const float>(send.data(), size_t(send.numel())),
                               sendCounts, sendDispls,
                               std::span<float>(recv.data(), size_t(recv.numel())), recvCounts,
                               recvDispls));
  return recv;
}

void setPhase(CommTag* tag, const char* phase) {
  if (tag != nullptr) tag->phase = phase;
}

}  // namespace

Tensor<float> epExpertsForward(ThreadPool& pool, Communicator& comm, const Tensor<float>& xPerm,
                               const Tensor<int32_t>& offsets, const ExpertWeights<float>& weights,
                               const GluParams& activation, EpSaved& saved, CommTag* tag) {
  const int64_t ep = comm.worldSize(), e = offsets.numel() - 1, el = e / ep;
  const int64_t width = xPerm.dim(1);
  MOEWB_CHECK(e % ep == 0 && weights.gate.dim(0) == el);
  std::vector<int64_t> sendCounts(static_cast<size_t>(e), 0);  // [EP * El] rows per expert
  for (int64_t x = 0; x < e; ++x) sendCounts[size_t(x)] = offsets[x + 1] - offsets[x];
  saved.recvCounts.assign(size_t(e), 0);
  setPhase(tag, "dispatch");
  throwIfFailed(comm.allToAll(std::span<const int64_t>(sendCounts),
                              std::span<int64_t>(saved.recvCounts)));
  saved.sendRows.assign(size_t(ep), 0);
  saved.recvRows.assign(size_t(ep), 0);
  saved.localOffsets = Tensor<int32_t>({el + 1});
  for (int64_t s = 0; s < ep; ++s) {
    for (int64_t x = 0; x < el; ++x) {
      saved.sendRows[size_t(s)] += sendCounts[size_t(s * el + x)];
      saved.recvRows[size_t(s)] += saved.recvCounts[size_t(s * el + x)];
      saved.localOffsets[x + 1] += int32_t(saved.recvCounts[size_t(s * el + x)]);
    }
  }
  for (int64_t x = 0; x < el; ++x) saved.localOffsets[x + 1] += saved.localOffsets[x];
  Tensor<float> received = exchangeRows(comm, xPerm, width, saved.sendRows, saved.recvRows);
  saved.xLocal = Tensor<float>({received.dim(0), width});  // [Rl, Dx]
  sortChunks(received, saved.xLocal, saved.recvCounts, ep, el, true);
  received = Tensor<float>();
  Tensor<float> yLocal =
      expertsForward(pool, saved.xLocal, saved.localOffsets, weights, saved.experts, activation);
  Tensor<float> yReturn({yLocal.dim(0), width});  // [Rl, Dx] back in received order
  sortChunks(yLocal, yReturn, saved.recvCounts, ep, el, false);
  setPhase(tag, "combine");
  Tensor<float> yPerm = exchangeRows(comm, yReturn, width, saved.recvRows, saved.sendRows);
  setPhase(tag, "");
  return yPerm;
}

Tensor<float> epExpertsBackward(ThreadPool& pool, Communicator& comm, const Tensor<float>& dYPerm,
                                const ExpertWeights<float>& weights,
                                const ExpertGrads<float>& grads, const GluParams& activation,
                                EpSaved& saved, CommTag* tag) {
  const int64_t ep = comm.worldSize(), el = saved.localOffsets.numel() - 1;
  const int64_t width = dYPerm.dim(1);
  setPhase(tag, "combine.bwd");
  Tensor<float> received = exchangeRows(comm, dYPerm, width, saved.sendRows, saved.recvRows);
  Tensor<float> dYLocal({received.dim(0), width});  // [Rl, Dx]
  sortChunks(received, dYLocal, saved.recvCounts, ep, el, true);
  received = Tensor<float>();
  Tensor<float> dXLocal = expertsBackward(pool, dYLocal, saved.xLocal, saved.localOffsets,
                                          weights, saved.experts, grads, activation);
  Tensor<float> dXReturn({dXLocal.dim(0), width});  // [Rl, Dx] in received order
  sortChunks(dXLocal, dXReturn, saved.recvCounts, ep, el, false);
  setPhase(tag, "dispatch.bwd");
  Tensor<float> dXPerm = exchangeRows(comm, dXReturn, width, saved.recvRows, saved.sendRows);
  setPhase(tag, "");
  saved = EpSaved();
  return dXPerm;
}

}  // namespace moewb::engine
