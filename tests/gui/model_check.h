// ModelCheck: attaches a QAbstractItemModelTester to a model for the lifetime of a test and
// counts the failures it reports (Warning mode, captured by a message handler), so a broken model
// fails the test with the tester's message instead of aborting the whole suite.
#pragma once

#include <QAbstractItemModelTester>
#include <QString>
#include <QStringList>
#include <memory>

namespace moewb::gui::testing {

class ModelCheck {
 public:
  explicit ModelCheck(QAbstractItemModel* model);
  ~ModelCheck();
  ModelCheck(const ModelCheck&) = delete;
  ModelCheck& operator=(const ModelCheck&) = delete;

  // Messages of the failures reported so far (empty = the model passed every check).
  QStringList failures() const;

 private:
  std::unique_ptr<QAbstractItemModelTester> m_tester;
  QtMessageHandler m_previous = nullptr;
};

}  // namespace moewb::gui::testing
