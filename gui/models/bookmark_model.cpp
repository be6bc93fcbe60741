// BookmarkModel: bookmarks of one trace, saved in the Qt settings (see bookmark_model.h).
#include "moewb/gui/bookmark_model.h"

#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSettings>
#include <QUrl>

#include "moewb/base/units.h"

namespace moewb::gui {

namespace {

constexpr char kOrganisation[] = "MoE Workbench";
constexpr char kApplication[] = "moewb-gui";

// ns as JSON strings: a double would round times past 2^53 ns.
QJsonValue nsValue(int64_t ns) {
  return QString::number(ns);
}

int64_t nsOf(const QJsonObject& o, const char* key, int64_t fallback) {
  bool ok = false;
  const qlonglong v = o.value(QLatin1String(key)).toString().toLongLong(&ok);
  return ok ? int64_t(v) : fallback;
}

}  // namespace

BookmarkModel::BookmarkModel(QObject* parent) : QAbstractListModel(parent) {}

QString BookmarkModel::settingsKey(const QString& tracePath) {
  const QFileInfo info(tracePath);
  const QString canonical = info.canonicalFilePath();
  const QString path = canonical.isEmpty() ? info.absoluteFilePath() : canonical;
  return QStringLiteral("bookmarks/") + QString::fromLatin1(QUrl::toPercentEncoding(path));
}

void BookmarkModel::load(const QString& tracePath) {
  beginResetModel();
  m_path = tracePath;
  m_bookmarks.clear();
  if (!tracePath.isEmpty()) {
    QSettings settings{QLatin1String(kOrganisation), QLatin1String(kApplication)};
    const QByteArray json = settings.value(settingsKey(tracePath)).toString().toUtf8();
    const QJsonDocument doc = QJsonDocument::fromJson(json);
    for (const QJsonValue& v : doc.array()) {
      const QJsonObject o = v.toObject();
      Bookmark b;
      b.name = o.value(QLatin1String("name")).toString();
      b.startNs = nsOf(o, "start_ns", 0);
      b.endNs = nsOf(o, "end_ns", b.startNs);
      b.windowStartNs = nsOf(o, "window_start_ns", b.startNs);
      b.windowEndNs = nsOf(o, "window_end_ns", b.endNs);
      b.step = nsOf(o, "step", -1);
      if (b.name.isEmpty() || b.endNs < b.startNs) continue;  // not one of ours
      m_bookmarks.push_back(std::move(b));
    }
  }
  endResetModel();
}

int BookmarkModel::add(const Bookmark& bookmark) {
  const int row = int(m_bookmarks.size());
  beginInsertRows({}, row, row);
  m_bookmarks.push_back(bookmark);
  endInsertRows();
  save();
  return row;
}

bool BookmarkModel::remove(int row) {
  if (row < 0 || size_t(row) >= m_bookmarks.size()) return false;
  beginRemoveRows({}, row, row);
  m_bookmarks.erase(m_bookmarks.begin() + row);
  endRemoveRows();
  save();
  return true;
}

void BookmarkModel::save() const {
  if (m_path.isEmpty()) return;
  QJsonArray array;
  for (const Bookmark& b : m_bookmarks) {
    QJsonObject o;
    o.insert(QLatin1String("name"), b.name);
    o.insert(QLatin1String("start_ns"), nsValue(b.startNs));
    o.insert(QLatin1String("end_ns"), nsValue(b.endNs));
    o.insert(QLatin1String("window_start_ns"), nsValue(b.windowStartNs));
    o.insert(QLatin1String("window_end_ns"), nsValue(b.windowEndNs));
    o.insert(QLatin1String("step"), nsValue(b.step));
    array.append(o);
  }
  QSettings settings{QLatin1String(kOrganisation), QLatin1String(kApplication)};
  const QString key = settingsKey(m_path);
  if (m_bookmarks.empty()) {
    settings.remove(key);
  } else {
    settings.setValue(key, QString::fromUtf8(QJsonDocument(array).toJson(QJsonDocument::Compact)));
  }
  settings.sync();
}

int BookmarkModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(m_bookmarks.size());
}

QVariant BookmarkModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || size_t(index.row()) >= m_bookmarks.size()) return {};
  const Bookmark& b = m_bookmarks[size_t(index.row())];
  if (role == Qt::DisplayRole) return b.name;
  if (role == Qt::ToolTipRole) {
    QString where = b.endNs > b.startNs
                        ? tr("range of %1").arg(QString::fromStdString(
                              formatDurationNs(b.endNs - b.startNs)))
                        : tr("point");
    if (b.step >= 0) where += tr(", step %1").arg(b.step);
    return tr("%1 (%2); click to zoom there").arg(b.name, where);
  }
  return {};
}

}  // namespace moewb::gui
