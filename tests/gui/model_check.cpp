// ModelCheck: QAbstractItemModelTester with failures collected instead of printed.
#include "model_check.h"

#include <QMutex>

namespace moewb::gui::testing {

namespace {
QMutex g_mutex;
QStringList g_failures;

void collect(QtMsgType type, const QMessageLogContext& context, const QString& message) {
  const bool fromTester = context.category && QByteArray(context.category) == "qt.modeltest";
  if (type >= QtWarningMsg && (fromTester || message.contains(QLatin1String("FAIL!")))) {
    QMutexLocker lock(&g_mutex);
    g_failures << message;
  }
}
}  // namespace

ModelCheck::ModelCheck(QAbstractItemModel* model) {
  {
    QMutexLocker lock(&g_mutex);
    g_failures.clear();
  }
  m_previous = qInstallMessageHandler(collect);
  m_tester = std::make_unique<QAbstractItemModelTester>(
      model, QAbstractItemModelTester::FailureReportingMode::Warning);
}

ModelCheck::~ModelCheck() {
  m_tester.reset();
  qInstallMessageHandler(m_previous);
}

QStringList ModelCheck::failures() const {
  QMutexLocker lock(&g_mutex);
  return g_failures;
}

}  // namespace moewb::gui::testing
