#include "engine/engine_core.h"

#include <algorithm>
#include <utility>

namespace kestrel {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "error";
}

EngineCore::EngineCore(CausalLM& model, const SchedulerConfig& config,
                       std::vector<int32_t> eos_token_ids)
    : scheduler_(config),
      runner_(model, model.make_kv_cache(config.num_blocks, config.block_size)),
      eos_token_ids_(std::move(eos_token_ids)) {}

Status EngineCore::add_request(const EngineRequest& request) {
  if (request.min_tokens < 0 || request.min_tokens > request.max_tokens)
    return make_error("request {}: min_tokens {} must be in [0, max_tokens {}]", request.id,
                      request.min_tokens, request.max_tokens);
  KTRY(scheduler_.add_request(request.id, request.prompt_token_ids, request.max_tokens,
                              /*read_prefix_cache=*/request.prompt_logprobs < 0,
                              request.cache_keys));
  RequestState rules{request.min_tokens, request.stop_token_ids,
                     request.ignore_eos, request.sampling.logprobs >= 0,
                     std::nullopt,       0};
  std::vector<int32_t> suppressed = rules.stop_token_ids;
  if (!request.ignore_eos)
    suppressed.insert(suppressed.end(), eos_token_ids_.begin(), eos_token_ids_.end());
  runner_.add_request(
      request.id,
      RunnerRequestParams{request.sampling, request.seed, request.min_tokens, std::move(suppressed),
                          request.prompt_logprobs, request.constraint, request.logits_rules});
  request_state_[request.id] = std::move(rules);
  return {};
}

void EngineCore::abort(const RequestId& id) {
  const Request* req = scheduler_.request(id);
  if (req == nullptr || req->is_finished()) return;
  EngineCoreOutput out;
  out.id = id;
  out.finish_reason = FinishReason::kAbort;
  out.num_prompt_tokens = req->num_prompt_tokens();
  out.num_cached_tokens = req->num_cached_tokens;
  out.num_output_tokens = req->num_output_tokens();
  out.first_scheduled = request_state_.at(id).first_scheduled;
  scheduler_.abort(id);
  retire(id);
  pending_.push_back(std::move(out));
}

bool EngineCore::is_stop(const RequestState& rules, int64_t num_outputs, int32_t token,
                         std::optional<int32_t>* stop_token_id) const {
  if (num_outputs < rules.min_tokens) return false;
  // EOS first: vLLM reports no stop_reason for it even when it is also a listed stop id.
  if (!rules.ignore_eos &&
      std::find(eos_token_ids_.begin(), eos_token_ids_.end(), token) != eos_token_ids_.end())
    return true;
  if (std::find(rules.stop_token_ids.begin(), rules.stop_token_ids.end(), token) ==
      rules.stop_token_ids.end())
    return false;
  *stop_token_id = token;
  return true;
}

void EngineCore::retire(const RequestId& id) {
  runner_.remove_request(id);
  request_state_.erase(id);
  scheduler_.release(id);
}

Expected<StepOutput> EngineCore::run_step(const SchedulerOutput& sched) {
  // A throwing constraint or an allocation failure mid-step fails the step, not the process.
  try {
    return runner_.execute(sched, [this](const RequestId& id) { return scheduler_.request(id); });
  } catch (const std::exception& e) {
    return make_error("{}", e.what());
  }
}

void EngineCore::fail_step(const SchedulerOutput& sched, const std::string& error,
                           std::vector<EngineCoreOutput>& outputs) {
  scheduler_.fail_step(sched);
  for (const ScheduledRequest& s : sched.scheduled) {
    const Request* req = scheduler_.request(s.id);
    EngineCoreOutput out;
    out.id = s.id;
    out.finish_reason = FinishReason::kError;
    out.error = "the engine step running this request failed: " + error;
    out.num_prompt_tokens = req->num_prompt_tokens();
    out.num_cached_tokens = req->num_cached_tokens;
    out.num_output_tokens = req->num_output_tokens();
    out.first_scheduled = request_state_.at(s.id).first_scheduled;
    retire(s.id);
    outputs.push_back(std::move(out));
  }
}

std::vector<TokenLogprobs> EngineCore::fresh_prompt_logprobs(const ScheduledRequest& s,
                                                             StepOutput& step) {
  const auto it = step.prompt_logprobs.find(s.id);
  if (it == step.prompt_logprobs.end()) return {};
  // Entry i scores prompt token start + i + 1. A recompute after preemption scores the prompt
  // again from the start; what was already reported is dropped.
  RequestState& state = request_state_.at(s.id);
  std::vector<TokenLogprobs> fresh;
  for (size_t i = 0; i < it->second.size(); ++i) {
    const size_t token_index = static_cast<size_t>(s.start_position) + i + 1;
    if (token_index <= state.prompt_logprobs_sent) continue;
    fresh.push_back(std::move(it->second[i]));
    state.prompt_logprobs_sent = token_index;
  }
  return fresh;
}

Expected<std::vector<EngineCoreOutput>> EngineCore::step() {
  std::vector<EngineCoreOutput> outputs = std::move(pending_);
  pending_.clear();
  const SchedulerOutput sched = scheduler_.schedule();
  if (!sched.scheduled.empty()) ++counters_.steps;
  const auto now = std::chrono::steady_clock::now();
  for (const ScheduledRequest& s : sched.scheduled) {
    RequestState& rules = request_state_.at(s.id);
    if (!rules.first_scheduled) rules.first_scheduled = now;
    counters_.scheduled_tokens += s.num_new_tokens;
    const int64_t prompt_end = scheduler_.request(s.id)->num_prompt_tokens();
    counters_.prompt_tokens_computed +=
        std::clamp<int64_t>(prompt_end - s.start_position, 0, s.num_new_tokens);
  }
  Expected<StepOutput> executed = run_step(sched);
  if (!executed.ok()) {
    fail_step(sched, executed.error().message, outputs);
    return outputs;
  }
  StepOutput& step = *executed;
  std::unordered_map<RequestId, int32_t> tokens;
  for (const auto& [id, s] : step.sampled) tokens[id] = s.token;
  counters_.generation_tokens += static_cast<int64_t>(step.sampled.size());
  // A request that got no token ends before the step is applied (the scheduler then skips it).
  for (const auto& [id, ended] : step.ended)
    scheduler_.finish(
        id, ended.complete ? RequestStatus::kFinishedStopped : RequestStatus::kFinishedAborted);
  scheduler_.update_from_output(sched, tokens);

  for (const ScheduledRequest& s : sched.scheduled) {
    const auto it = step.sampled.find(s.id);
    const auto ended = step.ended.find(s.id);
    std::vector<TokenLogprobs> prompt_logprobs = fresh_prompt_logprobs(s, step);
    if (it == step.sampled.end() && ended == step.ended.end() && prompt_logprobs.empty()) continue;
    const Request* req = scheduler_.request(s.id);
    const RequestState& rules = request_state_.at(s.id);
    EngineCoreOutput out;
    out.id = s.id;
    out.prompt_logprobs = std::move(prompt_logprobs);
    out.num_prompt_tokens = req->num_prompt_tokens();
    out.num_cached_tokens = req->num_cached_tokens;
    out.num_output_tokens = req->num_output_tokens();
    out.first_scheduled = rules.first_scheduled;
    if (it != step.sampled.end()) {
      SampledToken& token = it->second;
      out.new_token_ids = {token.token};
      if (rules.wants_logprobs)
        out.new_logprobs.push_back(
            TokenLogprobs{token.token, token.logprob, 0, std::move(token.top)});
      // A stop token outranks the length limit reached by the same token.
      if (is_stop(rules, req->num_output_tokens(), token.token, &out.stop_token_id)) {
        scheduler_.finish(s.id, RequestStatus::kFinishedStopped);
        out.finish_reason = FinishReason::kStop;
      } else if (req->is_finished()) {
        out.finish_reason = FinishReason::kLength;
      }
    } else if (ended != step.ended.end()) {
      out.finish_reason = ended->second.complete ? FinishReason::kStop : FinishReason::kError;
      out.error = ended->second.error;
      out.invalid_request = ended->second.invalid_request;
    }
    if (out.finished()) retire(s.id);
    outputs.push_back(std::move(out));
  }
  return outputs;
}

}  // namespace kestrel
