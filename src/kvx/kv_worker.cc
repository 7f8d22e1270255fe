#include "kvx/kv_worker.h"

#include "base/logging.h"

namespace kestrel {

Expected<std::unique_ptr<KvWorker>> KvWorker::start(KVMemoryView memory, KvWorkerOptions o) {
  std::unique_ptr<KvWorker> w(new KvWorker());
  // UCX where asked (auto: where this build has it; a failure then leaves TCP alone).
  const bool want_ucx =
      o.transport == KvTransport::kUcx || (o.transport == KvTransport::kAuto && ucx_available());
  auto ucx_failed = [&](const Error& e) -> Status {
    if (o.transport == KvTransport::kUcx)
      return make_error("KV transfer: TP rank {}: {}", o.self.tp_rank, e.message);
    KLOG_WARN("KV transfer: TP rank {} without UCX ({}); TCP only", o.self.tp_rank, e.message);
    return Status::Ok();
  };
  nlohmann::json advert;
  if (o.serve && want_ucx) {
    auto producer = UcxProducer::start(memory);
    if (producer.ok()) {
      w->ucx_ = std::move(*producer);
      advert = w->ucx_->advertisement();
    } else {
      KTRY(ucx_failed(producer.error()));
    }
  }
  if (o.serve) {
    auto server = KvServer::start(o.host, o.port, memory, o.self, o.control, advert);
    if (!server.ok())
      return make_error("KV transfer: TP rank {} cannot serve its KV blocks on {}:{}: {}",
                        o.self.tp_rank, o.host, o.port, server.error().message);
    w->server_ = std::move(*server);
    KLOG_INFO("KV transfer: TP rank {} serves its KV blocks (heads {}..{}) on {}:{}{}",
              o.self.tp_rank, o.self.head_begin, o.self.head_end - 1, o.host, w->server_->port(),
              w->ucx_ ? ", and over UCX" : "");
  }
  if (o.pull) {
    std::unique_ptr<UcxConsumer> consumer;
    if (want_ucx) {
      auto c = UcxConsumer::start();
      if (c.ok()) {
        consumer = std::move(*c);
      } else {
        KTRY(ucx_failed(c.error()));
      }
    }
    w->puller_ = std::make_unique<KvPuller>(memory, o.self, o.pull_threads, std::move(consumer));
  }
  return w;
}

void KvWorker::start_loads(const std::vector<KvLoad>& loads) {
  for (const KvLoad& l : loads) {
    if (!puller_) continue;  // refused at start: only a consumer gets loads
    KvPullJob job;
    job.id = l.load_id;
    job.host = l.host;
    job.port = l.port;
    job.tp_size = l.tp_size;
    job.remote_blocks = l.remote_blocks;
    job.local_blocks = l.local_blocks;
    job.remote_state = l.remote_state;
    job.local_state = l.local_state;
    job.deadline = deadline_in(std::chrono::milliseconds(l.timeout_ms));
    puller_->submit(std::move(job));
  }
}

std::vector<KvLoadResult> KvWorker::finished() {
  std::vector<KvLoadResult> out;
  if (!puller_) return out;
  for (KvPullResult& r : puller_->take_finished())
    out.push_back(KvLoadResult{r.id, r.ok, std::move(r.error), r.bytes, r.ucx_bytes});
  return out;
}

}  // namespace kestrel
