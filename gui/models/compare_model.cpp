// loadComparison and CompareModel (compare_model.h).
#include "moewb/gui/compare_model.h"

#include <QColor>
#include <cmath>
#include <memory>

#include "moewb/base/units.h"

namespace moewb::gui {
namespace {

QString formatValue(double v, CompareModel::Unit unit, int decimals) {
  switch (unit) {
    case CompareModel::Unit::kNs:
      return QString::fromStdString(formatDurationNs(int64_t(std::llround(v))));
    case CompareModel::Unit::kCount:
      return QString::fromStdString(formatCount(v));
    case CompareModel::Unit::kPlain:
      return QString::number(v, 'f', decimals);
  }
  return {};
}

}  // namespace

Result<ComparisonResult> loadComparison(const CompareRequest& request) {
  MOEWB_ASSIGN_OR_RETURN(auto readerA, storage::TraceReader::open(request.pathA.toStdString()));
  std::unique_ptr<storage::TraceReader> readerB;
  if (!request.pathB.isEmpty()) {
    MOEWB_ASSIGN_OR_RETURN(readerB, storage::TraceReader::open(request.pathB.toStdString()));
  }
  ComparisonResult out;
  storage::SampleOptions a = request.a, b = request.b;
  if (request.splitAtPatch) {
    MOEWB_ASSIGN_OR_RETURN(const storage::PatchSplit split, storage::findPatchSplit(*readerA));
    a.range = {0, split.step};
    b.range = {split.step, split.nextStep.value_or(storage::kOpenEnd)};
    out.splitNote = QStringLiteral("split at step %1: %2")
                        .arg(split.step)
                        .arg(QString::fromStdString(split.description));
  }
  MOEWB_ASSIGN_OR_RETURN(out.a, storage::sampleTrace(*readerA, a));
  MOEWB_ASSIGN_OR_RETURN(out.b, storage::sampleTrace(readerB ? *readerB : *readerA, b));
  out.comparison = storage::compareSamples(out.a, out.b);
  return out;
}

CompareModel::CompareModel(QObject* parent) : QAbstractTableModel(parent) {}

void CompareModel::reset(std::vector<Row> rows) {
  beginResetModel();
  m_rows = std::move(rows);
  endResetModel();
}

void CompareModel::clear() {
  reset({});
}

void CompareModel::setNames(const storage::SampleComparison& comparison) {
  std::vector<Row> rows;
  for (const storage::NameDelta& n : comparison.names) {
    Row row;
    row.kind =
        n.kind == storage::CompareKind::kKernel ? QStringLiteral("gpu") : QStringLiteral("phase");
    row.name = QString::fromStdString(n.name);
    row.delta = n.perStepNs;
    rows.push_back(std::move(row));
  }
  reset(std::move(rows));
}

void CompareModel::setSummary(const storage::SampleComparison& c) {
  const QString run = QStringLiteral("run");
  std::vector<Row> rows = {
      {run, tr("step time"), c.stepNs, Unit::kNs, false, 0},
      {run, tr("tokens/s"), c.tokensPerSecond, Unit::kCount, true, 0},
      {run, tr("loss (all steps)"), c.loss, Unit::kPlain, false, 4},
      {run, tr("loss at end (last 10%)"), c.lossEnd, Unit::kPlain, false, 4},
  };
  if (!c.layers.empty()) {
    const QString imbalance = QStringLiteral("imbalance");
    rows.push_back({imbalance, tr("all layers (max/mean)"), c.imbalance, Unit::kPlain, false, 3});
    for (const storage::LayerDelta& l : c.layers) {
      rows.push_back(
          {imbalance, tr("layer %1").arg(l.layer), l.maxOverMean, Unit::kPlain, false, 3});
    }
  }
  reset(std::move(rows));
}

QColor CompareModel::deltaColor(int row) const {
  if (row < 0 || row >= int(m_rows.size())) return {};
  const Row& r = m_rows[size_t(row)];
  if (!r.delta.significant || r.delta.delta == 0) return {};
  const bool better = (r.delta.delta > 0) == r.higherIsBetter;
  // Light shades, readable on the dark theme.
  return better ? QColor(0x5c, 0xc4, 0x6e) : QColor(0xff, 0x6b, 0x6b);
}

int CompareModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(m_rows.size());
}

int CompareModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QString CompareModel::text(const Row& row, int column) const {
  const storage::MetricDelta& d = row.delta;
  auto value = [&](double v) { return formatValue(v, row.unit, row.decimals); };
  auto side = [&](const storage::MetricStats& s) {
    if (s.n == 0) return QStringLiteral("-");
    return value(s.mean) + QStringLiteral(" ± ") + value(s.stddev);
  };
  switch (column) {
    case kKind:
      return row.kind;
    case kName:
      return row.name;
    case kA:
      return side(d.a);
    case kB:
      return side(d.b);
    case kDelta:
      return (d.delta > 0 ? QStringLiteral("+") : QString()) + value(d.delta);
    case kRatio:
      if (d.a.mean == 0) return d.b.mean == 0 ? QStringLiteral("1.00x") : tr("new");
      return QStringLiteral("%1x").arg(d.ratio, 0, 'f', 2);
    case kNoise:
      return QStringLiteral("± ") + value(d.noise);
    case kFlag:
      return d.significant ? QStringLiteral("*") : QString();
    default:
      return {};
  }
}

QVariant CompareModel::rawValue(const Row& row, int column) const {
  const storage::MetricDelta& d = row.delta;
  switch (column) {
    case kKind:
      return row.kind;
    case kName:
      return row.name;
    case kA:
      return d.a.mean;
    case kB:
      return d.b.mean;
    case kDelta:
      return std::fabs(d.delta);
    case kRatio:
      return d.ratio;
    case kNoise:
      return d.noise;
    case kFlag:
      return d.significant ? 1 : 0;
    default:
      return {};
  }
}

QVariant CompareModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) {
    return {};
  }
  const Row& row = m_rows[size_t(index.row())];
  switch (role) {
    case Qt::DisplayRole:
      return text(row, index.column());
    case kSortRole:
      return rawValue(row, index.column());
    case Qt::ForegroundRole: {
      const int c = index.column();
      if (c != kDelta && c != kRatio && c != kFlag) return {};
      const QColor color = deltaColor(index.row());
      return color.isValid() ? QVariant(color) : QVariant();
    }
    case Qt::ToolTipRole:
      return tr("A: %1 steps, p50 %2; B: %3 steps, p50 %4")
          .arg(row.delta.a.n)
          .arg(formatValue(row.delta.a.p50, row.unit, row.decimals))
          .arg(row.delta.b.n)
          .arg(formatValue(row.delta.b.p50, row.unit, row.decimals));
    case Qt::TextAlignmentRole:
      return index.column() <= kName ? int(Qt::AlignLeft | Qt::AlignVCenter)
                                     : int(Qt::AlignRight | Qt::AlignVCenter);
    default:
      return {};
  }
}

QVariant CompareModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) {
    return QAbstractTableModel::headerData(section, orientation, role);
  }
  switch (section) {
    case kKind:
      return tr("Kind");
    case kName:
      return tr("Name");
    case kA:
      return tr("A (mean ± sd)");
    case kB:
      return tr("B (mean ± sd)");
    case kDelta:
      return tr("Delta");
    case kRatio:
      return tr("Ratio");
    case kNoise:
      return tr("Noise");
    case kFlag:
      return tr("Sig.");
    default:
      return {};
  }
}

}  // namespace moewb::gui
