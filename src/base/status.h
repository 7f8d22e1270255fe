// base/status.h — error values. Functions that can fail on user input return Expected<T>;
// programming errors use KCHECK (aborts with a message).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace kestrel {

struct Error {
  std::string message;
};

template <typename... Args>
Error make_error(fmt::format_string<Args...> f, Args&&... args) {
  return Error{fmt::format(f, std::forward<Args>(args)...)};
}

// A value or an Error. Minimal std::expected stand-in (g++ 12 has no <expected>).
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}
  Expected(Error error) : v_(std::move(error)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

// Status = Expected<void>.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error.message)), failed_(true) {}
  static Status Ok() { return Status(); }
  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const std::string& message() const { return error_; }
  Error error() const { return Error{error_}; }

 private:
  std::string error_;
  bool failed_ = false;
};

[[noreturn]] inline void check_failed(const char* file, int line, const char* cond,
                                      const std::string& msg) {
  std::fprintf(stderr, "KCHECK failed at %s:%d: %s %s\n", file, line, cond, msg.c_str());
  std::abort();
}

}  // namespace kestrel

#define KCHECK(cond, ...)                                                              \
  do {                                                                                 \
    if (!(cond)) [[unlikely]]                                                          \
      ::kestrel::check_failed(__FILE__, __LINE__, #cond, fmt::format("" __VA_ARGS__)); \
  } while (0)

// Propagate an error from an Expected/Status expression.
#define KTRY(expr)                         \
  do {                                     \
    auto&& _k_st = (expr);                 \
    if (!_k_st.ok()) return _k_st.error(); \
  } while (0)

#define KCONCAT_INNER(a, b) a##b
#define KCONCAT(a, b) KCONCAT_INNER(a, b)
#define KASSIGN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                 \
  if (!tmp.ok()) return tmp.error(); \
  lhs = std::move(tmp).value()
// KASSIGN(auto x, f()) assigns the value or returns the error.
#define KASSIGN(lhs, expr) KASSIGN_IMPL(KCONCAT(_k_tmp_, __LINE__), lhs, expr)
