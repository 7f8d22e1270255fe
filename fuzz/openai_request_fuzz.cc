// libFuzzer target: OpenAI request bodies as the server receives them. Arbitrary bytes are parsed
// as JSON and, when they parse, handed to every endpoint's request parser, which must answer with
// a parsed request or a ProtocolError whose body serialises — never crash or throw.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/protocol/chat_request.h"
#include "server/protocol/completion_request.h"
#include "server/protocol/responses_request.h"
#include "server/protocol/tokenize_request.h"

namespace {

template <typename Result>
void check(const Result& r) {
  if (!r.ok()) (void)kestrel::server::error_body(r.error()).dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto body = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;
  check(kestrel::server::parse_completion_request(body));
  check(kestrel::server::parse_chat_request(body));
  check(kestrel::server::parse_tokenize_request(body));
  check(kestrel::server::parse_detokenize_request(body));
  check(kestrel::server::parse_responses_request(body));
  return 0;
}
