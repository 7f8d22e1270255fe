#include "engine/engine_core.h"

#include <algorithm>
#include <exception>
#include <utility>

namespace kestrel {

EngineCore::EngineCore(std::unique_ptr<Executor> executor, const SchedulerConfig& config,
                       std::vector<int32_t> eos_token_ids)
    : scheduler_(config),
      executor_(std::move(executor)),
      eos_token_ids_(std::move(eos_token_ids)) {}

Status EngineCore::add_request(const EngineRequest& request) {
  KTRY(check_output_limits(request, std::to_string(request.id)));
  RequestSpec spec;
  spec.id = request.id;
  spec.prompt = request.prompt_token_ids;
  spec.max_tokens = request.max_tokens;
  spec.stop.eos_token_ids = request.ignore_eos ? std::vector<int32_t>{} : eos_token_ids_;
  spec.stop.stop_token_ids = request.stop_token_ids;
  spec.stop.min_tokens = request.min_tokens;
  RequestSampling& s = spec.sampling;
  s.params = request.sampling;
  s.seed = request.seed;
  s.min_tokens = request.min_tokens;
  s.min_tokens_suppressed = spec.stop.stop_token_ids;
  s.min_tokens_suppressed.insert(s.min_tokens_suppressed.end(), spec.stop.eos_token_ids.begin(),
                                 spec.stop.eos_token_ids.end());
  s.prompt_logprobs = request.prompt_logprobs;
  s.rules = request.logits_rules;
  spec.read_prefix_cache = request.prompt_logprobs < 0;
  spec.cache_keys = request.cache_keys;
  if (kv_connector_)
    KTRY(kv_connector_->admit(request.id, request.kv_transfer, request.prompt_token_ids, spec));
  if (Status st = scheduler_.add_request(std::move(spec)); !st.ok()) {
    if (kv_connector_) kv_connector_->on_exit(request.id);  // releases a lease it started to watch
    return st;
  }
  request_state_[request.id] =
      RequestState{request.sampling.logprobs >= 0, request.constraint, std::nullopt, 0};
  return {};
}

EngineCoreOutput EngineCore::output_for(RequestHandle id) const {
  const Request* req = scheduler_.request(id);
  EngineCoreOutput out;
  out.id = id;
  out.num_prompt_tokens = req->num_prompt_tokens();
  out.num_cached_tokens = req->num_cached_tokens;
  out.num_output_tokens = req->num_output_tokens();
  out.first_scheduled = request_state_.at(id).first_scheduled;
  return out;
}

void EngineCore::abort(RequestHandle id) {
  const Request* req = scheduler_.request(id);
  if (req == nullptr || req->is_finished()) return;
  EngineCoreOutput out = output_for(id);
  out.finish_reason = FinishReason::kAbort;
  scheduler_.abort(id);
  retire(id);
  pending_.push_back(std::move(out));
}

void EngineCore::retire(RequestHandle id) {
  request_state_.erase(id);
  scheduler_.release(id);
  if (kv_connector_) kv_connector_->on_exit(id);
}

void EngineCore::fail_step(const SchedulerOutput& sched, const std::string& error,
                           std::vector<EngineCoreOutput>& outputs) {
  scheduler_.fail_step(sched);
  for (const ScheduledTokens& s : sched.scheduled) {
    EngineCoreOutput out = output_for(s.id);
    out.finish_reason = FinishReason::kError;
    out.error = "the engine step running this request failed: " + error;
    retire(s.id);
    outputs.push_back(std::move(out));
  }
}

void EngineCore::fill_token_masks(SchedulerOutput& sched,
                                  std::unordered_map<RequestHandle, std::string>& errors) {
  for (ScheduledTokens& s : sched.scheduled) {
    const RequestState& state = request_state_.at(s.id);
    if (!state.constraint) continue;
    const Request* req = scheduler_.request(s.id);
    const int64_t known = s.num_tokens - static_cast<int64_t>(s.draft_token_ids.size());
    if (req->num_computed_tokens + known < req->num_tokens()) continue;  // a prefill chunk
    TokenConstraint& constraint = *state.constraint;
    TokenMask mask{s.id, {}, 1};
    size_t kept = 0;  // drafts the grammar lets through, each with the mask after it
    // A failing constraint is this request's problem only: with no bit set it samples nothing.
    try {
      constraint.fill_bitmask(mask.bits);
      if (!s.draft_token_ids.empty() && constraint.can_restore()) {
        const size_t words = mask.bits.size();
        std::vector<uint64_t> next;
        constraint.save();
        for (; kept < s.draft_token_ids.size(); ++kept) {
          const int32_t d = s.draft_token_ids[kept];
          const uint64_t* row = mask.bits.data() + kept * words;
          const bool allowed = d >= 0 && size_t(d / 64) < words && ((row[d / 64] >> (d % 64)) & 1);
          if (!allowed || !constraint.accept(d)) break;
          constraint.fill_bitmask(next);
          next.resize(words);
          mask.bits.insert(mask.bits.end(), next.begin(), next.end());
        }
        constraint.restore();
      }
    } catch (const std::exception& e) {
      mask.bits.clear();
      kept = 0;
      errors[s.id] = std::string("the structured output constraint failed: ") + e.what();
    }
    // Drafts past the grammar would be rejected anyway; the step verifies only the rest.
    const int64_t cut = static_cast<int64_t>(s.draft_token_ids.size() - kept);
    s.draft_token_ids.resize(kept);
    s.num_tokens -= cut;
    sched.total_num_scheduled_tokens -= cut;
    mask.num_rows = static_cast<int32_t>(kept + 1);
    sched.token_masks.push_back(std::move(mask));
  }
}

void EngineCore::accept_constrained(RunnerOutput& result) {
  auto& sampled = result.sampled;
  for (auto it = sampled.begin(); it != sampled.end();) {
    const auto& constraint = request_state_.at(it->id).constraint;
    bool accepted = true;
    std::string error;
    for (const int32_t token : constraint ? it->tokens : std::vector<int32_t>{}) {
      try {
        accepted = constraint->accept(token);
      } catch (const std::exception& e) {
        accepted = false;
        error = e.what();
      }
      if (!accepted) {
        result.failures.push_back(
            RequestFailure{it->id, false,
                           "the structured output constraint refused sampled token " +
                               std::to_string(token) + (error.empty() ? "" : ": " + error)});
        break;
      }
    }
    it = accepted ? it + 1 : sampled.erase(it);
  }
}

void EngineCore::end_failed(const RunnerOutput& result,
                            const std::unordered_map<RequestHandle, std::string>& mask_errors,
                            std::vector<EngineCoreOutput>& outputs) {
  for (const RequestFailure& f : result.failures) {
    const Request* req = scheduler_.request(f.id);
    if (req == nullptr || req->is_finished()) continue;
    EngineCoreOutput out = output_for(f.id);
    const auto mask_error = mask_errors.find(f.id);
    const auto& constraint = request_state_.at(f.id).constraint;
    if (mask_error != mask_errors.end()) {
      out.finish_reason = FinishReason::kError;
      out.error = mask_error->second;
    } else if (f.no_token_allowed && constraint && constraint->complete()) {
      // A finished document that min_tokens or ignore_eos kept from ending on EOS.
      out.finish_reason = FinishReason::kStop;
    } else if (f.no_token_allowed) {
      out.finish_reason = FinishReason::kError;
      out.invalid_request = true;
      out.error =
          "no token is allowed: the request's structured output, allowed_token_ids, "
          "bad_words, logit_bias and min_tokens together exclude every token";
    } else {
      out.finish_reason = FinishReason::kError;
      out.error = f.error;
    }
    scheduler_.finish(f.id, out.finish_reason == FinishReason::kStop
                                ? RequestStatus::kFinishedStopped
                                : RequestStatus::kFinishedAborted);
    retire(f.id);
    outputs.push_back(std::move(out));
  }
}

std::vector<TokenLogprobs> EngineCore::fresh_prompt_logprobs(RequestHandle id, int64_t start,
                                                             std::vector<TokenLogprobs>& scored) {
  // Entry i scores prompt token start + i + 1. A recompute after preemption scores the prompt
  // again from the start; what was already reported is dropped.
  RequestState& state = request_state_.at(id);
  std::vector<TokenLogprobs> fresh;
  for (size_t i = 0; i < scored.size(); ++i) {
    const size_t token_index = static_cast<size_t>(start) + i + 1;
    if (token_index <= state.prompt_logprobs_sent) continue;
    fresh.push_back(std::move(scored[i]));
    state.prompt_logprobs_sent = token_index;
  }
  return fresh;
}

void EngineCore::poll_kv() {
  if (!kv_connector_) return;
  for (auto& [id, why] : kv_connector_->before_step(scheduler_)) {
    // The scheduler ended it (kv_load_failure_policy fail); the client hears why.
    EngineCoreOutput out = output_for(id);
    out.finish_reason = FinishReason::kError;
    out.error = why;
    retire(id);
    pending_.push_back(std::move(out));
  }
}

Expected<std::vector<EngineCoreOutput>> EngineCore::step() {
  poll_kv();
  std::vector<EngineCoreOutput> outputs = std::move(pending_);
  pending_.clear();
  SchedulerOutput sched = scheduler_.schedule();
  for (RequestHandle id : scheduler_.take_given_back()) {
    EngineCoreOutput out = output_for(id);
    out.finish_reason = FinishReason::kStop;
    out.given_back = true;
    retire(id);
    outputs.push_back(std::move(out));
  }
  // Loads in flight are polled: the workers report them in the step's output.
  if (sched.scheduled.empty() && sched.finished_ids.empty() && sched.kv_loads.empty() &&
      scheduler_.num_loads_in_flight() == 0 && !execute_empty_steps_)
    return outputs;
  if (kv_connector_) kv_connector_->on_started(sched.kv_loads);
  if (!sched.scheduled.empty()) ++counters_.steps;
  // First: constrained requests' drafts past their grammar leave the step.
  std::unordered_map<RequestHandle, std::string> mask_errors;
  fill_token_masks(sched, mask_errors);
  const auto now = std::chrono::steady_clock::now();
  // Each request's first position this step, which its prompt logprobs are placed by.
  std::unordered_map<RequestHandle, int64_t> starts;
  for (const ScheduledTokens& s : sched.scheduled) {
    RequestState& state = request_state_.at(s.id);
    if (!state.first_scheduled) state.first_scheduled = now;
    const Request* req = scheduler_.request(s.id);
    starts[s.id] = req->num_computed_tokens;
    counters_.scheduled_tokens += s.num_tokens;
    counters_.prompt_tokens_computed +=
        std::clamp<int64_t>(req->num_prompt_tokens() - req->num_computed_tokens, 0, s.num_tokens);
  }
  Expected<RunnerOutput> executed = executor_->execute(sched);
  if (!executed.ok()) {
    // A group failure behind the step's error (a data-parallel peer lost) is the cause to report.
    const std::optional<std::string> cause = failure_cause_ ? failure_cause_() : std::nullopt;
    const std::string why = cause.value_or(executed.error().message);
    fail_step(sched, why, outputs);
    // An executor that can run no more steps stops the engine (which ends every request).
    if (executor_->failure() || cause) return make_error("{}", why);
    return outputs;
  }
  RunnerOutput& result = *executed;
  if (kv_connector_) kv_connector_->on_loads(scheduler_, result.kv_loads);
  accept_constrained(result);
  end_failed(result, mask_errors, outputs);
  std::unordered_map<RequestHandle, std::vector<TokenLogprobs>> logprobs;
  for (RequestSamples& s : result.sampled) logprobs[s.id] = std::move(s.logprobs);
  std::unordered_map<RequestHandle, std::vector<TokenLogprobs>> prompt_logprobs;
  for (auto& [id, scored] : result.prompt_logprobs) prompt_logprobs[id] = std::move(scored);
  std::unordered_map<RequestHandle, RequestUpdate> updates;
  for (RequestUpdate& u : scheduler_.update_from_output(sched, result))
    updates.emplace(u.id, std::move(u));
  // Prefills finished for a remote decode: their blocks go under a lease.
  std::unordered_map<RequestHandle, KvTransferResult> held;
  if (kv_connector_) held = kv_connector_->lease_held(scheduler_);

  for (const ScheduledTokens& s : sched.scheduled) {
    if (!request_state_.contains(s.id)) continue;  // failed and reported above
    const auto update = updates.find(s.id);
    std::vector<TokenLogprobs> fresh;
    if (const auto p = prompt_logprobs.find(s.id); p != prompt_logprobs.end())
      fresh = fresh_prompt_logprobs(s.id, starts.at(s.id), p->second);
    if (update == updates.end() && fresh.empty()) continue;
    EngineCoreOutput out = output_for(s.id);
    out.prompt_logprobs = std::move(fresh);
    if (update != updates.end()) {
      const RequestUpdate& u = update->second;
      out.new_token_ids = u.new_token_ids;
      counters_.generation_tokens += static_cast<int64_t>(u.new_token_ids.size());
      const int64_t drafts = static_cast<int64_t>(s.draft_token_ids.size());
      counters_.spec_decode.observe(drafts, drafts - static_cast<int64_t>(u.num_rejected_drafts));
      if (request_state_.at(s.id).wants_logprobs) {
        std::vector<TokenLogprobs>& lp = logprobs[s.id];
        lp.resize(std::min(lp.size(), u.new_token_ids.size()));
        out.new_logprobs = std::move(lp);
      }
      out.stop_token_id = u.stop_token_id;
      if (u.finished)
        out.finish_reason = *u.finished == RequestStatus::kFinishedStopped ? FinishReason::kStop
                                                                           : FinishReason::kLength;
    }
    if (const auto h = held.find(s.id); h != held.end()) out.kv_transfer = h->second;
    if (out.finished()) retire(s.id);
    outputs.push_back(std::move(out));
  }
  return outputs;
}

}  // namespace kestrel
