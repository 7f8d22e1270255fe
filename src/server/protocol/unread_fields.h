// server/protocol/unread_fields.h — what happens to the request fields a parser did not read.
// Kestrel implements most of vLLM's chat and completion fields; the rest, and the OpenAI fields
// vLLM does not know, are listed here with one of two dispositions:
//   - ignored: the field cannot change the output (user, metadata, session_id, ...), so it is
//     logged and dropped, as vLLM does;
//   - refused: the field would change the output and Kestrel does not implement it, so a request
//     that sets it to anything but its no-op value (null, false, its default) gets a 400 naming
//     it, never a silently different answer.
// Keys in neither list are unknown to vLLM too; they are logged and ignored, as vLLM does.
// docs/compatibility.md lists every field with its disposition.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/protocol/protocol_error.h"

namespace kestrel::server {

enum class Endpoint { kChat, kCompletion, kResponses };

struct UnreadFields {
  std::vector<std::string> ignored;  // known fields that change nothing here
  std::vector<std::string> unknown;  // neither Kestrel's nor vLLM's (a typo, another API's)
};

// `unread`: the body's keys no parser read (FieldReader::unknown_keys()). Returns the 400 for the
// first refused field that is set, else sorts the keys for the log.
std::optional<ProtocolError> check_unread_fields(const nlohmann::json& body,
                                                 const std::vector<std::string>& unread,
                                                 Endpoint endpoint, UnreadFields& out);

}  // namespace kestrel::server
