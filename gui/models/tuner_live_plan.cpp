// The Tuner window's "Apply live" plan, described for people (tuner_live_plan.h).
#include "moewb/gui/tuner_live_plan.h"

#include "moewb/gui/config_change_model.h"

namespace moewb::gui {

QString describeSetting(const LiveSetting& setting) {
  return QStringLiteral("%1 = %2 (the run has %3)")
      .arg(QString::fromStdString(setting.key), formatConfigValue(setting.trialValue),
           formatConfigValue(setting.runValue));
}

}  // namespace moewb::gui
