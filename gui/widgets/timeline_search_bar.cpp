// TimelineSearchBar: field, count and buttons; key handling of the field.
#include "timeline_search_bar.h"

#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QToolButton>

namespace moewb::gui {

TimelineSearchBar::TimelineSearchBar(QWidget* parent) : QFrame(parent) {
  setFrameShape(QFrame::StyledPanel);
  setAutoFillBackground(true);
  m_field = new QLineEdit;
  m_field->setPlaceholderText(tr("Find slices by name"));
  m_field->setClearButtonEnabled(true);
  m_field->setMinimumWidth(180);
  m_field->installEventFilter(this);
  m_count = new QLabel;
  m_count->setMinimumWidth(90);
  auto button = [this](const QString& text, const QString& tip) {
    auto* b = new QToolButton;
    b->setText(text);
    b->setToolTip(tip);
    b->setAutoRaise(true);
    b->setFocusPolicy(Qt::NoFocus);
    return b;
  };
  QToolButton* previous = button(QStringLiteral("\u2191"), tr("Previous match (Shift+Enter)"));
  QToolButton* next = button(QStringLiteral("\u2193"), tr("Next match (Enter, F3)"));
  QToolButton* close = button(QStringLiteral("\u2715"), tr("Close (Esc)"));
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(4, 1, 2, 1);
  layout->setSpacing(2);
  layout->addWidget(m_field);
  layout->addWidget(m_count);
  layout->addWidget(previous);
  layout->addWidget(next);
  layout->addWidget(close);
  connect(m_field, &QLineEdit::textChanged, this, &TimelineSearchBar::textChanged);
  connect(previous, &QToolButton::clicked, this, &TimelineSearchBar::previousRequested);
  connect(next, &QToolButton::clicked, this, &TimelineSearchBar::nextRequested);
  connect(close, &QToolButton::clicked, this, &TimelineSearchBar::closeRequested);
}

void TimelineSearchBar::setCount(int current, int total) {
  if (m_field->text().isEmpty()) {
    m_count->clear();
  } else if (total == 0) {
    m_count->setText(tr("no matches"));
  } else if (current < 0) {
    m_count->setText(total == 1 ? tr("1 match") : tr("%1 matches").arg(total));
  } else {
    m_count->setText(tr("%1 of %2").arg(current + 1).arg(total));
  }
}

QString TimelineSearchBar::countText() const {
  return m_count->text();
}

bool TimelineSearchBar::eventFilter(QObject* watched, QEvent* event) {
  if (watched != m_field || event->type() != QEvent::KeyPress) {
    return QFrame::eventFilter(watched, event);
  }
  auto* key = static_cast<QKeyEvent*>(event);
  const bool shift = key->modifiers() & Qt::ShiftModifier;
  switch (key->key()) {
    case Qt::Key_Return:
    case Qt::Key_Enter:
    case Qt::Key_F3:
      emit shift ? previousRequested() : nextRequested();
      return true;
    case Qt::Key_Escape:
      emit closeRequested();
      return true;
    default:
      return false;
  }
}

}  // namespace moewb::gui
