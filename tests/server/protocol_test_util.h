// Shared helpers for the server/protocol tests.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "server/protocol/protocol_error.h"

namespace kestrel::server {

// Asserts `result` is a 400 naming `param` whose message contains `message_part`.
template <typename T>
void expect_bad_request(const ParseResult<T>& result, const std::string& param,
                        const std::string& message_part) {
  ASSERT_FALSE(result.ok()) << "expected a 400 about " << param;
  const ProtocolError& e = result.error();
  EXPECT_EQ(e.code, 400);
  EXPECT_EQ(e.type, "BadRequestError");
  ASSERT_TRUE(e.param.has_value()) << e.message;
  EXPECT_EQ(*e.param, param) << e.message;
  EXPECT_NE(e.message.find(message_part), std::string::npos)
      << "message: " << e.message << "\nexpected to contain: " << message_part;
}

}  // namespace kestrel::server
