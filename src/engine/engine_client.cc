#include "engine/engine_client.h"

#include <algorithm>
#include <utility>

#include "base/logging.h"

namespace kestrel {

RequestOutput RequestStream::next() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return pending_.has_value() || final_.has_value(); });
  if (!pending_) return *final_;
  RequestOutput out = std::move(*pending_);
  pending_.reset();
  if (out.finished()) final_ = out;
  return out;
}

std::optional<RequestOutput> RequestStream::try_next() {
  std::lock_guard lock(mu_);
  if (!pending_) return std::nullopt;
  RequestOutput out = std::move(*pending_);
  pending_.reset();
  if (out.finished()) final_ = out;
  return out;
}

void RequestStream::set_notify(std::function<void()> fn) {
  bool waiting = false;
  {
    std::lock_guard lock(mu_);
    notify_ = fn;
    waiting = pending_.has_value();
  }
  if (waiting && fn) fn();
}

void RequestStream::push(RequestOutput&& out) {
  std::function<void()> notify;
  {
    std::lock_guard lock(mu_);
    if (final_ || (pending_ && pending_->finished())) return;  // nothing follows a finish
    if (pending_) {
      pending_->merge(std::move(out));
    } else {
      pending_ = std::move(out);
    }
    notify = notify_;
  }
  cv_.notify_all();
  if (notify) notify();
}

namespace {

void add_counters(EngineCoreCounters& sum, const EngineCoreCounters& c) {
  sum.steps += c.steps;
  sum.scheduled_tokens += c.scheduled_tokens;
  sum.prompt_tokens_computed += c.prompt_tokens_computed;
  sum.generation_tokens += c.generation_tokens;
  SpecDecodeStats& s = sum.spec_decode;
  s.num_drafts += c.spec_decode.num_drafts;
  s.num_draft_tokens += c.spec_decode.num_draft_tokens;
  s.num_accepted_tokens += c.spec_decode.num_accepted_tokens;
  const auto& pos = c.spec_decode.accepted_per_pos;
  if (s.accepted_per_pos.size() < pos.size()) s.accepted_per_pos.resize(pos.size(), 0);
  for (size_t i = 0; i < pos.size(); ++i) s.accepted_per_pos[i] += pos[i];
}

}  // namespace

EngineClient::EngineClient(CausalLM& model, const Tokenizer* tokenizer, Options options)
    : model_(model), options_(std::move(options)), processor_(tokenizer) {
  const size_t first = size_t(options_.first_engine_index);
  if (options_.executors.empty()) {
    ranks_.push_back(std::make_unique<Rank>(
        first, model, options_.scheduler, options_.eos_token_ids, std::move(options_.speculation)));
  }
  KCHECK(options_.lockstep.empty() || options_.lockstep.size() == options_.executors.size(),
         "{} lockstep members for {} data-parallel ranks", options_.lockstep.size(),
         options_.executors.size());
  KCHECK(options_.kv_connectors.empty() ||
             options_.kv_connectors.size() == std::max<size_t>(1, options_.executors.size()),
         "{} KV connectors for {} data-parallel ranks", options_.kv_connectors.size(),
         options_.executors.size());
  for (size_t i = 0; i < options_.executors.size(); ++i) {
    auto rank = std::make_unique<Rank>(first + ranks_.size(), std::move(options_.executors[i]),
                                       options_.scheduler, options_.eos_token_ids);
    if (!options_.lockstep.empty()) {
      rank->lockstep = std::move(options_.lockstep[i]);
      rank->core.set_execute_empty_steps(true);
      rank->core.set_failure_cause([ls = rank->lockstep.get()] { return ls->failure(); });
      // A peer's wave start (or the group's failure) wakes this rank's engine thread.
      rank->lockstep->set_wake([this] {
        { std::lock_guard lock(in_mu_); }
        in_cv_.notify_all();
      });
    }
    ranks_.push_back(std::move(rank));
  }
  options_.executors.clear();
  options_.lockstep.clear();
  for (size_t i = 0; i < options_.kv_connectors.size(); ++i) {
    Rank* rank = ranks_[i].get();
    options_.kv_connectors[i]->set_wake([this, rank] {
      rank->kv_wake.store(true);
      { std::lock_guard lock(in_mu_); }
      in_cv_.notify_all();
    });
    rank->core.set_kv_connector(std::move(options_.kv_connectors[i]));
  }
  options_.kv_connectors.clear();
  for (auto& rank : ranks_) {
    rank->stats.engine_index = int(rank->index);
    rank->stats.num_speculative_tokens = options_.num_speculative_tokens;
    rank->spec_logged_at = std::chrono::steady_clock::now();
  }
  for (auto& rank : ranks_) rank->thread = std::thread([this, r = rank.get()] { engine_loop(*r); });
  output_thread_ = std::thread([this] { output_loop(); });
}

void EngineClient::log_spec_decode(Rank& rank) {
  const auto now = std::chrono::steady_clock::now();
  if (options_.spec_log_interval.count() <= 0 ||
      now - rank.spec_logged_at < options_.spec_log_interval)
    return;
  const SpecDecodeStats& s = rank.core.counters().spec_decode;
  if (s.num_drafts != rank.spec_logged.num_drafts) {
    const std::string line = spec_decode_log_line(
        rank.spec_logged, s, std::chrono::duration<double>(now - rank.spec_logged_at).count());
    if (ranks_.size() == 1) {
      KLOG_INFO("{}", line);
    } else {
      KLOG_INFO("Engine {:03d}: {}", rank.index, line);  // vLLM's prefix with several engines
    }
  }
  rank.spec_logged = s;
  rank.spec_logged_at = now;
}

EngineClient::~EngineClient() {
  // Here a thread stuck in a failed group's collective is waited for: it ends at the timeout.
  (void)shutdown();
  for (auto& rank : ranks_)
    if (rank->thread.joinable()) rank->thread.join();
  if (output_thread_.joinable()) output_thread_.join();
}

Status EngineClient::validate(const GenerateRequest& request) const {
  const EngineRequest& r = request.engine;
  const std::string& id = request.id;
  if (id.empty()) return make_error("request id must not be empty");
  if (r.prompt_token_ids.empty()) return make_error("request {}: the prompt is empty", id);
  const int64_t vocab = model_.config().vocab_size;
  for (int32_t t : r.prompt_token_ids)
    if (t < 0 || t >= vocab)
      return make_error("request {}: token id {} is out of vocabulary (size {})", id, t, vocab);
  for (int32_t t : r.stop_token_ids)
    if (t < 0 || t >= vocab)
      return make_error("request {}: stop token id {} is out of vocabulary (size {})", id, t,
                        vocab);
  if (r.max_tokens < 1) return make_error("request {}: max_tokens must be at least 1", id);
  if (r.min_tokens < 0 || r.min_tokens > r.max_tokens)
    return make_error("request {}: min_tokens {} must be in [0, max_tokens {}]", id, r.min_tokens,
                      r.max_tokens);
  const int64_t max_len = options_.scheduler.max_model_len;
  if (static_cast<int64_t>(r.prompt_token_ids.size()) >= max_len)
    return make_error(
        "request {}: the prompt has {} tokens, which leaves no room for output "
        "within max_model_len {}",
        id, r.prompt_token_ids.size(), max_len);
  if (r.sampling.logprobs > static_cast<int>(vocab))
    return make_error("request {}: logprobs {} exceeds the vocabulary size", id,
                      r.sampling.logprobs);
  // Every rank has the same connector settings: the first one's say what can be served.
  if (const KvConnector* kv = ranks_[0]->core.kv_connector())
    KTRY(kv->check(r.kv_transfer, r.prompt_token_ids.size()));
  return {};
}

RequestHandle EngineClient::take_handle(const std::string& id) {
  RequestHandle h = next_handle_;
  if (free_handles_.empty()) {
    ++next_handle_;
  } else {
    h = free_handles_.back();
    free_handles_.pop_back();
  }
  handles_.emplace(id, h);
  return h;
}

void EngineClient::drop_handle(RequestHandle h) {
  const Live* live = live_.find(h);
  if (live == nullptr) return;
  --ranks_[live->rank]->live;
  handles_.erase(live->id);
  live_.erase(h);
  processor_.remove(h);
  free_handles_.push_back(h);
}

Expected<std::shared_ptr<RequestStream>> EngineClient::add_request(GenerateRequest request) {
  const KvTransferParams kv_transfer = request.engine.kv_transfer;
  auto added = submit(std::move(request));
  // A refused consumer request still tells its producer to free the prompt's blocks.
  if (!added.ok()) release_kv_refused(kv_transfer);
  return added;
}

Expected<std::shared_ptr<RequestStream>> EngineClient::submit(GenerateRequest request) {
  KTRY(validate(request));
  auto stream = std::make_shared<RequestStream>(request.id);
  RequestHandle h = 0;
  size_t target = 0;
  {
    std::lock_guard lock(req_mu_);
    if (handles_.count(request.id) != 0)
      return make_error("request id {} is already in use", request.id);
    size_t rank = 0;
    {
      std::lock_guard stats_lock(stats_mu_);
      for (const auto& r : ranks_)
        if (r->stats.dead || r->core.executor().failure())
          return make_error("the engine has failed and accepts no more requests");
      rank = pick_rank();
      next_tie_ = (rank + 1) % ranks_.size();
    }
    h = take_handle(request.id);
    if (Status st = processor_.add_request(h, request.engine.prompt_token_ids, request.output,
                                           request.engine.min_tokens);
        !st.ok()) {
      handles_.erase(request.id);
      free_handles_.push_back(h);
      return st.error();
    }
    live_.put(h, Live{request.id, stream, rank});
    ++ranks_[rank]->live;
    target = rank;
  }
  {
    std::lock_guard lock(in_mu_);
    if (stopping_) {
      std::lock_guard req_lock(req_mu_);
      drop_handle(h);
      return make_error("the engine is shutting down");
    }
    request.engine.id = h;
    ranks_[target]->inbox.emplace_back(std::move(request.engine));
  }
  in_cv_.notify_all();
  return stream;
}

size_t EngineClient::pick_rank() const {
  // vLLM's data-parallel balance: waiting requests weigh four times running ones. Requests sent
  // since the rank's last step count as waiting.
  size_t best = 0;
  int64_t best_score = 0;
  for (size_t k = 0; k < ranks_.size(); ++k) {
    const size_t r = (next_tie_ + k) % ranks_.size();
    const Rank& rank = *ranks_[r];
    const int64_t running = std::min(rank.stats.num_running, rank.live);
    const int64_t score = 4 * (rank.live - running) + running;
    if (k == 0 || score < best_score) {
      best = r;
      best_score = score;
    }
  }
  return best;
}

void EngineClient::abort(const std::string& id) {
  {
    // The handle is looked up and queued under both locks, so it cannot be recycled to another
    // request before its abort is in the inbox (the engine thread then finds it finished).
    std::lock_guard lock(in_mu_);
    if (stopping_) return;  // shutdown finishes every stream anyway
    std::lock_guard req_lock(req_mu_);
    const auto it = handles_.find(id);
    if (it == handles_.end()) return;
    const Live* live = live_.find(it->second);
    if (live == nullptr) return;
    ranks_[live->rank]->inbox.emplace_back(std::in_place_type<RequestHandle>, it->second);
  }
  in_cv_.notify_all();
}

size_t EngineClient::num_request_handles() const {
  std::lock_guard lock(req_mu_);
  return next_handle_;
}

void EngineClient::set_step_observer(std::function<void(int64_t, int)> fn) {
  std::lock_guard lock(stats_mu_);
  step_observer_ = std::move(fn);
}

std::vector<EngineStats> EngineClient::rank_stats() const {
  std::vector<EngineStats> out;
  {
    std::lock_guard lock(stats_mu_);
    for (const auto& r : ranks_) out.push_back(r->stats);
  }
  // A worker that dies (or a lockstep peer lost) while the engine idles fails the group before
  // any step notices.
  for (size_t i = 0; i < ranks_.size(); ++i)
    if (ranks_[i]->core.executor().failure() ||
        (ranks_[i]->lockstep && ranks_[i]->lockstep->failure()))
      out[i].dead = true;
  return out;
}

bool EngineClient::kv_backlog_full() const {
  const int64_t limit = kKvBacklogPerSeq * options_.scheduler.max_num_seqs;
  for (const auto& rank : ranks_) {
    const KvConnector* kv = rank->core.kv_connector();
    if (kv == nullptr || kv->num_pending() < limit) return false;
  }
  return true;
}

void EngineClient::release_kv_refused(const KvTransferParams& params) {
  if (KvConnector* kv = ranks_[0]->core.kv_connector()) kv->release_refused(params);
}

KvTransferStats EngineClient::kv_stats() const {
  KvTransferStats sum;
  for (const EngineStats& r : rank_stats()) {
    const KvTransferStats& k = r.kv;
    sum.loads += k.loads;
    sum.load_failures += k.load_failures;
    sum.recomputes += k.recomputes;
    sum.bytes_loaded += k.bytes_loaded;
    sum.ucx_bytes_loaded += k.ucx_bytes_loaded;
    sum.blocks_loaded += k.blocks_loaded;
    sum.load_seconds_sum += k.load_seconds_sum;
    for (size_t b = 0; b < sum.load_seconds_buckets.size(); ++b)
      sum.load_seconds_buckets[b] += k.load_seconds_buckets[b];
    sum.leases.active += k.leases.active;
    sum.leases.created += k.leases.created;
    sum.leases.released += k.leases.released;
    sum.leases.expired += k.leases.expired;
    sum.leases.heartbeats += k.leases.heartbeats;
  }
  return sum;
}

EngineStats EngineClient::stats() const {
  const std::vector<EngineStats> ranks = rank_stats();
  EngineStats s;
  s.num_speculative_tokens = options_.num_speculative_tokens;
  for (const EngineStats& r : ranks) {
    s.num_running += r.num_running;
    s.num_waiting += r.num_waiting;
    s.kv_cache_usage += r.kv_cache_usage / double(ranks.size());
    s.prefix_cache_queries += r.prefix_cache_queries;
    s.prefix_cache_hits += r.prefix_cache_hits;
    s.num_preemptions += r.num_preemptions;
    add_counters(s.counters, r.counters);
    s.dead = s.dead || r.dead;
  }
  return s;
}

void EngineClient::engine_loop(Rank& rank) {
  EngineCore& core = rank.core;
  DpLockstep* lockstep = rank.lockstep.get();
  std::vector<Command> commands;
  while (true) {
    {
      std::unique_lock lock(in_mu_);
      // A lease's expiry is work too: wake for it even when nothing else comes.
      in_cv_.wait_until(lock, core.next_deadline(), [&] {
        return stopping_ || !rank.inbox.empty() || core.has_unfinished() ||
               rank.kv_wake.exchange(false) ||
               (lockstep != nullptr && (lockstep->in_wave() || lockstep->failure()));
      });
      if (stopping_) break;
      commands.swap(rank.inbox);
    }
    std::vector<EngineCoreOutput> outputs;
    for (Command& c : commands) {
      if (auto* add = std::get_if<EngineRequest>(&c)) {
        if (Status st = core.add_request(*add); !st.ok()) {
          // validate() admits only what the core accepts; reaching this is a bug, reported.
          EngineCoreOutput err;
          err.id = add->id;
          err.finish_reason = FinishReason::kError;
          err.error = st.error().message;
          outputs.push_back(std::move(err));
          KLOG_ERROR("engine rejected request {}: {}", add->id, st.error().message);
        }
      } else {
        core.abort(std::get<RequestHandle>(c));
      }
    }
    commands.clear();
    std::string failure;
    const int64_t tokens_before = core.counters().scheduled_tokens;
    bool run = core.has_unfinished();
    if (lockstep != nullptr) {
      // In a wave every rank steps (this one maybe with nothing) until no rank has work.
      if (auto f = lockstep->failure()) {
        failure = *f;
      } else if (lockstep->join(run)) {
        auto any = lockstep->agree(run);
        if (any.ok()) {
          run = *any;
        } else {
          failure = any.error().message;
        }
      } else {
        run = false;
      }
    }
    // Leases that ended free their blocks, and answered releases decide their loads, whether or
    // not this rank steps now.
    core.poll_kv();
    if (failure.empty() && run) {
      auto step = core.step();
      if (step.ok()) {
        for (EngineCoreOutput& o : *step) outputs.push_back(std::move(o));
      } else {
        failure = step.error().message;
      }
    }
    std::function<void(int64_t, int)> observer;
    {
      std::lock_guard lock(stats_mu_);
      const Scheduler& s = core.scheduler();
      EngineStats& st = rank.stats;
      st.num_running = static_cast<int64_t>(s.num_running());
      st.num_waiting = static_cast<int64_t>(s.num_waiting());
      st.kv_cache_usage = s.kv().usage();
      st.prefix_cache_queries = s.kv().prefix_cache_queries();
      st.prefix_cache_hits = s.kv().prefix_cache_hits();
      st.num_preemptions = s.num_preemptions();
      st.counters = core.counters();
      st.num_speculative_tokens = options_.num_speculative_tokens;
      st.dead = !failure.empty();
      if (const KvConnector* kv = core.kv_connector()) {
        st.kv = kv->stats();
        st.kv.state_slots_held = s.kv().num_taken_state_slots();
      }
      observer = step_observer_;
    }
    const int64_t step_tokens = core.counters().scheduled_tokens - tokens_before;
    if (observer && step_tokens > 0) observer(step_tokens, int(rank.index));
    log_spec_decode(rank);
    if (!outputs.empty()) {
      {
        std::lock_guard lock(out_mu_);
        outbox_.push_back(std::move(outputs));
      }
      out_cv_.notify_one();
    }
    if (!failure.empty()) {
      bool shutting_down = false;
      {
        std::lock_guard lock(in_mu_);
        shutting_down = stopping_;
      }
      if (lockstep != nullptr) {
        // A collective that gave up because the group was aborted: the group's own failure is
        // the cause worth reporting. Otherwise this rank's failure is, and the peers stop too.
        if (auto cause = lockstep->failure()) {
          failure = *cause;
        } else {
          lockstep->fail(failure);
        }
      }
      if (ranks_.size() > 1)
        failure = fmt::format("data-parallel rank {}: {}", rank.index, failure);
      if (shutting_down) {
        // A step the shutdown interrupted (a peer had already stopped): not a failure to report.
      } else if (ranks_.size() == 1) {
        KLOG_ERROR("engine step failed, stopping the engine: {}", failure);
      } else {
        KLOG_ERROR("engine {} step failed, stopping every engine: {}", rank.index, failure);
      }
      {
        std::lock_guard lock(out_mu_);
        if (engine_error_.empty()) engine_error_ = failure;
      }
      {
        std::lock_guard lock(in_mu_);
        stopping_ = true;  // the other ranks stop too
      }
      in_cv_.notify_all();
      break;
    }
    if (core.has_unfinished() && core.only_waiting()) {
      // All it waits for is others (KV loads, lease answers): a short pause, not a spin.
      std::unique_lock lock(in_mu_);
      in_cv_.wait_for(lock, std::chrono::milliseconds(1),
                      [&] { return stopping_ || !rank.inbox.empty() || rank.kv_wake.load(); });
    }
  }
  {
    std::lock_guard lock(out_mu_);
    ++engines_done_;
  }
  out_cv_.notify_all();  // the output thread, and a shutdown waiting for the ranks
}

void EngineClient::deliver(EngineCoreOutput&& out) {
  std::shared_ptr<RequestStream> stream;
  std::optional<RequestOutput> result;
  bool abort_in_core = false;
  int engine_index = 0;
  const bool core_finished = out.finished();
  const RequestHandle h = out.id;
  std::string id;
  {
    std::lock_guard lock(req_mu_);
    Live* live = live_.find(h);
    if (live == nullptr) return;
    id = live->id;
    stream = live->stream;
    engine_index = int(ranks_[live->rank]->index);
    if (out.finish_reason == FinishReason::kError) {
      processor_.remove(h);
      result = RequestOutput{};
      result->finish_reason = FinishReason::kError;
      result->error = out.error.empty() ? "the engine could not run this request" : out.error;
      result->invalid_request = out.invalid_request;
    } else {
      result = processor_.process(std::move(out), &abort_in_core);
    }
    if (core_finished) {
      drop_handle(h);
    } else if (result && result->finished()) {
      live->stream.reset();  // finished here (stop string); the handle stays until the core agrees
    }
  }
  if (abort_in_core) abort(id);
  if (stream && result) {
    result->engine_index = engine_index;
    if (result->kv_transfer_params) (*result->kv_transfer_params)["remote_request_id"] = id;
    stream->push(std::move(*result));
  }
}

void EngineClient::output_loop() {
  while (true) {
    std::vector<EngineCoreOutput> batch;
    {
      std::unique_lock lock(out_mu_);
      out_cv_.wait(lock, [&] { return engines_done_ == ranks_.size() || !outbox_.empty(); });
      if (outbox_.empty()) break;  // every rank stopped and everything delivered
      batch = std::move(outbox_.front());
      outbox_.pop_front();
    }
    for (EngineCoreOutput& o : batch) deliver(std::move(o));
  }
  std::string error;
  {
    std::lock_guard lock(out_mu_);
    error = engine_error_;
  }
  if (error.empty()) {
    finish_all(FinishReason::kAbort, "");
  } else {
    finish_all(FinishReason::kError, "the engine failed: " + error);
  }
}

void EngineClient::finish_all(FinishReason reason, const std::string& error) {
  std::vector<std::pair<std::shared_ptr<RequestStream>, int>> open;  // and the rank's index
  {
    std::lock_guard lock(req_mu_);
    std::vector<RequestHandle> handles;
    live_.for_each([&](RequestHandle h, Live& live) {
      handles.push_back(h);
      if (live.stream) open.emplace_back(live.stream, int(ranks_[live.rank]->index));
    });
    for (RequestHandle h : handles) drop_handle(h);
  }
  for (auto& [stream, engine] : open) {
    RequestOutput out;
    out.finish_reason = reason;
    out.error = error;
    out.engine_index = engine;
    stream->push(std::move(out));
  }
}

bool EngineClient::shutdown(std::chrono::milliseconds drain) {
  const auto deadline = std::chrono::steady_clock::now() + drain;
  for (auto& rank : ranks_) {
    DpLockstep* ls = rank->lockstep.get();
    while (ls != nullptr && ls->in_wave() && !ls->failure() &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  {
    std::lock_guard lock(in_mu_);
    stopping_ = true;
  }
  // Lockstep ranks may wait in a collective for a rank that has already stopped: leaving the
  // group makes those waits give up.
  for (auto& rank : ranks_)
    if (rank->lockstep) rank->lockstep->leave();
  in_cv_.notify_all();
  {
    const auto give_up = std::chrono::steady_clock::now() + kFailedStopGrace;
    std::unique_lock lock(out_mu_);
    while (engines_done_ < ranks_.size()) {
      out_cv_.wait_for(lock, std::chrono::milliseconds(20));
      if (engines_done_ < ranks_.size() && !engine_error_.empty() &&
          std::chrono::steady_clock::now() > give_up)
        return false;
    }
  }
  for (auto& rank : ranks_)
    if (rank->thread.joinable()) rank->thread.join();
  if (output_thread_.joinable()) output_thread_.join();
  return true;
}

}  // namespace kestrel
