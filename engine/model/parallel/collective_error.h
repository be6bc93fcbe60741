// CollectiveError: how a failed collective inside the model's forward / backward (whose functions
// return no Status) reaches the parallel trainer, which turns it back into the Status it carries.
// Thrown only by engine/train/parallel code; caught at the rank's step boundary.
#pragma once

#include <stdexcept>

#include "moewb/base/status.h"

namespace moewb::engine {

class CollectiveError : public std::runtime_error {
 public:
  explicit CollectiveError(Status status)
      : std::runtime_error(status.toString()), m_status(std::move(status)) {}
  const Status& status() const { return m_status; }

 private:
  Status m_status;
};

// Throws CollectiveError when `status` is not ok.
inline void throwIfFailed(const Status& status) {
  if (!status.isOk()) throw CollectiveError(status);
}

}  // namespace moewb::engine
