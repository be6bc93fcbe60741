// ParallelModel: what the Parallelism dock shows about a parallel trace (world size > 1): the
// all-to-all traffic matrix, routed rows and expert load per rank, and the collectives of one
// step matched across their peers, for a selection of step (or all), layer (or all) and a2a
// phase (or all).
//
// It follows a TraceDocument (setDocument): on opened it opens its own read-only TraceReader on
// the same file (a second WAL connection, so the document's reader is untouched), on refreshed it
// re-reads the overview and, when new steps arrived, the three tables; on closed it empties them.
// Selection: the step defaults to the last step with collectives and follows new steps of a live
// run while it is on the last one; the layer defaults to all; the phase to the first phase
// present ("dispatch"). The collectives table shows the selected step (the last step when "all
// steps" is selected). Each change re-reads through the reader's indexed queries (costs on
// storage::TraceReader); "all steps" scans a2a_traffic and expert_load once.
// Errors: read errors come back as Status and through failed(); the tables keep their last
// contents. GUI thread only.
#pragma once

#include <QObject>
#include <QString>
#include <memory>
#include <optional>

#include "moewb/base/status.h"
#include "moewb/gui/parallel_collective_model.h"
#include "moewb/gui/parallel_rank_model.h"
#include "moewb/gui/parallel_traffic_model.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::gui {

class TraceDocument;

class ParallelModel : public QObject {
  Q_OBJECT

 public:
  explicit ParallelModel(QObject* parent = nullptr);
  ~ParallelModel() override;

  // Follows `document` (not owned; may be null) and loads what it has open now.
  void setDocument(TraceDocument* document);
  // Opens `path` and loads it. Errors: the reader's Status (the model is then closed).
  Status open(const QString& path);
  // Re-reads the overview; re-reads the tables when new steps arrived (or `force`).
  Status refresh(bool force = false);
  // Empties everything.
  void close();

  bool isOpen() const { return m_reader != nullptr; }
  // True when the open trace's run has world size > 1.
  bool isParallel() const { return isOpen() && m_overview.worldSize > 1; }
  const storage::ParallelOverview& overview() const { return m_overview; }

  // Selection. nullopt = all steps / all layers; "" = all phases. Each re-reads the tables.
  Status setStep(std::optional<int64_t> step);
  Status setLayer(std::optional<int32_t> layer);
  Status setPhase(const std::string& phase);
  const storage::ParallelFilter& filter() const { return m_filter; }
  // The step whose collectives are shown (-1 when there is none).
  int64_t collectiveStep() const;

  // The collective whose slice starts at `startNs` on comm track `track`, matched across its
  // peers; nullopt when none is there or nothing is open. Errors: read errors.
  Result<std::optional<storage::MatchedCollective>> collectiveAt(TrackId track, int64_t startNs);

  ParallelTrafficModel* trafficModel() { return &m_traffic; }
  ParallelRankModel* rankModel() { return &m_ranks; }
  ParallelCollectiveModel* collectiveModel() { return &m_collectives; }

 signals:
  // The overview, the selection or the tables changed (selectors and labels re-sync).
  void changed();
  // A read failed; `message` names the file and the problem.
  void failed(const QString& message);

 private:
  Status reload();
  Status fail(const Status& status);

  std::unique_ptr<storage::TraceReader> m_reader;
  TraceDocument* m_document = nullptr;
  storage::ParallelOverview m_overview;
  storage::ParallelFilter m_filter;
  bool m_followLastStep = true;  // the step selection tracks the newest step
  ParallelTrafficModel m_traffic;
  ParallelRankModel m_ranks;
  ParallelCollectiveModel m_collectives;
};

}  // namespace moewb::gui
