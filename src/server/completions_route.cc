// POST /v1/completions: prompts (text or token ids) × n choices, each an engine request.
#include "server/generation_requests.h"
#include "server/kv_lease_guard.h"
#include "server/prompts.h"
#include "server/protocol/completion_request.h"
#include "server/route_support.h"

namespace kestrel::server {

void handle_completions(ServingContext& ctx, const HttpRequest& http,
                        std::shared_ptr<Responder> r) {
  auto body = parse_body(http, *r);
  if (!body) return;
  KvLeaseGuard kv_lease(ctx.engine, *body);
  auto parsed = parse_completion_request(*body);
  if (!parsed) return reply_error(*r, parsed.error());
  CompletionRequest& req = parsed.value();
  auto model = resolve_model_name(ctx, req.model);
  if (!model) return reply_error(*r, model.error());
  auto rules = check_sampling(ctx, req.sampling);
  if (!rules) return reply_error(*r, rules.error());
  const std::optional<int64_t> requested_max = req.sampling.max_tokens;
  // max_tokens 0 (echo only) runs the prompt for one token that is not reported.
  const bool drop_output = requested_max == 0;
  const bool echo_logprobs = req.echo && req.sampling.logprobs.has_value();
  const int prompt_logprobs = int(req.sampling.prompt_logprobs.value_or(-1));
  const int engine_prompt_logprobs =
      std::max(echo_logprobs ? int(*req.sampling.logprobs) : -1, prompt_logprobs);

  SessionSpec spec = session_spec(StreamKind::kCompletion, model.value(), req.sampling);
  log_unread(req.unread, spec.id);
  for (size_t p = 0; p < req.prompts.size(); ++p) {
    auto ids = prompt_token_ids(ctx, req.prompts[p], req.add_special_tokens);
    if (!ids) return reply_error(*r, ids.error());
    auto fitted = fit_prompt(ctx, req.sampling, std::move(ids).value(),
                             drop_output ? std::optional<int64_t>(1) : requested_max);
    if (!fitted) return reply_error(*r, fitted.error());
    const FittedPrompt& prompt = fitted.value();
    std::string echo;
    if (req.echo) {
      const auto* text = std::get_if<std::string>(&req.prompts[p]);
      // A truncated prompt echoes what the model saw.
      if (text != nullptr && !req.sampling.truncate_prompt_tokens) {
        echo = *text;
      } else if (ctx.tokenizer) {
        echo = ctx.tokenizer->decode(prompt.ids, /*skip_special_tokens=*/false);
      }
    }
    for (int64_t k = 0; k < req.sampling.n; ++k) {
      SessionChoice c;
      c.request = engine_request(ctx, req.sampling, rules.value(), prompt.ids, prompt.max_tokens);
      c.request.id = spec.id + "-" + std::to_string(spec.choices.size());
      if (req.sampling.seed) c.request.engine.seed += uint64_t(k);
      c.request.engine.prompt_logprobs = engine_prompt_logprobs;
      c.echo = echo;
      c.prompt_index = int64_t(p);
      c.prompt_ids = prompt.ids;
      c.echo_logprobs = echo_logprobs;
      c.prompt_logprobs = prompt_logprobs;
      c.drop_output = drop_output;
      spec.choices.push_back(std::move(c));
    }
  }
  if (auto e = constrain_choices(ctx, req.sampling.constraint, spec)) return reply_error(*r, *e);
  kv_lease.disarm();  // the engine's from here, refusals included
  start_generation(ctx, std::move(r), std::move(spec));
}

}  // namespace kestrel::server
