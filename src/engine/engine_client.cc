#include "engine/engine_client.h"

#include <algorithm>
#include <utility>

#include "base/logging.h"
#include "engine/engine_client_options.h"
#include "engine/output_processor.h"
#include "engine/rank_loop.h"

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

EngineClient::EngineClient(const Tokenizer* tokenizer, EngineClientOptions options)
    : tokenizer_(tokenizer),
      vocab_size_(options.vocab_size),
      max_model_len_(options.scheduler.max_model_len),
      max_num_seqs_(options.scheduler.max_num_seqs) {
  const size_t n = options.executors.size();
  KCHECK(n > 0, "an engine client needs at least one executor");
  KCHECK(options.lockstep.empty() || options.lockstep.size() == n,
         "{} lockstep members for {} data-parallel ranks", options.lockstep.size(), n);
  KCHECK(options.kv_connectors.empty() || options.kv_connectors.size() == n,
         "{} KV connectors for {} data-parallel ranks", options.kv_connectors.size(), n);
  RankLoop::Hooks hooks;
  hooks.publish = [this](std::vector<EngineCoreOutput>&& outputs) {
    {
      std::lock_guard lock(out_mu_);
      outbox_.push_back(std::move(outputs));
    }
    out_cv_.notify_one();
  };
  hooks.observe_step = [this](int64_t tokens, int rank) {
    std::function<void(int64_t, int)> observer;
    {
      std::lock_guard lock(observer_mu_);
      observer = step_observer_;
    }
    if (observer) observer(tokens, rank);
  };
  hooks.fail = [this](const std::string& why) { on_rank_failure(why); };
  hooks.done = [this] {
    {
      std::lock_guard lock(out_mu_);
      ++ranks_done_;
    }
    out_cv_.notify_all();  // the output thread, and a shutdown waiting for the ranks
  };
  for (size_t i = 0; i < n; ++i) {
    auto core = std::make_unique<EngineCore>(std::move(options.executors[i]), options.scheduler,
                                             options.eos_token_ids);
    if (!options.kv_connectors.empty()) core->set_kv_connector(std::move(options.kv_connectors[i]));
    ranks_.push_back(std::make_unique<RankLoop>(
        size_t(options.first_engine_index) + i, n, std::move(core),
        options.lockstep.empty() ? nullptr : std::move(options.lockstep[i]),
        options.num_speculative_tokens, options.spec_log_interval, hooks));
  }
  live_per_rank_.assign(n, 0);
  for (auto& rank : ranks_) rank->start();
  output_thread_ = std::thread([this] { output_loop(); });
}

EngineClient::~EngineClient() {
  // Here a thread stuck in a failed group's collective is waited for: it ends at the timeout.
  (void)shutdown();
  for (auto& rank : ranks_) rank->join();
  if (output_thread_.joinable()) output_thread_.join();
}

Status EngineClient::validate(const GenerateRequest& request) const {
  const EngineRequest& r = request.engine;
  const std::string& id = request.id;
  if (id.empty()) return make_error("request id must not be empty");
  if (r.prompt_token_ids.empty()) return make_error("request {}: the prompt is empty", id);
  const int64_t vocab = vocab_size_;
  for (int32_t t : r.prompt_token_ids)
    if (t < 0 || t >= vocab)
      return make_error("request {}: token id {} is out of vocabulary (size {})", id, t, vocab);
  for (int32_t t : r.stop_token_ids)
    if (t < 0 || t >= vocab)
      return make_error("request {}: stop token id {} is out of vocabulary (size {})", id, t,
                        vocab);
  KTRY(check_output_limits(r, id));
  if (!fits_context(int64_t(r.prompt_token_ids.size()), 1, max_model_len_))
    return make_error(
        "request {}: the prompt has {} tokens, which leaves no room for output "
        "within max_model_len {}",
        id, r.prompt_token_ids.size(), max_model_len_);
  if (r.sampling.logprobs > static_cast<int>(vocab))
    return make_error("request {}: logprobs {} exceeds the vocabulary size", id,
                      r.sampling.logprobs);
  // Every rank has the same connector settings: the first one's say what can be served.
  if (const KvConnector* kv = ranks_[0]->kv_connector())
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
  --live_per_rank_[live->rank];
  handles_.erase(live->id);
  live_.erase(h);
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
  // The detokenizer starts here, on the submitting thread, outside every lock.
  KASSIGN(std::unique_ptr<OutputProcessor> outputs,
          OutputProcessor::start(tokenizer_, request.engine.prompt_token_ids, request.output,
                                 request.engine.min_tokens));
  auto stream = std::make_shared<RequestStream>(request.id);
  RequestHandle h = 0;
  size_t rank = 0;
  {
    std::lock_guard lock(req_mu_);
    if (handles_.count(request.id) != 0)
      return make_error("request id {} is already in use", request.id);
    for (const auto& r : ranks_)
      if (r->stats().dead) return make_error("the engine has failed and accepts no more requests");
    rank = pick_rank();
    next_tie_ = (rank + 1) % ranks_.size();
    h = take_handle(request.id);
    live_.put(h, Live{request.id, stream, std::move(outputs), rank});
    ++live_per_rank_[rank];
  }
  request.engine.id = h;
  if (stopping_.load() || !ranks_[rank]->post(std::move(request.engine))) {
    std::lock_guard lock(req_mu_);
    drop_handle(h);
    return make_error("the engine is shutting down");
  }
  return stream;
}

size_t EngineClient::pick_rank() const {
  // vLLM's data-parallel balance: waiting requests weigh four times running ones. Requests sent
  // since the rank's last step count as waiting.
  size_t best = 0;
  int64_t best_score = 0;
  for (size_t k = 0; k < ranks_.size(); ++k) {
    const size_t r = (next_tie_ + k) % ranks_.size();
    const int64_t live = live_per_rank_[r];
    const int64_t running = std::min(ranks_[r]->stats().num_running, live);
    const int64_t score = 4 * (live - running) + running;
    if (k == 0 || score < best_score) {
      best = r;
      best_score = score;
    }
  }
  return best;
}

void EngineClient::abort(const std::string& id) {
  if (stopping_.load()) return;  // shutdown finishes every stream anyway
  // The handle is looked up and queued under req_mu_, so it cannot be recycled to another
  // request before its abort is in the rank's inbox (the rank then finds it finished).
  std::lock_guard lock(req_mu_);
  const auto it = handles_.find(id);
  if (it == handles_.end()) return;
  const Live* live = live_.find(it->second);
  if (live == nullptr) return;
  ranks_[live->rank]->post(it->second);
}

size_t EngineClient::num_request_handles() const {
  std::lock_guard lock(req_mu_);
  return next_handle_;
}

void EngineClient::set_step_observer(std::function<void(int64_t, int)> fn) {
  std::lock_guard lock(observer_mu_);
  step_observer_ = std::move(fn);
}

std::vector<EngineStats> EngineClient::rank_stats() const {
  std::vector<EngineStats> out;
  for (const auto& r : ranks_) out.push_back(r->stats());
  return out;
}

bool EngineClient::kv_backlog_full() const {
  const int64_t limit = kKvBacklogPerSeq * max_num_seqs_;
  for (const auto& rank : ranks_) {
    const KvConnector* kv = rank->kv_connector();
    if (kv == nullptr || kv->num_pending() < limit) return false;
  }
  return true;
}

void EngineClient::release_kv_refused(const KvTransferParams& params) {
  if (KvConnector* kv = ranks_[0]->kv_connector()) kv->release_refused(params);
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
  if (!ranks.empty()) s.num_speculative_tokens = ranks[0].num_speculative_tokens;
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

void EngineClient::on_rank_failure(const std::string& why) {
  {
    std::lock_guard lock(out_mu_);
    if (engine_error_.empty()) engine_error_ = why;
  }
  stopping_.store(true);
  for (auto& rank : ranks_) rank->stop();
}

void EngineClient::deliver(EngineCoreOutput&& out) {
  const bool core_finished = out.finished();
  const RequestHandle h = out.id;
  std::shared_ptr<RequestStream> stream;
  OutputProcessor* outputs = nullptr;
  std::string id;
  int engine_index = 0;
  {
    std::lock_guard lock(req_mu_);
    Live* live = live_.find(h);
    if (live == nullptr) return;
    id = live->id;
    stream = live->stream;
    outputs = live->outputs.get();
    engine_index = int(ranks_[live->rank]->index());
  }
  // Only this thread erases live entries, so `outputs` stays valid while req_mu_ is free.
  std::optional<RequestOutput> result;
  bool abort_in_core = false;
  if (out.finish_reason == FinishReason::kError) {
    result = RequestOutput{};
    result->finish_reason = FinishReason::kError;
    result->error = out.error.empty() ? "the engine could not run this request" : out.error;
    result->invalid_request = out.invalid_request;
  } else if (stream) {
    result = outputs->process(std::move(out), &abort_in_core);
  }
  {
    std::lock_guard lock(req_mu_);
    if (core_finished) {
      drop_handle(h);
    } else if (result && result->finished()) {
      // Finished here (a stop string); the handle stays until the core agrees.
      if (Live* live = live_.find(h)) live->stream.reset();
    }
  }
  if (abort_in_core) abort(id);
  if (stream && result) {
    result->engine_index = engine_index;
    if (result->kv_transfer) result->kv_transfer->request_id = id;
    stream->push(std::move(*result));
  }
}

void EngineClient::output_loop() {
  while (true) {
    std::vector<EngineCoreOutput> batch;
    {
      std::unique_lock lock(out_mu_);
      out_cv_.wait(lock, [&] { return ranks_done_ == ranks_.size() || !outbox_.empty(); });
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
      if (live.stream) open.emplace_back(live.stream, int(ranks_[live.rank]->index()));
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
    DpLockstep* ls = rank->lockstep();
    while (ls != nullptr && ls->in_wave() && !ls->failure() &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stopping_.store(true);
  for (auto& rank : ranks_) rank->stop();
  // Lockstep ranks may wait in a collective for a rank that has already stopped: leaving the
  // group makes those waits give up.
  for (auto& rank : ranks_)
    if (rank->lockstep()) rank->lockstep()->leave();
  {
    const auto give_up = std::chrono::steady_clock::now() + kFailedStopGrace;
    std::unique_lock lock(out_mu_);
    while (ranks_done_ < ranks_.size()) {
      out_cv_.wait_for(lock, std::chrono::milliseconds(20));
      if (ranks_done_ < ranks_.size() && !engine_error_.empty() &&
          std::chrono::steady_clock::now() > give_up)
        return false;
    }
  }
  for (auto& rank : ranks_) rank->join();
  if (output_thread_.joinable()) output_thread_.join();
  return true;
}

}  // namespace kestrel
