// server/http/sse_decoder.h — the client side of Server-Sent Events: reassembles events from a
// byte stream cut anywhere (an HTTP body read in pieces). Used by `bench serve` and the PD proxy.
// One decoder per stream, used by one thread at a time.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace kestrel::server {

// One SSE event (a whole completion chunk) beyond this means a broken stream.
inline constexpr size_t kMaxSseEventBytes = 16u << 20;

// Reassembles Server-Sent Events from a byte stream cut anywhere: payloads are the event's
// "data:" lines joined by '\n'; other fields and comments are ignored.
class SseDecoder {
 public:
  // Calls on_event(payload) for each completed event until it returns false. Returns false if
  // the stream is malformed (an event too large to be real).
  template <typename OnEvent>
  bool feed(std::string_view bytes, OnEvent&& on_event) {
    while (!bytes.empty()) {
      size_t newline = bytes.find('\n');
      if (newline == std::string_view::npos) {
        line_.append(bytes);
        return line_.size() <= kMaxSseEventBytes;
      }
      line_.append(bytes.substr(0, newline));
      bytes.remove_prefix(newline + 1);
      if (!line_.empty() && line_.back() == '\r') line_.pop_back();
      std::optional<std::string> event = take_line();
      if (data_.size() > kMaxSseEventBytes) return false;
      if (event && !on_event(std::move(*event))) return true;
    }
    return true;
  }

  // At the end of the stream: the last event when the server did not end it with a blank line.
  std::optional<std::string> flush() {
    std::optional<std::string> event = take_line();
    if (event) return event;
    return take_line();
  }

 private:
  // Consumes line_; returns the payload when the line (empty) completes an event.
  std::optional<std::string> take_line() {
    std::optional<std::string> event;
    if (line_.empty()) {
      if (has_data_) {
        has_data_ = false;
        event = std::move(data_);
        data_.clear();
      }
    } else if (line_.compare(0, 5, "data:") == 0) {
      const size_t skip = line_.size() > 5 && line_[5] == ' ' ? 6 : 5;
      if (has_data_) data_ += '\n';
      data_.append(line_, skip);
      has_data_ = true;
    }
    line_.clear();
    return event;
  }

  std::string line_;
  std::string data_;
  bool has_data_ = false;
};

}  // namespace kestrel::server
