// The Tuner window's "Apply live" plan, for people. The plan itself (which of a trial's settings
// go to the running run as one live patch with source "tuner", which need a restart, which the
// run already has; the run's current config from its trace) lives in the tuner library
// (moewb/tuner/live_retune.h), shared with `moewb tune --apply`; this header names its types in
// this namespace and adds the one Qt part, a setting described for the window.
// Pure functions; safe from any thread.
#pragma once

#include <QString>

#include "moewb/tuner/live_retune.h"

namespace moewb::gui {

using tuner::configAfterChanges;
using tuner::LiveRetunePlan;
using tuner::LiveSetting;
using tuner::planLiveRetune;

// "parallel.ep = 2 (the run has 1)" for people: values through formatConfigValue.
QString describeSetting(const LiveSetting& setting);

}  // namespace moewb::gui
