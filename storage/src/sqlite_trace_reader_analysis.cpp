// The reader's aggregating queries: phase totals (per slice name) and per-layer expert load
// imbalance. Both scan their table once (O(rows)); SQL does the grouping, C++ the ratios.
#include <map>

#include "sqlite_trace_reader.h"

namespace moewb::storage::detail {

namespace {

constexpr const char* kPhaseTotalsSql =
    "SELECT coalesce(n.text, ''), coalesce(c.text, ''), count(*), sum(s.dur_ns), max(s.dur_ns) "
    "FROM slice s LEFT JOIN string n ON n.id = s.name LEFT JOIN string c ON c.id = s.category "
    "WHERE ?1 = '' OR c.text = ?1 "
    "GROUP BY s.name, s.category ORDER BY sum(s.dur_ns) DESC, n.text, c.text";

// Per (layer, step): the largest per-expert token count (summed over ranks), the total, and the
// number of experts the layer has rows for anywhere in the file.
constexpr const char* kLayerStepLoadSql =
    "WITH per_expert AS (SELECT layer, step, expert, sum(tokens) AS tokens FROM expert_load "
    "                    GROUP BY layer, step, expert), "
    "     experts AS (SELECT layer, count(DISTINCT expert) AS n FROM expert_load GROUP BY layer) "
    "SELECT p.layer, p.step, max(p.tokens), sum(p.tokens), e.n "
    "FROM per_expert p JOIN experts e ON e.layer = p.layer "
    "GROUP BY p.layer, p.step ORDER BY p.layer, p.step";

// Per (layer, expert): tokens over all steps and ranks.
constexpr const char* kLayerExpertTotalsSql =
    "SELECT layer, expert, sum(tokens) FROM expert_load GROUP BY layer, expert "
    "ORDER BY layer, expert";

struct RatioAccumulator {
  double sum = 0;
  int64_t steps = 0;
  double last = 0;
};

struct HottestExpert {
  int32_t expert = 0;
  int64_t tokens = -1;
  int64_t layerTotal = 0;
};

}  // namespace

Result<std::vector<PhaseTotal>> SqliteTraceReader::phaseTotals(const std::string& category) {
  return queryRows(
      m_db, kPhaseTotalsSql,
      [](const Statement& s) {
        PhaseTotal total;
        total.name = s.columnText(0);
        total.category = s.columnText(1);
        total.count = s.columnInt(2);
        total.totalNs = s.columnInt(3);
        total.maxNs = s.columnInt(4);
        return total;
      },
      category);
}

namespace {

// Per layer: max/mean of per-expert tokens, averaged over the steps that routed tokens.
Result<std::map<int32_t, RatioAccumulator>> readStepRatios(Database& db) {
  std::map<int32_t, RatioAccumulator> ratios;
  MOEWB_RETURN_IF_ERROR(queryEachRow(db, kLayerStepLoadSql, [&](const Statement& s) {
    const int64_t maxTokens = s.columnInt(2);
    const int64_t totalTokens = s.columnInt(3);
    const int64_t experts = s.columnInt(4);
    RatioAccumulator& acc = ratios[s.columnInt32(0)];
    if (totalTokens <= 0 || experts <= 0) return;
    const double ratio = double(maxTokens) / (double(totalTokens) / double(experts));
    acc.sum += ratio;
    acc.last = ratio;
    ++acc.steps;
  }));
  return ratios;
}

// Per layer: the expert with the most tokens over all steps (ties: the lower id) and the total.
// `clamped` counts layer totals that overflowed int64 (token counts come from the file).
Result<std::map<int32_t, HottestExpert>> readHottestExperts(Database& db, int64_t* clamped) {
  std::map<int32_t, HottestExpert> hottest;
  MOEWB_RETURN_IF_ERROR(queryEachRow(db, kLayerExpertTotalsSql, [&](const Statement& s) {
    HottestExpert& hot = hottest[s.columnInt32(0)];
    const int64_t tokens = s.columnInt(2);
    hot.layerTotal = saturatingAdd(hot.layerTotal, tokens, clamped);
    if (tokens > hot.tokens) {  // rows come in expert order, so ties keep the lower id
      hot.tokens = tokens;
      hot.expert = s.columnInt32(1);
    }
  }));
  return hottest;
}

}  // namespace

Result<std::vector<LayerImbalance>> SqliteTraceReader::layerImbalance() {
  return inReadTransaction<std::vector<LayerImbalance>>(
      [&]() -> Result<std::vector<LayerImbalance>> {
        MOEWB_ASSIGN_OR_RETURN(const auto ratios, readStepRatios(m_db));
        int64_t clamped = 0;
        MOEWB_ASSIGN_OR_RETURN(auto hottest, readHottestExperts(m_db, &clamped));
        countClamped(clamped);
        std::vector<LayerImbalance> out;
        for (const auto& [layer, acc] : ratios) {
          LayerImbalance row;
          row.layer = layer;
          row.meanMaxOverMean = acc.steps ? acc.sum / double(acc.steps) : 0.0;
          row.lastMaxOverMean = acc.last;
          const HottestExpert& hot = hottest[layer];
          row.hottestExpert = hot.expert;
          row.hottestShare = hot.layerTotal > 0 ? double(hot.tokens) / double(hot.layerTotal) : 0;
          out.push_back(row);
        }
        return out;
      });
}

}  // namespace moewb::storage::detail
