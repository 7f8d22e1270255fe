#include "engine/kv_connector.h"

#include "base/logging.h"

namespace kestrel {

KvRankInfo model_kv_rank(const CausalLM& model, const KVMemoryView& memory, int block_size,
                         std::string engine_id, uint64_t epoch, int tp_rank, int tp_size,
                         int head_begin, int total_heads, const LinearAttentionConfig& whole,
                         int key_head_begin) {
  const ModelConfig& c = model.config();
  const KVCacheLayout layout = model.kv_cache_layout(block_size);
  const KVCacheSpec& g = layout.groups.at(0);
  const bool latent = g.kind == KVCacheKind::kMlaLatent;
  std::string compat =
      kv_compat_key(c.model_type, c.num_hidden_layers, latent ? 1 : total_heads, g.head_dim,
                    std::string(dtype_name(model.kv_cache_dtype())), block_size, latent);
  StateRankInfo state;
  if (layout.state.num_layers > 0) {
    // The rank's model describes only its own key heads (c.linear), `whole` all of them.
    const int64_t rho = whole.value_heads_per_key_head(), K1 = whole.conv_kernel - 1;
    state.layers = int(layout.state.num_layers);
    state.entries = memory.state_entries;
    state.key_head_begin = key_head_begin;
    state.key_head_end = key_head_begin + int(c.linear.num_key_heads);
    state.total_key_heads = int(whole.num_key_heads);
    state.qk_conv = whole.key_head_dim * K1;
    state.v_conv = rho * whole.value_head_dim * K1;
    state.recurrent = rho * whole.key_head_dim * whole.value_head_dim;
    compat += fmt::format(" linear_layers={} key_heads={} value_heads={} dims={}x{} conv={}",
                          state.layers, whole.num_key_heads, whole.num_value_heads,
                          whole.key_head_dim, whole.value_head_dim, whole.conv_kernel);
  }
  KvRankInfo info = describe_kv_rank(
      memory, std::move(engine_id), epoch, compat, tp_rank, tp_size, latent ? 0 : head_begin,
      latent ? 1 : head_begin + g.num_kv_heads, latent ? 1 : total_heads, latent);
  info.state = state;
  return info;
}

std::string kv_transfer_unsupported(const CausalLM& model, int block_size) {
  const KVCacheLayout layout = model.kv_cache_layout(block_size);
  if (layout.groups.size() != 1)
    return fmt::format(
        "its layers form {} KV cache groups (hybrid KV layouts are transferred with the hybrid "
        "models, issue 22)",
        layout.groups.size());
  if (layout.groups[0].kind == KVCacheKind::kSlidingWindow)
    return "its KV cache is a sliding window (hybrid KV layouts come with issue 22)";
  return "";
}

KvConnector::KvConnector(KvConnectorConfig config) : config_(std::move(config)) {
  if (config_.transfer.produces())
    registry_ = std::make_unique<LeaseRegistry>(config_.epoch, config_.transfer.lease_duration);
  if (config_.transfer.consumes())
    client_ = std::make_unique<LeaseClient>([this] {
      if (wake_) wake_();
    });
}

void KvConnector::set_wake(std::function<void()> wake) {
  wake_ = std::move(wake);
  if (registry_) registry_->set_wake(wake_);
}

KvControlHandler KvConnector::control() {
  return lease_control(registry_.get());
}

Status KvConnector::check(const KvTransferParams& params, size_t prompt_len) const {
  if (params.do_remote_decode && !config_.transfer.produces())
    return make_error(
        "kv_transfer_params: do_remote_decode asks for a prefill, but this instance is a "
        "kv_consumer");
  if (!params.remote_prefill) return Status::Ok();
  if (!config_.transfer.consumes())
    return make_error(
        "kv_transfer_params: do_remote_prefill asks for a decode, but this instance is a "
        "kv_producer");
  const RemotePrefillParams& r = *params.remote_prefill;
  if (r.block_size != 0 && r.block_size != config_.block_size)
    return make_error("kv_transfer_params: the producer's blocks hold {} tokens, these {}",
                      r.block_size, config_.block_size);
  // A producer that prefilled another prompt (or part of one) must not decode this one.
  if (r.num_prompt_tokens >= 0 && r.num_prompt_tokens != int64_t(prompt_len))
    return make_error(
        "kv_transfer_params: the producer prefilled {} prompt tokens, this request has {}",
        r.num_prompt_tokens, prompt_len);
  if (config_.moves_state && r.state_slot < 0)
    return make_error(
        "kv_transfer_params: this model's linear-attention state must come with its KV, and the "
        "producer names no remote_state_slot");
  const int64_t needed = (int64_t(prompt_len) + config_.block_size - 1) / config_.block_size;
  if (int64_t(r.block_ids.size()) < needed)
    return make_error("kv_transfer_params: {} remote blocks for a prompt of {} blocks",
                      r.block_ids.size(), needed);
  return Status::Ok();
}

Status KvConnector::admit(RequestHandle id, const KvTransferParams& params,
                          const std::vector<int32_t>& prompt, RequestSpec& spec) {
  if (Status st = check(params, prompt.size()); !st.ok()) {
    release_refused(params);
    return st;
  }
  spec.remote_decode = params.do_remote_decode;
  if (!params.remote_prefill) return Status::Ok();
  const RemotePrefillParams& r = *params.remote_prefill;
  RemotePrefill rp;
  rp.host = r.host;
  rp.port = r.port;
  rp.tp_size = r.tp_size;
  rp.blocks = r.block_ids;
  rp.state_slot = r.state_slot;
  rp.timeout_ms = config_.transfer.load_timeout.count();
  spec.remote_prefill = std::move(rp);
  const std::chrono::milliseconds duration =
      r.lease_duration.count() > 0 ? r.lease_duration : config_.transfer.lease_duration;
  client_->watch(id, RemoteLease{r.host, r.port, r.lease, r.epoch, duration});
  pending_[id] = Pending{};
  num_pending_ = int64_t(pending_.size());
  return Status::Ok();
}

std::vector<std::pair<RequestHandle, std::string>> KvConnector::before_step(Scheduler& s) {
  std::vector<std::pair<RequestHandle, std::string>> failed;
  if (registry_)
    for (const HeldKv& held : registry_->take_freed()) s.free_held(held);
  if (!client_) return failed;
  for (const ReleaseResult& r : client_->take_released()) {
    const auto it = pending_.find(RequestHandle(r.key));
    if (it == pending_.end() || !it->second.load_ok) continue;  // an exit's release
    Pending& p = it->second;
    const bool loaded = *p.load_ok && r.whole;
    const bool recompute = config_.transfer.load_failure_policy == KvLoadFailurePolicy::kRecompute;
    if (loaded) {
      ++stats_.loads;
      stats_.bytes_loaded += p.bytes;
      stats_.ucx_bytes_loaded += p.ucx_bytes;
      stats_.blocks_loaded += p.blocks;
      stats_.load_seconds_sum += p.seconds;
      for (size_t b = 0; b < std::size(kKvLoadSecondsBuckets); ++b)
        if (p.seconds <= kKvLoadSecondsBuckets[b]) ++stats_.load_seconds_buckets[b];
    } else {
      ++stats_.load_failures;
      const std::string why = *p.load_ok ? r.error : p.error;
      if (recompute) {
        ++stats_.recomputes;
        KLOG_WARN("request {}: the KV load failed ({}); prefilling it here", it->first, why);
      } else {
        failed.emplace_back(it->first, "the KV load from the prefill instance failed: " + why);
      }
    }
    s.kv_load_decided(it->first, loaded, recompute);
    pending_.erase(it);
    num_pending_ = int64_t(pending_.size());
  }
  return failed;
}

void KvConnector::on_started(const std::vector<KvLoad>& loads) {
  for (const KvLoad& l : loads)
    if (const auto it = pending_.find(l.id); it != pending_.end())
      it->second.started = Clock::now();
}

void KvConnector::on_loads(Scheduler& s, const std::vector<KvLoadResult>& loads) {
  for (const KvLoadResult& l : loads) {
    const std::optional<RequestHandle> id = s.kv_load_reported(l.load_id);
    if (!id) continue;  // the request ended mid-load; its blocks are freed now
    const auto it = pending_.find(*id);
    if (it == pending_.end()) continue;
    Pending& p = it->second;
    p.load_ok = l.ok;
    p.error = l.error;
    p.bytes = l.bytes;
    p.ucx_bytes = l.ucx_bytes;
    p.seconds = std::chrono::duration<double>(Clock::now() - p.started).count();
    const Request* req = s.request(*id);
    if (req != nullptr)
      p.blocks = (req->num_prompt_tokens() - req->kv_hit_tokens + config_.block_size - 1) /
                 config_.block_size;
    // The release's answer says whether the producer held the lease through the read.
    p.released = true;
    client_->release(*id);
  }
}

std::unordered_map<RequestHandle, KvTransferResult> KvConnector::lease_held(Scheduler& s) {
  std::unordered_map<RequestHandle, KvTransferResult> out;
  for (auto& [id, held] : s.take_held()) {
    const Request* req = s.request(id);
    if (!registry_ || req == nullptr) {
      s.free_held(held);
      continue;
    }
    KvTransferResult h;
    h.engine_id = config_.engine_id;
    h.host = config_.host;
    h.port = config_.port;
    h.tp_size = config_.tp_size;
    h.block_size = config_.block_size;
    for (const std::vector<BlockId>& g : held.blocks) h.block_ids.emplace_back(g.begin(), g.end());
    h.state_slot = held.state_slot;
    h.num_prompt_tokens = req->num_prompt_tokens();
    h.last_token_id = req->output_token_ids.empty() ? -1 : req->output_token_ids.back();
    const LeaseInfo lease = registry_->create(std::move(held));
    h.lease = lease.id;
    h.epoch = lease.epoch;
    h.lease_duration = lease.duration;
    out.emplace(id, std::move(h));
  }
  return out;
}

void KvConnector::on_exit(RequestHandle id) {
  const auto it = pending_.find(id);
  if (it == pending_.end()) return;
  if (!it->second.released) client_->release(id);
  pending_.erase(it);
  num_pending_ = int64_t(pending_.size());
}

KvConnector::Clock::time_point KvConnector::next_deadline() const {
  return registry_ ? registry_->next_expiry() : Clock::time_point::max();
}

KvTransferStats KvConnector::stats() const {
  KvTransferStats s = stats_;
  s.enabled = true;
  s.pending = int64_t(pending_.size());
  if (registry_) s.leases = registry_->stats();
  return s;
}

void KvConnector::release_refused(const KvTransferParams& params) {
  if (!client_ || !params.remote_prefill) return;
  const RemotePrefillParams& r = *params.remote_prefill;
  // Keys past every request handle: its answer matches no pending request and is dropped.
  const uint64_t key = (uint64_t(1) << 63) | next_refused_++;
  client_->watch(key,
                 RemoteLease{r.host, r.port, r.lease, r.epoch, config_.transfer.lease_duration});
  client_->release(key);
}

}  // namespace kestrel
