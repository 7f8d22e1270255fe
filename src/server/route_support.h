// server/route_support.h — what every route handler does first: parse the body as a JSON object
// and answer protocol errors in the OpenAI error shape. Handlers run on an HTTP I/O thread.
#pragma once

#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "server/http/request.h"
#include "server/http/responder.h"
#include "server/protocol/protocol_error.h"
#include "server/serving_context.h"

namespace kestrel::server {

void reply_error(Responder& r, const ProtocolError& e);

// The body as a JSON object; malformed JSON or another JSON type is answered with a 400 (as
// vLLM words it) and gives nullopt.
std::optional<nlohmann::json> parse_body(const HttpRequest& req, Responder& r);

// The route handlers (completions_route.cc, chat_route.cc, responses_route.cc, ...).
void handle_completions(ServingContext& ctx, const HttpRequest& http, std::shared_ptr<Responder> r);
void handle_chat(ServingContext& ctx, const HttpRequest& http, std::shared_ptr<Responder> r);
void handle_responses_create(ServingContext& ctx, const HttpRequest& http,
                             std::shared_ptr<Responder> r);
void handle_responses_retrieve(ServingContext& ctx, const HttpRequest& http,
                               std::shared_ptr<Responder> r);
void handle_responses_cancel(ServingContext& ctx, const HttpRequest& http,
                             std::shared_ptr<Responder> r);

}  // namespace kestrel::server
