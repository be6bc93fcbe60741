// Phase colours and the heat-map scale.
#include "moewb/gui/palette.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <string>

namespace moewb::gui {

namespace {

struct NamedColor {
  std::string_view family;
  QRgb rgb;
};

// One colour per phase family (the part of the name before the first '.').
constexpr std::array<NamedColor, 13> kFamilies = {{
    {"step", 0x46566b},
    {"forward", 0x56708f},
    {"backward", 0x8f6e55},
    {"optimizer", 0x7d6a99},
    {"embedding", 0x3fa39a},
    {"attention", 0x4f9bd9},
    {"kda", 0x2e86ab},
    {"sparse_attention", 0xb07aa1},
    {"router", 0xf28e2b},
    {"permute", 0x8cc7c2},
    {"experts", 0xe15759},
    {"combine", 0x59a14f},
    {"loss", 0xedc948},
}};

}  // namespace

QColor phaseColor(std::string_view name) {
  const size_t dot = name.find('.');
  const std::string_view family = name.substr(0, dot);
  const bool backward = dot != std::string_view::npos && name.substr(dot + 1) == "bwd";
  QColor color;
  bool known = false;
  for (const NamedColor& f : kFamilies) {
    if (f.family == family) {
      color = QColor::fromRgb(f.rgb);
      known = true;
      break;
    }
  }
  if (!known) {
    const size_t h = std::hash<std::string_view>{}(family);
    color = QColor::fromHsv(int(h % 360), 120, 190);
  }
  return backward ? color.darker(135) : color;
}

QColor foldedColor() {
  return QColor::fromRgb(0x8a8f99);
}

QColor heatColor(double t) {
  // Stops of a dark-purple -> red -> yellow scale (perceptually ordered, like "inferno").
  static constexpr std::array<QRgb, 7> kStops = {0x0d0829, 0x3b0f6f, 0x8c2981, 0xdd4a68,
                                                 0xfc8961, 0xfcc36b, 0xfcfdbf};
  if (!(t > 0)) t = 0;
  if (t > 1) t = 1;
  const double pos = t * double(kStops.size() - 1);
  const size_t i = std::min(size_t(pos), kStops.size() - 2);
  const double f = pos - double(i);
  const QColor a = QColor::fromRgb(kStops[i]);
  const QColor b = QColor::fromRgb(kStops[i + 1]);
  auto mix = [f](int x, int y) { return int(std::lround(x + (y - x) * f)); };
  return QColor(mix(a.red(), b.red()), mix(a.green(), b.green()), mix(a.blue(), b.blue()));
}

QColor textColorOn(const QColor& background) {
  const double luma =
      0.299 * background.redF() + 0.587 * background.greenF() + 0.114 * background.blueF();
  return luma > 0.55 ? QColor(Qt::black) : QColor(Qt::white);
}

}  // namespace moewb::gui
