// Status and Result<T>: how every fallible call in MoE Workbench reports failure.
//
// A Status is either ok or carries an error code plus a human-readable message that names the
// file, key or value at fault and what would have been accepted. Result<T> holds a value or a
// non-ok Status. Both are cheap to move; an ok Status allocates nothing. Library code returns these
// instead of throwing across module boundaries or exiting.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace moewb {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad user input: config key, CLI argument, value out of range
  kNotFound,         // a file, run, key or row that does not exist
  kAlreadyExists,    // refusing to overwrite something
  kDataLoss,         // a file that is truncated, corrupt or not what it claims to be
  kFailedPrecondition,  // the call is not valid in the current state
  kUnimplemented,    // a valid request that this build does not support
  kResourceExhausted,  // out of memory or another limit
  kCancelled,        // stopped on request
  kInternal,         // a bug or a failed library call
};

// Returns the lower-case name of a code ("invalid argument", ...).
const char* statusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : m_code(code), m_message(std::move(message)) {}

  static Status ok() { return {}; }

  bool isOk() const { return m_code == StatusCode::kOk; }
  StatusCode code() const { return m_code; }
  const std::string& message() const { return m_message; }
  // "invalid argument: moe.top_k = 9 ..." ; "ok" for an ok status.
  std::string toString() const;

  // Returns a copy whose message is `context + ": " + message()`; ok stays ok.
  Status withContext(const std::string& context) const;

 private:
  StatusCode m_code = StatusCode::kOk;
  std::string m_message;
};

inline Status invalidArgument(std::string msg) { return {StatusCode::kInvalidArgument, std::move(msg)}; }
inline Status notFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
inline Status alreadyExists(std::string msg) { return {StatusCode::kAlreadyExists, std::move(msg)}; }
inline Status dataLoss(std::string msg) { return {StatusCode::kDataLoss, std::move(msg)}; }
inline Status failedPrecondition(std::string msg) { return {StatusCode::kFailedPrecondition, std::move(msg)}; }
inline Status unimplemented(std::string msg) { return {StatusCode::kUnimplemented, std::move(msg)}; }
inline Status resourceExhausted(std::string msg) { return {StatusCode::kResourceExhausted, std::move(msg)}; }
inline Status cancelled(std::string msg) { return {StatusCode::kCancelled, std::move(msg)}; }
inline Status internalError(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }

// A value of type T or a non-ok Status. Accessing value() on an error is a programming error and
// aborts with the status message (see MOEWB_CHECK).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : m_data(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : m_data(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(m_data).isOk()) m_data = Status(StatusCode::kInternal, "Result built from ok Status");
  }

  bool isOk() const { return std::holds_alternative<T>(m_data); }
  explicit operator bool() const { return isOk(); }

  const Status& status() const {
    static const Status kOkStatus;
    return isOk() ? kOkStatus : std::get<Status>(m_data);
  }
  T& value() & { requireValue(); return std::get<T>(m_data); }
  const T& value() const& { requireValue(); return std::get<T>(m_data); }
  T&& value() && { requireValue(); return std::get<T>(std::move(m_data)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  void requireValue() const;
  std::variant<T, Status> m_data;
};

[[noreturn]] void abortWithStatus(const Status& status, const char* file, int line);

template <typename T>
void Result<T>::requireValue() const {
  if (!isOk()) abortWithStatus(std::get<Status>(m_data), __FILE__, __LINE__);
}

}  // namespace moewb

#define MOEWB_STATUS_CONCAT_INNER(a, b) a##b
#define MOEWB_STATUS_CONCAT(a, b) MOEWB_STATUS_CONCAT_INNER(a, b)

// Evaluates `expr` (a Status) and returns it from the calling function when it is not ok.
#define MOEWB_RETURN_IF_ERROR(expr)                       \
  do {                                                    \
    ::moewb::Status moewb_status_ = (expr);               \
    if (!moewb_status_.isOk()) return moewb_status_;      \
  } while (0)

// `MOEWB_ASSIGN_OR_RETURN(auto x, makeX());` declares x from a Result or returns its Status.
#define MOEWB_ASSIGN_OR_RETURN(lhs, expr) \
  MOEWB_ASSIGN_OR_RETURN_IMPL(MOEWB_STATUS_CONCAT(moewb_result_, __LINE__), lhs, expr)
#define MOEWB_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.isOk()) return tmp.status();             \
  lhs = std::move(tmp).value()
