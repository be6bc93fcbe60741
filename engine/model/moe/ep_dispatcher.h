// EpDispatcher: the expert-parallel token dispatcher of one MoE layer (ENGINE-MATH §5.9), one
// unit for both backends, in the stages of Megatron-Core's all-to-all token dispatcher. This
// rank's routed rows, already permuted expert-major by global expert id (so grouped by
// destination EP rank, then by local expert), travel to the ranks that own their experts, are
// computed there and come back to their place:
//
//   dispatch-pre   plan(): the count exchange and the EpPlan (model/moe/ep_plan.h: splits per
//                  chunk, local offsets, the local sort), its indices handed to the mover
//   all-to-all     dispatch(c): chunk c's rows to the experts' owners (all-to-all-v)
//   dispatch-post  dispatchPost(c): sort [source rank][local expert] -> [local expert][source]
//   (experts)      the caller's grouped experts on the sorted rows
//   combine-pre    combinePre(c): the inverse sort, back into the received order
//   all-to-all     combine(c): the rows back to the ranks they came from (splits swapped)
//   combine-post   finish(): every chunk back; the rows in this rank's permuted order
//
// The backward is the same round trip with the row gradients (plan kept from the forward): the
// experts' backward in the middle adds the local experts' weight gradients. forward() and
// backward() chain the stages; roundTrip() issues every chunk's dispatch first, then per chunk
// dispatch-post -> experts -> combine-pre -> combine, so with C > 1 chunks one chunk's all-to-all
// can run while another's experts compute (each expert sees the same rows in the same order for
// any C, so the results are bitwise equal).
//
// What differs per backend is only how rows move: the mover (EpMover below). The CPU mover
// (model/parallel/ep_dispatch.h) holds Tensor<float> rows and calls the host communicator; the
// CUDA mover (model/cuda/cuda_ep.h) holds DeviceTensor<bf16> rows, calls the device all-to-all on
// the context's side stream when C > 1, sorts with a gather kernel and orders the two streams with
// events. The plan is host vectors on both: on the GPU the offsets are read back once per layer
// before plan() (the all-to-all needs its sizes on the host, as in Megatron-Core).
//
// Trace: `tag` (may be null) names each all-to-all: "dispatch" (the count exchange too) and
// "combine" forward, "combine.bwd" (gradients to the experts) and "dispatch.bwd" backward; ""
// once the round trip is done. Errors: the plan's kInvalidArgument, the communicator's (a
// missing peer: kCancelled naming it), the mover's. Costs per direction: 2 all-to-all-v of
// R x Dx elements (C each with chunks) and, forward, one count exchange of EP x El int64; the
// sorts copy every row once. Not thread-safe per EpDispatchSaved; deterministic.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "model/cpu/model_parallel.h"
#include "model/moe/ep_plan.h"
#include "moewb/base/status.h"

namespace moewb::engine {

// What a buffer of rows is kept for (each mover maps it to its memory accounting).
enum class EpRowsUse {
  kSaved,    // lives until the backward (the experts' input rows)
  kScratch,  // lives for one round trip
};

// The trace names of a round trip's two all-to-all directions.
struct EpPhases {
  const char* out;   // rows to the experts' owners
  const char* back;  // rows back to where they came from
};
inline constexpr EpPhases kEpForwardPhases{"dispatch", "combine"};
inline constexpr EpPhases kEpBackwardPhases{"combine.bwd", "dispatch.bwd"};

// A backend's data mover. Rows: [rows, width] buffers; Index: int32 vectors where the sorts and
// the experts read them; ExpertsSaved: what the local experts keep for their backward.
//   upload(v)              the plan's vector v where the mover and the experts read it
//   newRows(r, w, use)     a buffer of r rows of width w (r may be 0)
//   rowCount / rowWidth    a buffer's shape
//   exchange(...)          all-to-all-v of rows: fromRows[j] rows at fromFirst[j] of `from` to
//                          rank j; toRows[i] rows from rank i at toFirst[i] of `to`
//   gather / scatter       out[r] = in[index[r]] / out[index[r]] = in[r] for r < rows
//   startRoundTrip(c)      picks where the exchanges run (c chunks) and orders them after the
//                          work queued so far
//   exchangeAfterCompute   later exchanges wait for the compute queued so far
//   computeAfterExchange   later compute waits for the exchanges queued so far
template <typename M>
concept EpMover = requires(M& m, const typename M::Rows& in, typename M::Rows& out,
                           const typename M::Index& index, const std::vector<int32_t>& values,
                           std::span<const int64_t> rows, int64_t n, EpRowsUse use) {
  typename M::ExpertsSaved;
  { m.upload(values) } -> std::same_as<Result<typename M::Index>>;
  { m.newRows(n, n, use) } -> std::same_as<Result<typename M::Rows>>;
  { M::rowCount(in) } -> std::same_as<int64_t>;
  { M::rowWidth(in) } -> std::same_as<int64_t>;
  { m.exchange(in, rows, rows, out, rows, rows) } -> std::same_as<Status>;
  { m.gather(in, index, out, n) } -> std::same_as<Status>;
  { m.scatter(in, index, out, n) } -> std::same_as<Status>;
  { m.startRoundTrip(size_t(1)) } -> std::same_as<Status>;
  { m.exchangeAfterCompute() } -> std::same_as<Status>;
  { m.computeAfterExchange() } -> std::same_as<Status>;
};

// What one chunk keeps from the forward for the backward.
template <EpMover M>
struct EpChunkSaved {
  typename M::Index localOffsets;    // [El + 1] the plan's local offsets, where the experts read
  typename M::Index sortIndex;       // [Rl] the plan's gather index (the mover may pad it)
  typename M::Rows xLocal;           // [Rl, Dx] the experts' input rows, expert-major
  typename M::ExpertsSaved experts;  // the local experts' activations
};

// What a layer's forward keeps for its backward.
template <EpMover M>
struct EpDispatchSaved {
  EpPlan plan;                          // splits, offsets and sort of every chunk
  std::vector<EpChunkSaved<M>> chunks;  // [C]
};

template <EpMover M>
class EpDispatcher {
 public:
  using Rows = typename M::Rows;

  // One direction of a layer's round trip on `mover` (which must outlive the dispatcher), with
  // the layer's `saved` and the trace `tag` (may be null).
  EpDispatcher(M& mover, EpDispatchSaved<M>& saved, CommTag* tag)
      : m_mover(mover), m_saved(saved), m_tag(tag) {}

  // Dispatch-pre (forward): the count exchange on `comm` (the EP group; collective, blocks until
  // every rank has called it) and the plan of `offsets` [E + 1] in `chunks` chunks, its indices
  // uploaded; replaces `saved`. Errors: exchangeEpPlan's, the mover's.
  Status plan(Communicator& comm, std::span<const int32_t> offsets, int32_t chunks) {
    setPhase(kEpForwardPhases.out);
    MOEWB_ASSIGN_OR_RETURN(EpPlan plan, exchangeEpPlan(comm, offsets, chunks));
    m_saved.plan = std::move(plan);
    m_saved.chunks.clear();
    m_saved.chunks.resize(m_saved.plan.chunks.size());
    for (size_t c = 0; c < m_saved.chunks.size(); ++c) {
      const EpChunkPlan& chunk = m_saved.plan.chunks[c];
      MOEWB_ASSIGN_OR_RETURN(m_saved.chunks[c].sortIndex, m_mover.upload(chunk.sortIndex));
      MOEWB_ASSIGN_OR_RETURN(m_saved.chunks[c].localOffsets, m_mover.upload(chunk.localOffsets));
    }
    return Status::ok();
  }

  // Opens a round trip of `from` [R', Dx] (rows < R = the plan's sent rows are read): allocates
  // the output [R', Dx] and orders the exchanges after `from`. Follows plan().
  Status begin(const Rows& from, EpPhases phases) {
    m_from = &from;
    m_phases = phases;
    m_width = M::rowWidth(from);
    const size_t chunks = m_saved.chunks.size();
    m_received.clear();
    m_received.resize(chunks);
    m_returned.clear();
    m_returned.resize(chunks);
    MOEWB_ASSIGN_OR_RETURN(m_out, m_mover.newRows(M::rowCount(from), m_width, EpRowsUse::kSaved));
    MOEWB_RETURN_IF_ERROR(m_mover.startRoundTrip(chunks));
    setPhase(m_phases.out);
    return Status::ok();
  }

  // All-to-all of chunk c's rows to the ranks that own its experts. After begin().
  Status dispatch(size_t c) {
    const EpChunkPlan& chunk = m_saved.plan.chunks[c];
    MOEWB_ASSIGN_OR_RETURN(m_received[c],
                           m_mover.newRows(chunk.localRows, m_width, EpRowsUse::kScratch));
    MOEWB_ASSIGN_OR_RETURN(m_returned[c],
                           m_mover.newRows(chunk.localRows, m_width, EpRowsUse::kScratch));
    return m_mover.exchange(*m_from, chunk.sendRows, chunk.sendFirstRow, m_received[c],
                            chunk.recvRows, chunk.recvFirstRow);
  }

  // Dispatch-post of chunk c: waits for its rows and returns them sorted by local expert,
  // [Rl, Dx] in a buffer kept for `use`. After dispatch(c).
  Result<Rows> dispatchPost(size_t c, EpRowsUse use) {
    const EpChunkPlan& chunk = m_saved.plan.chunks[c];
    MOEWB_RETURN_IF_ERROR(m_mover.computeAfterExchange());
    MOEWB_ASSIGN_OR_RETURN(Rows local, m_mover.newRows(chunk.localRows, m_width, use));
    MOEWB_RETURN_IF_ERROR(
        m_mover.gather(m_received[c], m_saved.chunks[c].sortIndex, local, chunk.localRows));
    return local;
  }

  // Combine-pre of chunk c: the experts' output `local` [Rl, Dx] back into the received order.
  Status combinePre(size_t c, const Rows& local) {
    return m_mover.scatter(local, m_saved.chunks[c].sortIndex, m_returned[c],
                           m_saved.plan.chunks[c].localRows);
  }

  // All-to-all of chunk c's rows back to the ranks they came from, into their rows of the output.
  Status combine(size_t c) {
    const EpChunkPlan& chunk = m_saved.plan.chunks[c];
    MOEWB_RETURN_IF_ERROR(m_mover.exchangeAfterCompute());
    setPhase(m_phases.back);
    return m_mover.exchange(m_returned[c], chunk.recvRows, chunk.recvFirstRow, m_out,
                            chunk.sendRows, chunk.sendFirstRow);
  }

  // Combine-post: waits for every chunk; the output [R', Dx] (rows < R written). Ends the trip.
  Result<Rows> finish() {
    MOEWB_RETURN_IF_ERROR(m_mover.computeAfterExchange());
    setPhase("");
    return std::move(m_out);
  }

  // The stages of one round trip of `from`: every chunk's dispatch, then per chunk
  // dispatch-post -> experts(chunk saved, sorted rows) -> combine-pre -> combine; finish.
  // `experts` returns Result<Rows> [Rl, Dx]; `localUse` is what the sorted rows are kept for.
  template <typename Experts>
  Result<Rows> roundTrip(const Rows& from, EpPhases phases, EpRowsUse localUse,
                         Experts&& experts) {
    MOEWB_RETURN_IF_ERROR(begin(from, phases));
    for (size_t c = 0; c < m_saved.chunks.size(); ++c) MOEWB_RETURN_IF_ERROR(dispatch(c));
    for (size_t c = 0; c < m_saved.chunks.size(); ++c) {
      MOEWB_ASSIGN_OR_RETURN(Rows local, dispatchPost(c, localUse));
      MOEWB_ASSIGN_OR_RETURN(Rows computed, experts(m_saved.chunks[c], std::move(local)));
      MOEWB_RETURN_IF_ERROR(combinePre(c, computed));
      MOEWB_RETURN_IF_ERROR(combine(c));
    }
    return finish();
  }

  // The experts stage's forward: plan, then the round trip of xPerm [R', Dx] through
  // `experts`, which gets each chunk's sorted rows and must keep them in chunk.xLocal for the
  // backward. Returns yPerm [R', Dx].
  template <typename Experts>
  Result<Rows> forward(Communicator& comm, std::span<const int32_t> offsets, int32_t chunks,
                       const Rows& xPerm, Experts&& experts) {
    MOEWB_RETURN_IF_ERROR(plan(comm, offsets, chunks));
    return roundTrip(xPerm, kEpForwardPhases, EpRowsUse::kSaved,
                     std::forward<Experts>(experts));
  }

  // The backward: the round trip of dYPerm [R', Dx] through `experts` (the experts' backward of
  // each chunk's sorted row gradients, reading chunk.xLocal); returns dXPerm [R', Dx] and
  // releases `saved`. Follows forward() with the same `saved`.
  template <typename Experts>
  Result<Rows> backward(const Rows& dYPerm, Experts&& experts) {
    MOEWB_ASSIGN_OR_RETURN(Rows dXPerm, roundTrip(dYPerm, kEpBackwardPhases, EpRowsUse::kScratch,
                                                  std::forward<Experts>(experts)));
    m_saved = EpDispatchSaved<M>();
    return dXPerm;
  }

 private:
  void setPhase(const char* phase) {
    if (m_tag != nullptr) m_tag->phase = phase;
  }

  M& m_mover;
  EpDispatchSaved<M>& m_saved;
  CommTag* m_tag;
  EpPhases m_phases = kEpForwardPhases;
  const Rows* m_from = nullptr;  // the rows of the round trip in progress
  int64_t m_width = 0;           // Dx
  Rows m_out;                    // [R', Dx] the round trip's result
  std::vector<Rows> m_received;  // [C] each chunk's rows as received, [Rl, Dx]
  std::vector<Rows> m_returned;  // [C] each chunk's results in the received order, [Rl, Dx]
};

}  // namespace moewb::engine
