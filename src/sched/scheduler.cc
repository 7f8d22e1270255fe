#include "sched/scheduler.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
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
  if (c.num_lookahead_tokens < 0)
    return make_error("scheduler: num_lookahead_tokens must be >= 0 (got {})",
                      c.num_lookahead_tokens);
  // Otherwise a long request would preempt itself forever.
  std::vector<KVCacheSpec> groups =
      c.kv_groups.empty() ? std::vector<KVCacheSpec>{KVCacheSpec{}} : c.kv_groups;
  for (KVCacheSpec& g : groups) {
    g.block_size = c.block_size;  // as the KV cache manager uses them
    if (g.kind == KVCacheKind::kSlidingWindow && g.sliding_window < 1)
      return make_error("scheduler: a sliding-window KV group needs a window >= 1 (got {})",
                        g.sliding_window);
  }
  const int64_t blocks_per_seq =
      max_blocks_per_request(groups, c.max_model_len + c.num_lookahead_tokens,
                             c.max_num_batched_tokens + c.num_lookahead_tokens);
  if (c.num_blocks - 1 < blocks_per_seq) {
    return make_error(
        "scheduler: {} usable KV blocks cannot hold one sequence of max_model_len "
        "{} ({} blocks of {} over {} KV cache groups)",
        c.num_blocks - 1, c.max_model_len, blocks_per_seq, c.block_size, groups.size());
  }
  return Status::Ok();
}

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config),
      kv_(config.num_blocks, config.block_size, config.enable_prefix_caching, config.kv_groups,
          StateCheckpointConfig{config.has_recurrent_state, int32_t(config.max_num_seqs),
                                config.num_state_checkpoints}) {
  const Status s = validate(config);
  KCHECK(s.ok(), "{}", s.message());
  if (config_.has_recurrent_state)
    for (int32_t slot = int32_t(config_.max_num_seqs) - 1; slot >= 0; --slot)
      free_running_slots_.push_back(slot);
}

void Scheduler::take_running_slot(Request& req) {
  if (!config_.has_recurrent_state || req.running_slot >= 0) return;
  // At most max_num_seqs requests run, so a slot is free for each.
  KCHECK(!free_running_slots_.empty(), "request {}: all {} running state slots are taken", req.id,
         config_.max_num_seqs);
  req.running_slot = free_running_slots_.back();
  free_running_slots_.pop_back();
}

void Scheduler::put_back_running_slot(Request& req) {
  if (req.running_slot >= 0) free_running_slots_.push_back(std::exchange(req.running_slot, -1));
}

Status Scheduler::add_request(RequestSpec spec) {
  const RequestHandle id = spec.id;
  if (requests_.contains(id)) return make_error("request {}: duplicate id", id);
  if (spec.prompt.empty()) return make_error("request {}: empty prompt", id);
  if (spec.max_tokens < 1)
    return make_error("request {}: max_tokens must be >= 1, got {}", id, spec.max_tokens);
  if ((spec.remote_decode || spec.remote_prefill) && config_.has_recurrent_state &&
      config_.num_state_checkpoints == 0)
    return make_error(
        "request {}: a KV transfer of this model moves its linear-attention state, and this "
        "instance keeps no state slot for one",
        id);
  const int64_t len = static_cast<int64_t>(spec.prompt.size());
  if (len >= config_.max_model_len) {
    return make_error("request {}: prompt of {} tokens does not fit max_model_len {}", id, len,
                      config_.max_model_len);
  }
  auto req = std::make_unique<Request>(std::move(spec), next_arrival_++);
  update_block_hashes(*req);
  waiting_.push_back(req.get());
  requests_.put(id, std::move(req));
  return Status::Ok();
}

void Scheduler::set_draft_tokens(RequestHandle id, std::vector<int32_t> draft_token_ids) {
  Request* req = find_request(id);
  if (req == nullptr || req->is_finished()) return;
  req->draft_token_ids = std::move(draft_token_ids);
}

int64_t Scheduler::num_to_schedule(const Request& req, int64_t budget) const {
  const int64_t known = req.num_tokens() - req.num_computed_tokens;
  // Drafts ride only on the step that reaches the last known token, and never past the
  // context window or max_tokens (the token sampled after them needs a place too).
  const int64_t room =
      std::min(config_.max_model_len - req.num_tokens(), req.max_tokens - req.num_output_tokens()) -
      1;
  const int64_t drafts = std::min<int64_t>(static_cast<int64_t>(req.draft_token_ids.size()),
                                           std::max<int64_t>(room, 0));
  return std::min(known + (known <= budget ? drafts : 0), budget);
}

int64_t Scheduler::align_to_checkpoint(const Request& req, int64_t start, int64_t num_new) const {
  const int64_t prompt = req.num_prompt_tokens();
  if (!config_.enable_prefix_caching || !kv_.checkpoints_state() || start >= prompt) return num_new;
  const int64_t bs = config_.block_size, end = start + num_new;
  if (end < prompt) {
    const int64_t aligned = end / bs * bs;  // a chunk that stops short ends on a boundary
    return aligned > start ? aligned - start : num_new;
  }
  // The last boundary a hit on this prompt can resume from (a hit never covers the last token):
  // its state is kept.
  const int64_t last = (prompt - 1) / bs * bs;
  return start < last && end > last ? last - start : num_new;
}

void Scheduler::save_checkpoint(Request& req, int64_t num_new, SchedulerOutput& out) {
  const int64_t end = req.num_computed_tokens + num_new;
  if (!config_.enable_prefix_caching || end % config_.block_size != 0) return;
  // In the prompt: every boundary before its last token (where a repeat of it can resume).
  if (end <= req.num_prompt_tokens() - 1) {
    if (const auto slot = kv_.reserve_checkpoint(req.block_hashes, end / config_.block_size))
      out.state_ops.push_back(
          StateOp{StateOpKind::kCopyAfter, req.id, req.running_slot, -1, *slot});
    return;
  }
  // Past it, a step ending on a boundary keeps the state there for a later prompt that repeats
  // this one and its output (a chat's next turn), one per request: the new one replaces the
  // last. Not a step with drafts: its state after the step is that of the accepted tokens.
  const bool drafts = num_new > req.num_tokens() - req.num_computed_tokens;
  const size_t blocks = size_t(end / config_.block_size);
  if (drafts || blocks > req.block_hashes.size()) return;
  if (const auto slot = replace_decode_checkpoint(&req, req.block_hashes[blocks - 1]))
    out.state_ops.push_back(StateOp{StateOpKind::kCopyAfter, req.id, req.running_slot, -1, *slot});
}

std::optional<int32_t> Scheduler::replace_decode_checkpoint(Request* req, const BlockHash& hash) {
  // The old one goes first, so its slot is the one the new one takes (not another prefix's).
  if (req != nullptr && req->decode_checkpoint) kv_.release_checkpoint(*req->decode_checkpoint);
  const std::optional<int32_t> slot = kv_.reserve_checkpoint(std::span(&hash, 1), 1);
  if (req != nullptr) req->decode_checkpoint = slot ? std::optional(hash) : std::nullopt;
  return slot;
}

void Scheduler::add_to_output(Request& req, int64_t num_new, SchedulerOutput& out) {
  ScheduledTokens work;
  work.id = req.id;
  work.num_tokens = num_new;
  work.state_slot = req.running_slot;
  const int64_t known = req.num_tokens() - req.num_computed_tokens;
  if (num_new > known)
    work.draft_token_ids.assign(req.draft_token_ids.begin(),
                                req.draft_token_ids.begin() + (num_new - known));
  out.scheduled.push_back(std::move(work));
  const size_t num_groups = kv_.num_groups();
  auto table = [&](size_t g, size_t from) {
    const std::span<const BlockId> t = kv_.block_table(req.id, g);
    return std::vector<BlockId>(t.begin() + std::ptrdiff_t(std::min(from, t.size())), t.end());
  };
  if (!req.known_to_worker) {
    NewRequestData d;
    d.id = req.id;
    d.prompt_token_ids = req.prompt_token_ids;
    d.sampling = req.sampling;
    for (size_t g = 0; g < num_groups; ++g) d.block_ids.push_back(table(g, 0));
    d.num_computed_tokens = req.num_computed_tokens;
    out.new_requests.push_back(std::move(d));
    req.known_to_worker = true;
  } else {
    CachedRequestData d;
    d.id = req.id;
    d.resumed_from_preemption = req.resumed;
    // A sliding window only turns entries the worker has into nulls, which no query of it
    // reads again: the worker needs only the new entries.
    for (size_t g = 0; g < num_groups; ++g)
      d.new_block_ids.push_back(table(g, req.resumed ? 0 : req.blocks_sent[g]));
    d.num_computed_tokens = req.num_computed_tokens;
    out.cached_requests.push_back(std::move(d));
  }
  req.blocks_sent.resize(num_groups);
  for (size_t g = 0; g < num_groups; ++g) req.blocks_sent[g] = kv_.block_table(req.id, g).size();
  req.resumed = false;
}

void Scheduler::publish_blocks(const Request& req, int64_t num_new_tokens) {
  // Published when scheduled, not when computed: the forward pass writes every token's K/V of a
  // layer before any attention of that layer reads, so a request admitted later in this same
  // step can already share these blocks (vLLM caches at allocation for the same reason).
  const int64_t end = std::min(req.num_computed_tokens + num_new_tokens, req.num_tokens());
  kv_.cache_blocks(req.id, req.all_token_ids, end, req.block_hashes, &published_);
}

Request* Scheduler::preempt_newest() {
  Request* victim = running_.back();
  running_.pop_back();
  kv_.free(victim->id);
  // A loaded state not yet copied is not needed any more (it starts again from position 0); a
  // held one stays, written already or by its next pass.
  if (victim->loaded_state >= 0) kv_.put_back_state_slot(std::exchange(victim->loaded_state, -1));
  put_back_running_slot(*victim);  // it restarts from position 0
  victim->num_computed_tokens = 0;
  victim->status = RequestStatus::kPreempted;
  victim->resumed = victim->known_to_worker;
  waiting_.push_front(victim);
  ++num_preemptions_;
  return victim;
}

Request* Scheduler::give_back_newest() {
  Request* victim = running_.back();
  running_.pop_back();
  kv_.free(victim->id);
  put_back_states(*victim);
  put_back_running_slot(*victim);
  victim->status = RequestStatus::kFinishedStopped;
  finished_since_last_step_.push_back(victim->id);
  given_back_.push_back(victim->id);
  ++num_preemptions_;
  return victim;
}

bool Scheduler::admit_remote(Request& req, SchedulerOutput& out) {
  ComputedBlocks hit;
  std::optional<int32_t> state;
  if (config_.has_recurrent_state) {
    state = kv_.take_state_slot();
    if (!state) return false;
  } else if (config_.enable_prefix_caching && req.read_prefix_cache) {
    hit = kv_.get_computed_blocks(req.all_token_ids, req.block_hashes);
  }
  const int64_t prompt = req.num_prompt_tokens();
  if (!kv_.allocate_slots(req.id, prompt - hit.num_tokens, hit)) {
    if (state) kv_.put_back_state_slot(*state);
    return false;
  }
  waiting_.pop_front();
  const RemotePrefill& remote = *req.remote_prefill;
  // Only what the local prefix cache lacks: the blocks from the hit to the prompt's last.
  const int64_t first = hit.num_blocks;
  const int64_t last = (prompt + config_.block_size - 1) / config_.block_size;
  const std::span<const BlockId> table = kv_.block_table(req.id, 0);
  KCHECK(int64_t(remote.blocks.size()) >= last && int64_t(table.size()) >= last,
         "request {}: {} remote and {} local blocks for a prompt of {} blocks", req.id,
         remote.blocks.size(), table.size(), last);
  KvLoad load;
  load.load_id = next_load_id_++;
  load.id = req.id;
  load.host = remote.host;
  load.port = remote.port;
  load.tp_size = remote.tp_size;
  load.timeout_ms = remote.timeout_ms;
  if (state) {
    load.remote_state = remote.state_slot;
    load.local_state = *state;
    req.loaded_state = *state;
  }
  for (int64_t i = first; i < last; ++i) {
    load.remote_blocks.push_back(remote.blocks[size_t(i)]);
    load.local_blocks.push_back(table[size_t(i)]);
  }
  if (req.status == RequestStatus::kWaiting) req.num_cached_tokens = hit.num_tokens;
  req.kv_load_id = load.load_id;
  req.kv_load_reported = false;
  req.kv_hit_tokens = hit.num_tokens;
  req.status = RequestStatus::kWaitingForRemoteKvs;
  loading_.push_back(&req);
  out.kv_loads.push_back(std::move(load));
  return true;
}

void Scheduler::run_ready_loads() {
  while (!ready_.empty() && static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    Request* req = ready_.front();
    ready_.erase(ready_.begin());
    req->status = RequestStatus::kRunning;
    running_.push_back(req);
  }
}

std::vector<std::pair<RequestHandle, HeldKv>> Scheduler::take_held() {
  std::vector<std::pair<RequestHandle, HeldKv>> out;
  out.swap(held_);
  return out;
}

void Scheduler::free_held(const HeldKv& held) {
  kv_.free_detached(held.blocks);
  if (held.state_slot >= 0) kv_.put_back_state_slot(held.state_slot);
}

void Scheduler::transfer_state(Request& req, int64_t num_new, SchedulerOutput& out) {
  if (req.loaded_state >= 0) {
    out.state_ops.push_back(
        StateOp{StateOpKind::kCopyBefore, req.id, req.loaded_state, -1, req.running_slot});
    copied_states_.push_back(std::exchange(req.loaded_state, -1));
  }
  // Only a step that ends at the prompt's last token has that token last (a recompute after
  // preemption may run past it; the state held then is still the one written first).
  if (req.held_state >= 0 && req.num_computed_tokens < req.num_prompt_tokens() &&
      req.num_computed_tokens + num_new == req.num_prompt_tokens())
    out.state_ops.push_back(
        StateOp{StateOpKind::kHold, req.id, req.running_slot, -1, req.held_state});
}

void Scheduler::put_back_states(Request& req) {
  for (int32_t* slot : {&req.held_state, &req.loaded_state})
    if (*slot >= 0) kv_.put_back_state_slot(std::exchange(*slot, -1));
}

std::optional<RequestHandle> Scheduler::kv_load_reported(uint64_t load_id) {
  if (const auto orphan = orphan_loads_.find(load_id); orphan != orphan_loads_.end()) {
    free_held(orphan->second);
    orphan_loads_.erase(orphan);
    return std::nullopt;
  }
  for (Request* req : loading_)
    if (req->kv_load_id == load_id) {
      req->kv_load_reported = true;
      return req->id;
    }
  return std::nullopt;
}

void Scheduler::kv_load_decided(RequestHandle id, bool loaded, bool recompute) {
  Request* req = find_request(id);
  if (req == nullptr || req->status != RequestStatus::kWaitingForRemoteKvs) return;
  KCHECK(req->kv_load_reported, "request {}: its load is decided before its workers reported it",
         id);
  if (!loaded && !recompute) {
    finish(id, RequestStatus::kFinishedAborted);
    return;
  }
  loading_.erase(std::find(loading_.begin(), loading_.end(), req));
  req->remote_prefill.reset();
  if (!loaded) put_back_states(*req);  // its workers are done writing the slot
  // A loaded prompt continues from its last token (its logits give the first output); a load
  // given up prefills what the local prefix cache did not have.
  req->num_computed_tokens = loaded ? req->num_prompt_tokens() - 1 : req->kv_hit_tokens;
  kv_.rollback_slots(id, req->num_computed_tokens);
  req->status = RequestStatus::kWaiting;
  ready_.push_back(req);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  published_.clear();
  for (const int32_t slot : copied_states_) kv_.put_back_state_slot(slot);
  copied_states_.clear();
  out.finished_ids = std::move(finished_since_last_step_);
  finished_since_last_step_.clear();
  take_snapshot_saves(out);
  int64_t budget = config_.max_num_batched_tokens;
  run_ready_loads();

  // Running requests: each continues its prefill chunk or decodes (one token plus its drafts).
  bool short_of_blocks = false;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Request* req = running_[i];
    const int64_t num_new =
        align_to_checkpoint(*req, req->num_computed_tokens, num_to_schedule(*req, budget));
    bool scheduled = false;
    while (true) {
      if (kv_.allocate_slots(req->id, num_new, {}, config_.num_lookahead_tokens)) {
        scheduled = true;
        break;
      }
      // running_ stays in admission order, so the victims are never ones already scheduled.
      short_of_blocks = true;
      Request* victim = config_.give_back_preempted ? give_back_newest() : preempt_newest();
      if (!config_.give_back_preempted) out.preempted_ids.push_back(victim->id);
      if (victim == req) break;
    }
    if (!scheduled) break;
    take_running_slot(*req);
    transfer_state(*req, num_new, out);
    save_checkpoint(*req, num_new, out);
    add_to_output(*req, num_new, out);
    publish_blocks(*req, num_new);
    budget -= num_new;
  }

  // Waiting requests, front first; none when this step had to preempt (memory is short).
  while (!short_of_blocks && !waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    Request* req = waiting_.front();
    if (req->remote_prefill) {
      // Loads are bounded too (they hold blocks): back-pressure, not an unbounded queue.
      if (static_cast<int64_t>(loading_.size()) >= config_.max_num_seqs || !admit_remote(*req, out))
        break;
      continue;
    }
    ComputedBlocks hit;
    if (config_.enable_prefix_caching && req->read_prefix_cache)
      hit = kv_.get_computed_blocks(req->all_token_ids, req->block_hashes);
    const int64_t remaining = req->num_tokens() - hit.num_tokens;
    if (!config_.enable_chunked_prefill && remaining > budget) break;
    const int64_t num_new = align_to_checkpoint(*req, hit.num_tokens, std::min(remaining, budget));
    if (holds_state(*req) && req->held_state < 0) {
      const std::optional<int32_t> slot = kv_.take_state_slot();
      if (!slot) break;  // every one holds a state: leases end, and give them back
      req->held_state = *slot;
    }
    if (!kv_.allocate_slots(req->id, num_new, hit, config_.num_lookahead_tokens)) break;
    waiting_.pop_front();
    if (req->status == RequestStatus::kWaiting) req->num_cached_tokens = hit.num_tokens;
    req->num_computed_tokens = hit.num_tokens;
    req->status = RequestStatus::kRunning;
    running_.push_back(req);
    take_running_slot(*req);
    if (hit.state_checkpoint >= 0)
      out.state_ops.push_back(
          StateOp{StateOpKind::kCopyBefore, req->id, hit.state_checkpoint, -1, req->running_slot});
    transfer_state(*req, num_new, out);
    save_checkpoint(*req, num_new, out);
    add_to_output(*req, num_new, out);
    publish_blocks(*req, num_new);
    budget -= num_new;
  }

  out.total_num_scheduled_tokens = config_.max_num_batched_tokens - budget;
  return out;
}

void Scheduler::update_block_hashes(Request& req) const {
  if (config_.enable_prefix_caching)
    extend_block_hashes(req.all_token_ids, config_.block_size, req.cache_keys, &req.block_hashes);
}

bool Scheduler::append_and_check_stop(Request& req, int32_t token, RequestUpdate& update) {
  req.append_output_token(token);
  update_block_hashes(req);
  update.new_token_ids.push_back(token);
  // vLLM's order: the length limits first (a last token that is also EOS reports "length"),
  // then EOS, which reports no stop_reason even when it is also a listed stop id.
  if (req.num_output_tokens() >= req.max_tokens || req.num_tokens() >= config_.max_model_len) {
    update.finished = RequestStatus::kFinishedLength;
    return true;
  }
  const StopRules& rules = req.stop;
  if (req.num_output_tokens() < rules.min_tokens) return false;
  auto listed = [token](const std::vector<int32_t>& ids) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  };
  if (listed(rules.eos_token_ids)) {
    update.finished = RequestStatus::kFinishedStopped;
    return true;
  }
  if (listed(rules.stop_token_ids)) {
    update.finished = RequestStatus::kFinishedStopped;
    update.stop_token_id = token;
    req.stop_token_id = token;
    return true;
  }
  return false;
}

std::vector<RequestUpdate> Scheduler::update_from_output(const SchedulerOutput& output,
                                                         const RunnerOutput& result) {
  kv_.commit_checkpoints();  // the step ran: the states it saved are there
  std::unordered_map<RequestHandle, const RequestSamples*> samples;
  for (const RequestSamples& s : result.sampled) samples[s.id] = &s;
  std::unordered_set<RequestHandle> failed;
  for (const RequestFailure& f : result.failures) failed.insert(f.id);
  std::vector<RequestUpdate> updates;
  for (const ScheduledTokens& work : output.scheduled) {
    Request* found = find_request(work.id);
    if (found == nullptr || found->status != RequestStatus::kRunning) continue;
    if (failed.count(work.id) != 0) continue;  // the engine core ends it
    Request& req = *found;
    const int64_t known_before = req.num_tokens(), start = req.num_computed_tokens;
    req.num_computed_tokens += work.num_tokens;
    if (req.num_computed_tokens < known_before) continue;  // a prefill chunk samples nothing
    const auto s = samples.find(work.id);
    KCHECK(s != samples.end(), "request {}: no sampled token", work.id);
    const std::vector<int32_t>& tokens = s->second->tokens;
    const size_t num_drafts = work.draft_token_ids.size();
    KCHECK(!tokens.empty() && tokens.size() <= num_drafts + 1,
           "request {}: {} tokens for {} drafts", work.id, tokens.size(), num_drafts);
    RequestUpdate update;
    update.id = work.id;
    update.num_rejected_drafts = num_drafts + 1 - tokens.size();
    // The worker's proposals follow its last sampled token.
    req.draft_token_ids = s->second->draft_token_ids;
    for (const int32_t token : tokens)
      if (append_and_check_stop(req, token, update)) break;
    // Every token but the last appended one has K/V now (accepted drafts were computed as
    // inputs); the slots of rejected drafts are overwritten by the next step.
    req.num_computed_tokens = req.num_tokens() - 1;
    kv_.rollback_slots(req.id, req.num_computed_tokens);
    if (num_drafts > 0) note_snapshot_save(req, start, work, int64_t(tokens.size()) - 1);
    if (update.finished) finish(req.id, *update.finished);
    updates.push_back(std::move(update));
  }
  return updates;
}

void Scheduler::note_snapshot_save(const Request& req, int64_t start, const ScheduledTokens& work,
                                   int64_t num_accepted) {
  if (!config_.enable_prefix_caching || !kv_.checkpoints_state()) return;
  // The step ran positions [start, end): the worker kept the state after each of its last n
  // tokens but one from first_kept on (snapshots 0..n-1), and its slot holds the state after
  // the kept ones, [0, kept) — more than the scheduler keeps when a stop cut them.
  const int64_t bs = config_.block_size, n = int64_t(work.draft_token_ids.size());
  const int64_t end = start + work.num_tokens, first_kept = end - 1 - n;
  const int64_t kept = end - n + num_accepted;
  const int64_t boundary = std::min(kept, req.num_computed_tokens) / bs * bs;
  if (boundary <= start || boundary < req.num_prompt_tokens() ||
      size_t(boundary / bs) > req.block_hashes.size())
    return;
  int32_t snapshot = -1;
  if (boundary < kept) {
    if (boundary - 1 < first_kept) return;  // among the known tokens before the drafts
    snapshot = int32_t(boundary - 1 - first_kept);
  }
  pending_snapshot_saves_.push_back(SnapshotSave{
      req.id, req.block_hashes[size_t(boundary / bs) - 1], req.running_slot, snapshot});
}

void Scheduler::take_snapshot_saves(SchedulerOutput& out) {
  for (const SnapshotSave& s : pending_snapshot_saves_)
    if (const auto slot = replace_decode_checkpoint(find_request(s.id), s.hash))
      out.state_ops.push_back(StateOp{StateOpKind::kCopyBefore, s.id, s.slot, s.snapshot, *slot});
  pending_snapshot_saves_.clear();
}

void Scheduler::fail_step(const SchedulerOutput& output) {
  // Also the blocks of requests aborted since: freed blocks stay cached, so they too would
  // serve K/V that was never written.
  kv_.uncache(published_);
  published_.clear();
  kv_.abort_checkpoints();
  for (const ScheduledTokens& work : output.scheduled)
    finish(work.id, RequestStatus::kFinishedAborted);
}

void Scheduler::remove_from_queues(Request* req) {
  for (auto* queue : {&running_, &loading_, &ready_}) {
    const auto it = std::find(queue->begin(), queue->end(), req);
    if (it != queue->end()) queue->erase(it);
  }
  const auto w = std::find(waiting_.begin(), waiting_.end(), req);
  if (w != waiting_.end()) waiting_.erase(w);
}

void Scheduler::finish(RequestHandle id, RequestStatus status) {
  KCHECK(is_finished_status(status), "finish() needs a finished status, got {}",
         status_name(status));
  Request* req = find_request(id);
  if (req == nullptr || req->is_finished()) return;
  remove_from_queues(req);
  if (req->status == RequestStatus::kWaitingForRemoteKvs && !req->kv_load_reported) {
    // The workers may still be writing its blocks: they go with the load until it reports.
    orphan_loads_.emplace(req->kv_load_id,
                          HeldKv{kv_.detach(id), std::exchange(req->loaded_state, -1)});
  } else if (req->remote_decode && (status == RequestStatus::kFinishedLength ||
                                    status == RequestStatus::kFinishedStopped)) {
    held_.emplace_back(id, HeldKv{kv_.detach(id), std::exchange(req->held_state, -1)});
  } else {
    kv_.free(id);
  }
  put_back_states(*req);
  put_back_running_slot(*req);
  req->status = status;
  finished_since_last_step_.push_back(id);
}

Request* Scheduler::find_request(RequestHandle id) const {
  const std::unique_ptr<Request>* r = requests_.find(id);
  return r == nullptr ? nullptr : r->get();
}

const Request* Scheduler::request(RequestHandle id) const {
  return find_request(id);
}

void Scheduler::release(RequestHandle id) {
  const Request* r = find_request(id);
  if (r != nullptr && r->is_finished()) requests_.erase(id);
}

}  // namespace kestrel
