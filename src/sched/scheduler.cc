#include "sched/scheduler.h"

#include <algorithm>
#include <utility>

namespace kestrel {

Status validate(const SchedulerConfig& c) {
  if (c.max_num_batched_tokens < 1 || c.max_num_seqs < 1 || c.max_model_len < 2) {
    return make_error(
        "scheduler: need max_num_batched_tokens >= 1, max_num_seqs >= 1, "
        "max_model_len >= 2 (got {}, {}, {})",
        c.max_num_batched_tokens, c.max_num_seqs, c.max_model_len);
  }
  if (c.block_size < 1 || c.num_blocks < 2) {
    return make_error("scheduler: need block_size >= 1 and num_blocks >= 2 (got {}, {})",
                      c.block_size, c.num_blocks);
  }
  // A request is only ever scheduled whole without chunking, and recompute after preemption
  // covers its outputs too, so the budget must hold a full-length sequence.
  if (!c.enable_chunked_prefill && c.max_num_batched_tokens < c.max_model_len) {
    return make_error(
        "scheduler: without chunked prefill max_num_batched_tokens ({}) must be "
        ">= max_model_len ({})",
        c.max_num_batched_tokens, c.max_model_len);
  }
  // Otherwise a long request would preempt itself forever.
  const int64_t blocks_per_seq = (c.max_model_len + c.block_size - 1) / c.block_size;
  if (c.num_blocks - 1 < blocks_per_seq) {
    return make_error(
        "scheduler: {} usable KV blocks cannot hold one sequence of max_model_len "
        "{} ({} blocks of {})",
        c.num_blocks - 1, c.max_model_len, blocks_per_seq, c.block_size);
  }
  return Status::Ok();
}

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config), kv_(config.num_blocks, config.block_size, config.enable_prefix_caching) {
  const Status s = validate(config);
  KCHECK(s.ok(), "{}", s.message());
}

Status Scheduler::add_request(const RequestId& id, std::vector<int32_t> prompt, int64_t max_tokens,
                              bool read_prefix_cache, std::vector<uint64_t> cache_keys) {
  if (requests_.count(id) != 0) return make_error("request {}: duplicate id", id);
  if (prompt.empty()) return make_error("request {}: empty prompt", id);
  if (max_tokens < 1)
    return make_error("request {}: max_tokens must be >= 1, got {}", id, max_tokens);
  const int64_t len = static_cast<int64_t>(prompt.size());
  if (len >= config_.max_model_len) {
    return make_error("request {}: prompt of {} tokens does not fit max_model_len {}", id, len,
                      config_.max_model_len);
  }
  auto req = std::make_unique<Request>(id, std::move(prompt), max_tokens, next_arrival_++);
  req->read_prefix_cache = read_prefix_cache;
  req->cache_keys = std::move(cache_keys);
  waiting_.push_back(req.get());
  requests_.emplace(id, std::move(req));
  return Status::Ok();
}

ScheduledRequest Scheduler::make_scheduled(const Request& req, int64_t num_new_tokens) const {
  ScheduledRequest s;
  s.id = req.id;
  s.num_new_tokens = num_new_tokens;
  s.start_position = req.num_computed_tokens;
  const std::span<const BlockId> table = kv_.block_table(req.id);
  s.block_table.assign(table.begin(), table.end());
  s.is_prefill_chunk = req.num_computed_tokens + num_new_tokens < req.num_tokens();
  s.num_cached_tokens = req.num_cached_tokens;
  return s;
}

void Scheduler::publish_blocks(const Request& req, int64_t num_new_tokens) {
  // Published when scheduled, not when computed: the forward pass writes every token's K/V of a
  // layer before any attention of that layer reads, so a request admitted later in this same
  // step can already share these blocks (vLLM caches at allocation for the same reason).
  kv_.cache_blocks(req.id, req.all_token_ids, req.num_computed_tokens + num_new_tokens,
                   req.cache_keys);
}

Request* Scheduler::preempt_newest() {
  Request* victim = running_.back();
  running_.pop_back();
  kv_.free(victim->id);
  victim->num_computed_tokens = 0;
  victim->status = RequestStatus::kPreempted;
  waiting_.push_front(victim);
  ++num_preemptions_;
  return victim;
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  out.finished_ids = std::move(finished_since_last_step_);
  finished_since_last_step_.clear();
  int64_t budget = config_.max_num_batched_tokens;

  // Running requests: each continues its prefill chunk or decodes one token.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Request* req = running_[i];
    const int64_t num_new = std::min(req->num_tokens() - req->num_computed_tokens, budget);
    bool scheduled = false;
    while (true) {
      if (kv_.allocate_slots(req->id, num_new)) {
        scheduled = true;
        break;
      }
      // running_ stays in admission order, so the victims are never ones already scheduled.
      Request* victim = preempt_newest();
      out.preempted_ids.push_back(victim->id);
      if (victim == req) break;
    }
    if (!scheduled) break;
    out.scheduled.push_back(make_scheduled(*req, num_new));
    publish_blocks(*req, num_new);
    budget -= num_new;
  }

  // Waiting requests, front first; none when this step had to preempt (memory is short).
  while (out.preempted_ids.empty() && !waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    Request* req = waiting_.front();
    ComputedBlocks hit;
    if (config_.enable_prefix_caching && req->read_prefix_cache)
      hit = kv_.get_computed_blocks(req->all_token_ids, req->cache_keys);
    const int64_t remaining = req->num_tokens() - hit.num_tokens;
    if (!config_.enable_chunked_prefill && remaining > budget) break;
    const int64_t num_new = std::min(remaining, budget);
    if (!kv_.allocate_slots(req->id, num_new, hit)) break;
    waiting_.pop_front();
    if (req->status == RequestStatus::kWaiting) req->num_cached_tokens = hit.num_tokens;
    req->num_computed_tokens = hit.num_tokens;
    req->status = RequestStatus::kRunning;
    running_.push_back(req);
    out.scheduled.push_back(make_scheduled(*req, num_new));
    publish_blocks(*req, num_new);
    budget -= num_new;
  }

  out.total_num_scheduled_tokens = config_.max_num_batched_tokens - budget;
  return out;
}

std::vector<RequestId> Scheduler::update_from_output(
    const SchedulerOutput& output, const std::unordered_map<RequestId, int32_t>& sampled) {
  std::vector<RequestId> finished;
  for (const ScheduledRequest& s : output.scheduled) {
    const auto it = requests_.find(s.id);
    if (it == requests_.end() || it->second->status != RequestStatus::kRunning) continue;
    Request& req = *it->second;
    KCHECK(req.num_computed_tokens == s.start_position, "request {}: stale output", s.id);
    req.num_computed_tokens += s.num_new_tokens;
    if (s.is_prefill_chunk) continue;
    const auto tok = sampled.find(s.id);
    KCHECK(tok != sampled.end(), "request {}: no sampled token", s.id);
    req.append_output_token(tok->second);
    if (req.num_output_tokens() >= req.max_tokens || req.num_tokens() >= config_.max_model_len) {
      finish(req.id, RequestStatus::kFinishedLength);
      finished.push_back(req.id);
    }
  }
  return finished;
}

void Scheduler::fail_step(const SchedulerOutput& output) {
  for (const ScheduledRequest& s : output.scheduled) {
    kv_.uncache_unwritten(s.id, s.start_position);
    finish(s.id, RequestStatus::kFinishedAborted);
  }
}

void Scheduler::remove_from_queues(Request* req) {
  const auto r = std::find(running_.begin(), running_.end(), req);
  if (r != running_.end()) running_.erase(r);
  const auto w = std::find(waiting_.begin(), waiting_.end(), req);
  if (w != waiting_.end()) waiting_.erase(w);
}

void Scheduler::finish(const RequestId& id, RequestStatus status) {
  KCHECK(is_finished_status(status), "finish() needs a finished status, got {}",
         status_name(status));
  const auto it = requests_.find(id);
  if (it == requests_.end() || it->second->is_finished()) return;
  Request* req = it->second.get();
  remove_from_queues(req);
  kv_.free(id);
  req->status = status;
  finished_since_last_step_.push_back(id);
}

const Request* Scheduler::request(const RequestId& id) const {
  const auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

void Scheduler::release(const RequestId& id) {
  const auto it = requests_.find(id);
  if (it != requests_.end() && it->second->is_finished()) requests_.erase(it);
}

}  // namespace kestrel
