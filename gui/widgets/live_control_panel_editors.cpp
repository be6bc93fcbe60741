// LiveControlPanel editors: one row per live key (label, line edit, current value), built from
// run::TrainingRun::liveKeys() and engine::Trainer::layoutKeys() (the parallel layout, live on
// runs of several ranks) and described by engine::configKeys(), whose typed bounds flag an
// edited value outside them; edited / out-of-bounds tinting and the TOML text of edited values.
#include <QCompleter>
#include <QGridLayout>
#include <QLabel>
#include <QLineEdit>
#include <QRegularExpressionValidator>
#include <algorithm>

#include "live_control_panel.h"
#include "moewb/engine/config.h"
#include "moewb/gui/config_change_model.h"
#include "moewb/run/training_run.h"
#include "theme.h"

namespace moewb::gui {

namespace {

constexpr int kEditorWidthPx = 118;

const engine::ConfigKeyInfo* keyInfo(const std::string& key) {
  for (const engine::ConfigKeyInfo& info : engine::configKeys()) {
    if (info.key == key) return &info;
  }
  return nullptr;
}

// The typed bounds of `info` as the editor checks them; a boolean accepts "true" and "false".
KeyBounds boundsOf(const engine::ConfigKeyInfo& info) {
  KeyBounds bounds;
  bounds.min = info.min;
  bounds.minExclusive = info.minExclusive;
  bounds.max = info.max;
  bounds.integer = info.integer;
  for (const std::string& choice : info.choices) bounds.choices << QString::fromStdString(choice);
  if (info.type == "boolean") bounds.choices = {QStringLiteral("true"), QStringLiteral("false")};
  return bounds;
}

QColor editedTint() {
  return QColor(0x1f, 0x35, 0x52);
}
QColor invalidTint() {
  return QColor(0x55, 0x22, 0x2a);
}

// A TOML basic string of `text`.
std::string tomlString(const QString& text) {
  std::string out = "\"";
  for (char c : text.toStdString()) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// A stored TOML string value without its quotes (only for showing it in an editor).
QString unquote(const std::string& toml) {
  if (toml.size() >= 2 && toml.front() == '"' && toml.back() == '"') {
    return QString::fromStdString(toml.substr(1, toml.size() - 2));
  }
  return QString::fromStdString(toml);
}

}  // namespace

void LiveControlPanel::buildEditors(QGridLayout* grid) {
  int row = 0;
  auto header = [&](const QString& text, int column) {
    auto* label = new QLabel(text);
    QPalette p = label->palette();
    p.setColor(QPalette::WindowText, theme::dimText());
    label->setPalette(p);
    grid->addWidget(label, row, column);
  };
  header(tr("key"), 0);
  header(tr("new value"), 1);
  header(tr("current"), 2);
  ++row;
  std::vector<std::string> shown = run::TrainingRun::liveKeys();
  const std::vector<std::string>& layout = engine::Trainer::layoutKeys();
  shown.insert(shown.end(), layout.begin(), layout.end());
  for (const std::string& key : shown) {
    KeyEditor e;
    e.key = QString::fromStdString(key);
    e.layout = std::find(layout.begin(), layout.end(), key) != layout.end();
    const engine::ConfigKeyInfo* info = keyInfo(key);
    e.type = info ? QString::fromStdString(info->type) : QStringLiteral("string");
    e.acceptedText = info ? QString::fromStdString(info->accepted) : QString();
    e.description = info ? QString::fromStdString(info->description) : QString();
    if (info) e.bounds = boundsOf(*info);
    e.label = new QLabel(e.key);
    e.label->setToolTip(
        tr("<b>%1</b> (%2)<br>%3<br>accepted: %4")
            .arg(e.key, e.type, e.description.toHtmlEscaped(), e.acceptedText.toHtmlEscaped()));
    e.line = new QLineEdit;
    if (e.type == QLatin1String("float")) {
      static const QRegularExpression kFloat(
          QStringLiteral(R"(\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*)"));
      e.line->setValidator(new QRegularExpressionValidator(kFloat, e.line));
      e.line->setPlaceholderText(QStringLiteral("e.g. 1e-3"));
    } else if (e.type == QLatin1String("integer")) {
      static const QRegularExpression kInteger(QStringLiteral(R"(\s*[-+]?\d+\s*)"));
      e.line->setValidator(new QRegularExpressionValidator(kInteger, e.line));
    } else if (!e.bounds.choices.isEmpty()) {
      auto* completer = new QCompleter(e.bounds.choices, e.line);
      completer->setCaseSensitivity(Qt::CaseInsensitive);
      e.line->setCompleter(completer);
      e.line->setPlaceholderText(e.bounds.choices.join(QStringLiteral(" | ")));
    }
    connect(e.line, &QLineEdit::textChanged, this, &LiveControlPanel::onEditorChanged);
    connect(e.line, &QLineEdit::returnPressed, this, &LiveControlPanel::apply);
    QLineEdit* editor = e.line;
    editor->setObjectName(e.key);
    editor->setFixedWidth(kEditorWidthPx);
    editor->setAutoFillBackground(true);
    e.now = new QLabel;
    QPalette p = e.now->palette();
    p.setColor(QPalette::WindowText, theme::dimText());
    e.now->setPalette(p);
    e.now->setMinimumWidth(64);
    grid->addWidget(e.label, row, 0);
    grid->addWidget(editor, row, 1);
    grid->addWidget(e.now, row, 2);
    ++row;
    m_editors.push_back(std::move(e));
  }
  grid->setColumnStretch(0, 1);
  grid->setColumnStretch(2, 1);
  for (KeyEditor& e : m_editors) updateEditorLook(e);
}

LiveControlPanel::KeyEditor* LiveControlPanel::find(const QString& key) {
  for (KeyEditor& e : m_editors) {
    if (e.key == key) return &e;
  }
  return nullptr;
}

const LiveControlPanel::KeyEditor* LiveControlPanel::find(const QString& key) const {
  return const_cast<LiveControlPanel*>(this)->find(key);
}

QStringList LiveControlPanel::keys() const {
  QStringList out;
  for (const KeyEditor& e : m_editors) out << e.key;
  return out;
}

QLineEdit* LiveControlPanel::editor(const QString& key) const {
  const KeyEditor* e = find(key);
  return e ? e->line : nullptr;
}

bool LiveControlPanel::setValueText(const QString& key, const QString& text) {
  KeyEditor* e = find(key);
  if (!e) return false;
  e->line->setText(text);
  return true;
}

bool LiveControlPanel::isFlagged(const QString& key) const {
  const KeyEditor* e = find(key);
  return e && e->flagged;
}

QString LiveControlPanel::currentValue(const QString& key) const {
  const KeyEditor* e = find(key);
  return e ? formatConfigValue(e->currentToml) : QString();
}

void LiveControlPanel::setCurrent(KeyEditor& e, const std::string& toml, bool resetEditor) {
  const bool wasEdited = isEdited(e);
  e.currentToml = toml;
  const QString shown = formatConfigValue(toml);
  e.now->setText(shown);
  e.now->setToolTip(tr("current value of %1: %2").arg(e.key, shown));
  // An editor the user has not touched follows the value; one already holding the new value is
  // shown in the canonical form ("1e-3" -> "0.001").
  if (resetEditor || !wasEdited || !isEdited(e)) showCurrentInEditor(e);
  updateEditorLook(e);
}

void LiveControlPanel::showCurrentInEditor(KeyEditor& e) {
  m_loadingValues = true;
  if (e.type == QLatin1String("float")) {
    e.line->setText(formatConfigValue(e.currentToml));
  } else {
    e.line->setText(unquote(e.currentToml));
  }
  m_loadingValues = false;
  updateEditorLook(e);
}

bool LiveControlPanel::isEdited(const KeyEditor& e) const {
  if (e.type == QLatin1String("float") || e.type == QLatin1String("integer")) {
    const auto typed = parseNumber(e.line->text());
    const auto current = parseNumber(QString::fromStdString(e.currentToml));
    if (!typed || !current) return e.line->text().trimmed() != formatConfigValue(e.currentToml);
    return *typed != *current;
  }
  return e.line->text() != unquote(e.currentToml);
}

std::string LiveControlPanel::editedToml(const KeyEditor& e) const {
  if (!isEdited(e)) return {};
  const QString typed = e.line->text().trimmed();
  if (e.type == QLatin1String("float")) {
    const auto value = parseNumber(typed);
    // Text that is not a number goes as typed: the engine's message then names the key.
    return value ? floatToToml(*value) : typed.toStdString();
  }
  if (e.type == QLatin1String("integer")) {
    bool ok = false;
    const qlonglong value = typed.toLongLong(&ok);
    return ok ? std::to_string(value) : typed.toStdString();
  }
  if (e.type == QLatin1String("boolean")) return typed.toLower().toStdString();  // true | false
  return tomlString(e.line->text());
}

QStringList LiveControlPanel::editedAssignments() const {
  QStringList out;
  for (const KeyEditor& e : m_editors) {
    const std::string value = editedToml(e);
    if (!value.empty()) out << e.key + QLatin1Char('=') + QString::fromStdString(value);
  }
  return out;
}

void LiveControlPanel::updateEditorLook(KeyEditor& e) {
  QLineEdit* w = e.line;
  const bool edited = isEdited(e);
  bool valid = true;
  if (edited && (e.type == QLatin1String("float") || e.type == QLatin1String("integer"))) {
    const auto typed = parseNumber(e.line->text());
    valid = typed && e.bounds.acceptsNumber(*typed);
  } else if (edited && e.type == QLatin1String("boolean")) {
    valid = e.bounds.acceptsText(e.line->text().trimmed().toLower());  // as editedToml sends it
  } else if (edited) {
    valid = e.bounds.acceptsText(e.line->text());
  }
  e.flagged = !valid;
  QPalette p = palette();
  if (edited) p.setColor(QPalette::Base, valid ? editedTint() : invalidTint());
  w->setPalette(p);
  QFont f = e.label->font();
  f.setBold(edited);
  e.label->setFont(f);
  QString tip = tr("%1\naccepted: %2").arg(e.description, e.acceptedText);
  if (!valid) {
    tip += tr("\n\nThis value is not accepted; the engine will refuse the patch.");
  }
  w->setToolTip(tip);
}

void LiveControlPanel::onEditorChanged() {
  if (m_loadingValues) return;
  for (KeyEditor& e : m_editors) updateEditorLook(e);
  updateControls();
}

void LiveControlPanel::revert() {
  for (KeyEditor& e : m_editors) showCurrentInEditor(e);
  updateControls();
}

}  // namespace moewb::gui
