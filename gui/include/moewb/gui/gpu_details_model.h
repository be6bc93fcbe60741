// GpuDetailsModel: the details of the GPU slice selected in the timeline as a two-column table
// (field, value): what ran (name, kind, duration, start, stream, device), the launch geometry of
// a kernel (grid, block, threads, registers, shared memory) or the bytes and kind of a copy or
// memset, the CUDA API call that launched it (correlation id, function, duration, thread), the
// step, layer and phase it ran under, and the expert load of that step and layer (tokens per
// expert summed over ranks, max/mean, hottest expert, drops).
//
// Section rows ("Launch", "Expert load · step 12 · layer 3") have an empty value and a bold
// font (Qt::FontRole); kSectionRole tells them apart. setDetails replaces everything (model
// reset); O(fields + experts). GUI thread only.
#pragma once

#include <QAbstractTableModel>
#include <QString>
#include <optional>
#include <vector>

#include "moewb/storage/gpu_queries.h"

namespace moewb::gui {

class GpuDetailsModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { kField, kValue, kColumnCount };
  // bool: whether the row is a section heading.
  static constexpr int kSectionRole = Qt::UserRole + 1;

  explicit GpuDetailsModel(QObject* parent = nullptr);

  // Shows `details` (nullopt clears the table), with start times relative to `originNs` and the
  // expert load of its step and layer when `load` is given.
  void setDetails(const std::optional<storage::GpuSliceDetails>& details,
                  const std::optional<storage::LayerLoad>& load, int64_t originNs);
  void clear() { setDetails(std::nullopt, std::nullopt, 0); }

  bool isEmpty() const { return m_rows.empty(); }
  // Value of the first row whose field is `field`, "" when there is none (for tests and copy).
  QString value(const QString& field) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  struct Row {
    QString field;
    QString value;
    bool section = false;
  };
  void addSection(const QString& title) { m_rows.push_back({title, {}, true}); }
  void add(const QString& field, const QString& value) { m_rows.push_back({field, value, false}); }
  void addKernel(const storage::GpuKernelRow& k);
  void addLoad(const storage::LayerLoad& load);

  std::vector<Row> m_rows;
};

// Name of a CUPTI memcpy kind ("HtoD", "DtoH", "DtoD", ...), "kind N" for others.
QString memcpyKindName(int32_t copyKind);

}  // namespace moewb::gui
