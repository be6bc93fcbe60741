// BookmarkModel: the user's bookmarks of one trace (the "Bookmarks" dock), kept beside the trace
// in the Qt settings, never in the trace file (it may be read-only or still being written).
//
// A bookmark is a name, a marked time span (a point when startNs == endNs, or a range) and the
// timeline window shown when it was made, all in the trace's ns. The list of a trace is stored
// as one JSON array under settingsKey(path) (organisation "MoE Workbench", application
// "moewb-gui"; the path made absolute and canonical, so two spellings of one file share their
// bookmarks) and written at every change; load() reads it back. A value that is not such an
// array is ignored (no bookmarks). Costs O(bookmarks) per change. GUI thread only.
#pragma once

#include <QAbstractListModel>
#include <QString>
#include <cstdint>
#include <vector>

namespace moewb::gui {

struct Bookmark {
  QString name;
  int64_t startNs = 0;        // the marked time (a point) or range start, trace ns
  int64_t endNs = 0;          // == startNs for a point
  int64_t windowStartNs = 0;  // the timeline window when it was made
  int64_t windowEndNs = 0;
  int64_t step = -1;          // the step at startNs, -1 when none
  bool operator==(const Bookmark&) const = default;
};

class BookmarkModel : public QAbstractListModel {
  Q_OBJECT

 public:
  explicit BookmarkModel(QObject* parent = nullptr);

  // The settings key of `tracePath`'s bookmarks: "bookmarks/" + the canonical absolute path,
  // percent-encoded (so the path's slashes make no settings groups).
  static QString settingsKey(const QString& tracePath);
  // Replaces the list with the bookmarks saved for `tracePath` (empty path: none) and makes it
  // the trace later changes are saved for (model reset).
  void load(const QString& tracePath);
  // Appends `bookmark` and saves the list (rowsInserted). Returns its row.
  int add(const Bookmark& bookmark);
  // Removes row `row` and saves the list; false for a bad row.
  bool remove(int row);
  const std::vector<Bookmark>& bookmarks() const { return m_bookmarks; }
  QString tracePath() const { return m_path; }

  int rowCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;

 private:
  void save() const;

  QString m_path;  // the trace the list belongs to ("" = none: nothing saved)
  std::vector<Bookmark> m_bookmarks;
};

}  // namespace moewb::gui
