// The trace writer's swap rows (tables swap_plan, swap_plan_layer, swap_plan_tensor, swap_event,
// swap_step; see schema.cpp): the caller-side add* methods and, on the writer thread, their
// inserts into the open per-step transaction. A swap event is queued unboxed (it is no larger
// than a slice, the common op); plans and step rows are rare and boxed. A plan is one swap_plan
// row, then its layer and tensor rows keyed by the new plan id.
// Cost per row on the writer thread: one prepared-statement execution (a plan: 1 + L + tensors).
#include <algorithm>
#include <memory>
#include <string>

#include "schema.h"
#include "sqlite_trace_writer.h"

namespace moewb::storage::detail {

static_assert(sizeof(SwapEventOp) <= sizeof(SliceRow) + sizeof(int64_t),
              "a swap event must stay about as small as a slice in the writer queue");

Status SqliteTraceWriter::prepareSwapStatements() {
  const std::pair<Statement*, const char*> statements[] = {
      {&m_stmts.insertSwapPlan,
       "INSERT INTO swap_plan(run, step, rank, mode, hbm_target_bytes, pinned_budget_bytes, "
       "prefetch_layers, d2h_gbps, h2d_gbps, bidir_gbps, fixed_bytes, turn_ms, "
       "predicted_peak_bytes, predicted_peak_no_swap_bytes, predicted_exposed_ms, summary, "
       "free_lag_layers, ops, min_bytes, recompute_ops, recompute_ms_source) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, "
       "?19, ?20, ?21)"},
      {&m_stmts.insertSwapPlanLayer,
       "INSERT OR REPLACE INTO swap_plan_layer(plan, layer, forward_ms, backward_ms, other_bytes, "
       "recompute_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"},
      {&m_stmts.insertSwapPlanTensor,
       "INSERT OR REPLACE INTO swap_plan_tensor(plan, idx, layer, op, bytes, swapped, reason) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"},
      {&m_stmts.insertSwapEvent,
       "INSERT INTO swap_event(run, step, rank, layer, op, bytes, to_host, start_ns, end_ns, "
       "needed_ns, stall_ns, simulated) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"},
      {&m_stmts.upsertSwapStep,
       "INSERT OR REPLACE INTO swap_step(run, step, rank, hbm_peak_bytes, hbm_peak_no_swap_bytes, "
       "pinned_peak_bytes, pinned_capacity_bytes, offloads, reloads, late_reloads, "
       "swapped_bytes, copy_ms, exposed_ms, simulated) "
       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"},
  };
  for (const auto& [statement, sql] : statements) {
    MOEWB_ASSIGN_OR_RETURN(*statement, Statement::prepare(m_db, sql));
  }
  return Status::ok();
}

// ---- caller side -------------------------------------------------------------------------

void SqliteTraceWriter::addSwapPlan(RunId run, const SwapPlanRow& plan) {
  push(std::make_unique<SwapPlanOp>(SwapPlanOp{run, plan}));
}
void SqliteTraceWriter::addSwapEvent(RunId run, const SwapEventRow& event) {
  push(SwapEventOp{run, event});
}
void SqliteTraceWriter::addSwapStep(RunId run, const SwapStepRow& step) {
  push(std::make_unique<SwapStepOp>(SwapStepOp{run, step}));
}

// ---- writer thread -----------------------------------------------------------------------

Status SqliteTraceWriter::applyRow(const SwapEventOp& op) {
  const SwapEventRow& r = op.row;
  MOEWB_RETURN_IF_ERROR(m_stmts.insertSwapEvent.bindAll(
      op.run.value, r.step, r.rank, r.layer, r.op, r.bytes, int64_t(r.toHost ? 1 : 0), r.startNs,
      r.endNs, r.neededNs, r.stallNs, int64_t(r.simulated ? 1 : 0)));
  MOEWB_RETURN_IF_ERROR(m_stmts.insertSwapEvent.run());
  int64_t durNs = 0;
  if (__builtin_sub_overflow(r.endNs, r.startNs, &durNs)) durNs = INT64_MAX;
  if (durNs > m_maxSwapDurNs) {
    m_maxSwapDurNs = std::max<int64_t>(durNs, 0);
    m_maxSwapDurDirty = true;
  }
  return Status::ok();
}

Status SqliteTraceWriter::applyRow(const SwapPlanOp& op) {
  const SwapPlanRow& p = op.row;
  // Recompute times are stored with their source, or neither (source '', times 0: unknown).
  const bool recomputeKnown = !p.layerRecomputeMs.empty() && !p.recomputeMsSource.empty();
  const std::string recomputeSource = recomputeKnown ? p.recomputeMsSource : "";
  MOEWB_RETURN_IF_ERROR(m_stmts.insertSwapPlan.bindAll(
      op.run.value, p.step, p.rank, p.mode, p.hbmTargetBytes, p.pinnedBudgetBytes,
      p.prefetchLayers, p.d2hGbps, p.h2dGbps, p.bidirGbps, p.fixedBytes, p.turnMs,
      p.predictedPeakBytes, p.predictedPeakNoSwapBytes, p.predictedExposedMs, p.summary,
      p.freeLagLayers, p.ops, p.minBytes, p.recomputeOps, recomputeSource));
  MOEWB_RETURN_IF_ERROR(m_stmts.insertSwapPlan.run());
  const int64_t planId = sqlite3_last_insert_rowid(m_db.handle());
  const size_t layers =
      std::max({p.layerForwardMs.size(), p.layerBackwardMs.size(), p.layerOtherBytes.size(),
                recomputeKnown ? p.layerRecomputeMs.size() : 0});
  for (size_t l = 0; l < layers; ++l) {
    const double forwardMs = l < p.layerForwardMs.size() ? p.layerForwardMs[l] : 0.0;
    const double backwardMs = l < p.layerBackwardMs.size() ? p.layerBackwardMs[l] : 0.0;
    const int64_t otherBytes = l < p.layerOtherBytes.size() ? p.layerOtherBytes[l] : 0;
    const double recomputeMs =
        recomputeKnown && l < p.layerRecomputeMs.size() ? p.layerRecomputeMs[l] : 0.0;
    MOEWB_RETURN_IF_ERROR(m_stmts.insertSwapPlanLayer.bindAll(planId, int64_t(l), forwardMs,
                                                              backwardMs, otherBytes, recomputeMs));
    MOEWB_RETURN_IF_ERROR(m_stmts.insertSwapPlanLayer.run());
  }
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const SwapPlanTensorRow& t = p.tensors[i];
    MOEWB_RETURN_IF_ERROR(m_stmts.insertSwapPlanTensor.bindAll(
        planId, int64_t(i), t.layer, t.op, t.bytes, int64_t(t.swapped ? 1 : t.recomputed ? 2 : 0),
        t.reason));
    MOEWB_RETURN_IF_ERROR(m_stmts.insertSwapPlanTensor.run());
  }
  return Status::ok();
}

Status SqliteTraceWriter::applyRow(const SwapStepOp& op) {
  const SwapStepRow& s = op.row;
  MOEWB_RETURN_IF_ERROR(m_stmts.upsertSwapStep.bindAll(
      op.run.value, s.step, s.rank, s.hbmPeakBytes, s.hbmPeakNoSwapBytes, s.pinnedPeakBytes,
      s.pinnedCapacityBytes, s.offloads, s.reloads, s.lateReloads, s.swappedBytes, s.copyMs,
      s.exposedMs, int64_t(s.simulated ? 1 : 0)));
  return m_stmts.upsertSwapStep.run();
}

}  // namespace moewb::storage::detail
