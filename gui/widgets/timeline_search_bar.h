// TimelineSearchBar: the timeline's Ctrl-F bar (a child of TimelineView, floating over the top
// right of the ruler): a text field, the "k of n" count, previous / next buttons and a close
// button. Keys in the field: Enter or F3 next, Shift+Enter or Shift+F3 previous, Esc closes.
// It only reports what the user asked for; the view searches and moves.
#pragma once

#include <QFrame>
#include <QString>

class QLabel;
class QLineEdit;
class QToolButton;

namespace moewb::gui {

class TimelineSearchBar : public QFrame {
  Q_OBJECT

 public:
  explicit TimelineSearchBar(QWidget* parent = nullptr);

  QLineEdit* field() const { return m_field; }
  // Shows "k of n" (current is 0-based, -1 = none: "n matches"), "no matches" for a text that
  // found nothing, nothing for an empty text.
  void setCount(int current, int total);
  QString countText() const;

 signals:
  void textChanged(const QString& text);
  void nextRequested();
  void previousRequested();
  void closeRequested();

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  QLineEdit* m_field = nullptr;
  QLabel* m_count = nullptr;
};

}  // namespace moewb::gui
