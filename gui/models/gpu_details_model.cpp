// GpuDetailsModel: the selected GPU slice's launch details and expert load as field/value rows.
#include "moewb/gui/gpu_details_model.h"

#include <QFont>

#include "moewb/base/units.h"

namespace moewb::gui {

namespace {

QString dur(int64_t ns) {
  return QString::fromStdString(formatDurationNs(ns));
}

QString bytes(int64_t n) {
  return QString::fromStdString(formatBytes(n));
}

QString dims(int32_t x, int32_t y, int32_t z) {
  return QStringLiteral("%1 × %2 × %3").arg(x).arg(y).arg(z);
}

}  // namespace

QString memcpyKindName(int32_t copyKind) {
  switch (copyKind) {
    case 1:
      return QStringLiteral("HtoD");
    case 2:
      return QStringLiteral("DtoH");
    case 3:
      return QStringLiteral("HtoA");
    case 4:
      return QStringLiteral("AtoH");
    case 5:
      return QStringLiteral("AtoA");
    case 6:
      return QStringLiteral("AtoD");
    case 7:
      return QStringLiteral("DtoA");
    case 8:
      return QStringLiteral("DtoD");
    case 9:
      return QStringLiteral("HtoH");
    case 10:
      return QStringLiteral("PtoP");
    default:
      return QStringLiteral("kind %1").arg(copyKind);
  }
}

GpuDetailsModel::GpuDetailsModel(QObject* parent) : QAbstractTableModel(parent) {}

void GpuDetailsModel::addKernel(const storage::GpuKernelRow& k) {
  addSection(tr("Launch"));
  add(tr("grid"), dims(k.gridX, k.gridY, k.gridZ));
  add(tr("block"), dims(k.blockX, k.blockY, k.blockZ));
  const int64_t threads = int64_t(k.gridX) * k.gridY * k.gridZ * k.blockX * k.blockY * k.blockZ;
  add(tr("threads"), QString::number(threads));
  add(tr("registers / thread"), QString::number(k.registersPerThread));
  add(tr("shared memory / block"),
      tr("%1 static + %2 dynamic").arg(bytes(k.staticSharedBytes), bytes(k.dynamicSharedBytes)));
  if (!k.shortName.empty()) add(tr("short name"), QString::fromStdString(k.shortName));
  if (!k.mangledName.empty()) add(tr("mangled name"), QString::fromStdString(k.mangledName));
}

void GpuDetailsModel::addLoad(const storage::LayerLoad& load) {
  addSection(tr("Expert load · step %1 · layer %2").arg(load.step).arg(load.layer));
  add(tr("tokens routed"), QString::number(load.totalTokens));
  add(tr("max / mean"), QString::number(load.maxOverMean, 'f', 2));
  add(tr("hottest expert"),
      tr("%1 (%2 tokens)")
          .arg(load.hottestExpert)
          .arg(load.tokens.empty() ? 0 : load.tokens[size_t(load.hottestExpert)]));
  int64_t dropped = 0;
  for (int64_t d : load.dropped) dropped += d;
  if (dropped > 0) add(tr("dropped"), QString::number(dropped));
  for (size_t e = 0; e < load.tokens.size(); ++e) {
    QString value = QString::number(load.tokens[e]);
    if (load.dropped[e] > 0) value += tr(" (%1 dropped)").arg(load.dropped[e]);
    add(tr("expert %1").arg(e), value);
  }
}

void GpuDetailsModel::setDetails(const std::optional<storage::GpuSliceDetails>& details,
                                 const std::optional<storage::LayerLoad>& load, int64_t originNs) {
  beginResetModel();
  m_rows.clear();
  if (details) {
    const storage::SliceRow& s = details->slice;
    addSection(QString::fromStdString(s.category.empty() ? std::string("GPU") : s.category));
    add(tr("name"), QString::fromStdString(s.name));
    add(tr("duration"), dur(s.durNs));
    add(tr("start"), QStringLiteral("+") + dur(s.startNs - originNs));
    add(tr("stream"), QString::fromStdString(details->track.name));
    if (details->kernel) {
      add(tr("device / stream id"),
          QStringLiteral("%1 / %2").arg(details->kernel->deviceId).arg(details->kernel->streamId));
      addKernel(*details->kernel);
    } else if (details->memcpy) {
      addSection(tr("Copy"));
      add(tr("bytes"), bytes(details->memcpy->bytes));
      add(tr("kind"), memcpyKindName(details->memcpy->copyKind));
      if (s.durNs > 0) {
        add(tr("bandwidth"), QStringLiteral("%1 GB/s").arg(
                                 double(details->memcpy->bytes) / double(s.durNs), 0, 'f', 2));
      }
    } else if (details->memset) {
      addSection(tr("Memset"));
      add(tr("bytes"), bytes(details->memset->bytes));
      add(tr("value"), QString::number(details->memset->value));
    }
    addSection(tr("Attribution"));
    add(tr("step"), s.step >= 0 ? QString::number(s.step) : tr("none"));
    add(tr("layer"), s.layer >= 0 ? QString::number(s.layer) : tr("whole model"));
    const std::string phase = details->phase();
    add(tr("phase"), phase.empty() ? tr("unknown") : QString::fromStdString(phase));
    add(tr("correlation id"), s.correlationId ? QString::number(s.correlationId) : tr("none"));
    if (details->apiCall) {
      const storage::SliceRow& call = *details->apiCall;
      QString text = tr("%1, %2, %3 before the work")
                         .arg(QString::fromStdString(call.name), dur(call.durNs),
                              dur(s.startNs - call.startNs));
      add(tr("launched by"), text);
      if (details->apiDetails) {
        add(tr("API thread"), QString::number(details->apiDetails->threadId));
      }
    } else {
      add(tr("launched by"), tr("not captured"));
    }
    if (load) addLoad(*load);
  }
  endResetModel();
}

QString GpuDetailsModel::value(const QString& field) const {
  for (const Row& r : m_rows) {
    if (r.field == field) return r.value;
  }
  return {};
}

int GpuDetailsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(m_rows.size());
}

int GpuDetailsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant GpuDetailsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(m_rows.size()) || index.column() >= kColumnCount)
    return {};
  const Row& r = m_rows[size_t(index.row())];
  switch (role) {
    case Qt::DisplayRole:
    case Qt::ToolTipRole:
      return index.column() == kField ? r.field : r.value;
    case Qt::FontRole:
      if (r.section) {
        QFont bold;
        bold.setBold(true);
        return bold;
      }
      return {};
    case kSectionRole:
      return r.section;
    default:
      return {};
  }
}

QVariant GpuDetailsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole || orientation != Qt::Horizontal) return {};
  return section == kField ? tr("Field") : section == kValue ? tr("Value") : QVariant();
}

}  // namespace moewb::gui
