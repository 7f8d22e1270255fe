// server/openai_server.h — the OpenAI-compatible API of `kestrel serve` on an HttpServer: routes
// (/v1/completions, /v1/chat/completions, /v1/responses, /v1/models, /tokenize, /detokenize,
// /health, /version, /metrics), API-key checks and readiness.
#pragma once

#include "server/http/http_server.h"
#include "server/serving_context.h"

namespace kestrel::server {

// Registers every route on `server` (before it starts). `ctx` must outlive the server.
void add_openai_routes(HttpServer& server, ServingContext& ctx);

}  // namespace kestrel::server
