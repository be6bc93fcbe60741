// Checking macros for invariants that only a bug can break (shapes that the code itself built,
// indices it computed). They abort with file, line and the failed expression. User input and
// library failures never go through these: they return a Status (status.h).
#pragma once

#include <sstream>
#include <string>

namespace moewb::detail {
[[noreturn]] void checkFailed(const char* expr, const char* file, int line, const std::string& msg);
}  // namespace moewb::detail

// Aborts when `cond` is false. Extra context may follow as stream arguments:
//   MOEWB_CHECK(rows > 0) << "rows=" << rows;   (not supported; use MOEWB_CHECK_MSG)
#define MOEWB_CHECK(cond)                                                  \
  do {                                                                     \
    if (!(cond)) ::moewb::detail::checkFailed(#cond, __FILE__, __LINE__, ""); \
  } while (0)

// Aborts when `cond` is false, printing `msg` (anything streamable) as well.
#define MOEWB_CHECK_MSG(cond, msg)                                                  \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::ostringstream moewb_check_os_;                                           \
      moewb_check_os_ << msg;                                                       \
      ::moewb::detail::checkFailed(#cond, __FILE__, __LINE__, moewb_check_os_.str()); \
    }                                                                               \
  } while (0)

#define MOEWB_CHECK_EQ(a, b) MOEWB_CHECK_MSG((a) == (b), #a " = " << (a) << ", " #b " = " << (b))
#define MOEWB_CHECK_LT(a, b) MOEWB_CHECK_MSG((a) < (b), #a " = " << (a) << ", " #b " = " << (b))
#define MOEWB_CHECK_LE(a, b) MOEWB_CHECK_MSG((a) <= (b), #a " = " << (a) << ", " #b " = " << (b))
