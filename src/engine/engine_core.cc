#include "engine/engine_core.h"

#include <algorithm>
#include <utility>

namespace kestrel {

EngineCore::EngineCore(CausalLM& model, const SchedulerConfig& config,
                       std::vector<int32_t> eos_token_ids)
    : scheduler_(config),
      runner_(model, model.make_kv_cache(config.num_blocks, config.block_size)),
      eos_token_ids_(std::move(eos_token_ids)) {}

Status EngineCore::add_request(const EngineRequest& request) {
  if (request.min_tokens < 0 || request.min_tokens > request.max_tokens)
    return make_error("request {}: min_tokens {} must be in [0, max_tokens {}]", request.id,
                      request.min_tokens, request.max_tokens);
  KTRY(scheduler_.add_request(request.id, request.prompt_token_ids, request.max_tokens));
  StopRules rules{request.min_tokens, request.stop_token_ids};
  if (!request.ignore_eos)
    rules.stop_token_ids.insert(rules.stop_token_ids.end(), eos_token_ids_.begin(),
                                eos_token_ids_.end());
  RunnerRequestParams params{request.sampling, request.seed, request.min_tokens,
                             rules.stop_token_ids};
  runner_.add_request(request.id, params);
  stop_rules_[request.id] = std::move(rules);
  return {};
}

void EngineCore::abort(const RequestId& id) {
  const Request* req = scheduler_.request(id);
  if (req == nullptr || req->is_finished()) return;
  RequestOutput out;
  out.id = id;
  out.finish_reason = "abort";
  out.num_prompt_tokens = req->num_prompt_tokens();
  out.num_cached_tokens = req->num_cached_tokens;
  out.num_output_tokens = req->num_output_tokens();
  scheduler_.abort(id);
  retire(id);
  pending_.push_back(std::move(out));
}

bool EngineCore::is_stop(const StopRules& rules, int64_t num_outputs, int32_t token) const {
  if (num_outputs < rules.min_tokens) return false;
  return std::find(rules.stop_token_ids.begin(), rules.stop_token_ids.end(), token) !=
         rules.stop_token_ids.end();
}

void EngineCore::retire(const RequestId& id) {
  runner_.remove_request(id);
  stop_rules_.erase(id);
  scheduler_.release(id);
}

Expected<std::vector<RequestOutput>> EngineCore::step() {
  std::vector<RequestOutput> outputs = std::move(pending_);
  pending_.clear();
  const SchedulerOutput sched = scheduler_.schedule();
  KASSIGN(auto sampled,
          runner_.execute(sched, [this](const RequestId& id) { return scheduler_.request(id); }));
  std::unordered_map<RequestId, int32_t> tokens;
  for (const auto& [id, s] : sampled) tokens[id] = s.token;
  scheduler_.update_from_output(sched, tokens);

  for (const ScheduledRequest& s : sched.scheduled) {
    const auto it = sampled.find(s.id);
    if (it == sampled.end()) continue;
    const Request* req = scheduler_.request(s.id);
    RequestOutput out;
    out.id = s.id;
    out.new_token_ids = {it->second.token};
    out.new_logprobs = {it->second.logprob};
    out.num_prompt_tokens = req->num_prompt_tokens();
    out.num_cached_tokens = req->num_cached_tokens;
    out.num_output_tokens = req->num_output_tokens();
    // A stop token outranks the length limit reached by the same token.
    if (is_stop(stop_rules_.at(s.id), req->num_output_tokens(), it->second.token)) {
      scheduler_.finish(s.id, RequestStatus::kFinishedStopped);
      out.finish_reason = "stop";
    } else if (req->is_finished()) {
      out.finish_reason = "length";
    }
    if (out.finished()) retire(s.id);
    outputs.push_back(std::move(out));
  }
  return outputs;
}

}  // namespace kestrel
