// Strongly typed integer ids. A TrackId cannot be passed where a StringId is wanted, which keeps
// the many int64 columns of the trace store apart. Ids are plain values: cheap to copy, hashable,
// ordered. The value -1 (the default) means "none".
#pragma once

#include <cstdint>
#include <functional>

namespace moewb {

template <typename Tag>
struct TypedId {
  int64_t value = -1;

  constexpr TypedId() = default;
  constexpr explicit TypedId(int64_t v) : value(v) {}
  constexpr bool isValid() const { return value >= 0; }
  constexpr auto operator<=>(const TypedId&) const = default;
};

using RunId = TypedId<struct RunIdTag>;        // a row of the `run` table
using TrackId = TypedId<struct TrackIdTag>;    // a row of the `track` table
using StringId = TypedId<struct StringIdTag>;  // an interned string
using SliceId = TypedId<struct SliceIdTag>;    // a row of the `slice` table

}  // namespace moewb

template <typename Tag>
struct std::hash<moewb::TypedId<Tag>> {
  size_t operator()(const moewb::TypedId<Tag>& id) const noexcept { return std::hash<int64_t>{}(id.value); }
};
