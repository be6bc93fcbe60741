// Status formatting and the abort path for misuse of Result.
#include "moewb/base/status.h"

#include <cstdio>
#include <cstdlib>

#include "moewb/base/check.h"

namespace moewb {

const char* statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kAlreadyExists: return "already exists";
    case StatusCode::kDataLoss: return "data loss";
    case StatusCode::kFailedPrecondition: return "failed precondition";
    case StatusCode::kUnimplemented: return "unimplemented";
    case StatusCode::kResourceExhausted: return "resource exhausted";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::toString() const {
  if (isOk()) return "ok";
  return std::string(statusCodeName(m_code)) + ": " + m_message;
}

Status Status::withContext(const std::string& context) const {
  if (isOk()) return *this;
  return Status(m_code, context + ": " + m_message);
}

void abortWithStatus(const Status& status, const char* file, int line) {
  detail::checkFailed("Result holds a value", file, line, status.toString());
}

namespace detail {
void checkFailed(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "moewb: check failed at %s:%d: %s%s%s\n", file, line, expr,
               msg.empty() ? "" : " -- ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace detail

}  // namespace moewb
