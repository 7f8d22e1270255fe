#include "engine/kv_ranks.h"

#include <random>

#include "base/logging.h"
#include "model/tp_plan.h"

namespace kestrel {

std::string kv_engine_id(const KvInstance& kv, int dp_rank) {
  const std::string& id = kv.transfer.engine_id;
  return kv.dp_size > 1 ? fmt::format("{}_dp{}", id, dp_rank) : id;
}

int kv_rank_port(const KvInstance& kv, int dp_rank, int tp_rank) {
  return kv.transfer.kv_port + dp_rank * kv.tp_size + tp_rank;
}

std::unique_ptr<KvConnector> make_kv_connector(const KvInstance& kv, int dp_rank,
                                               bool moves_state) {
  KvConnectorConfig c;
  c.transfer = kv.transfer;
  c.engine_id = kv_engine_id(kv, dp_rank);
  c.host = kv.host;
  c.port = kv_rank_port(kv, dp_rank, 0);
  c.tp_size = kv.tp_size;
  c.block_size = kv.block_size;
  c.epoch = kv.epoch;
  c.moves_state = moves_state;
  return std::make_unique<KvConnector>(std::move(c));
}

Expected<std::unique_ptr<KvWorker>> start_kv_worker(const KvInstance& kv, const CausalLM& model,
                                                    const ModelConfig& whole,
                                                    const KVMemoryView& memory, int dp_rank,
                                                    int tp_rank, KvControlHandler control) {
  if (const std::string why = kv_transfer_unsupported(model, kv.block_size); !why.empty())
    return make_error("--kv-transfer-config: this model's KV cannot be transferred: {}", why);
  const ModelConfig& c = whole;
  // Only the KV heads matter here (whole experts: the expert split cannot fail where the
  // model's own did not).
  KASSIGN(const TpShard shard, plan_tp_shard(c, tp_rank, kv.tp_size, /*expert_parallel=*/true));
  KvWorkerOptions o;
  o.self = model_kv_rank(model, memory, kv.block_size, kv_engine_id(kv, dp_rank), kv.epoch, tp_rank,
                         kv.tp_size, int(shard.kv_heads.begin), int(c.num_key_value_heads),
                         c.linear, int(shard.linear_key_heads.begin));
  o.serve = kv.transfer.produces();
  o.port = kv_rank_port(kv, dp_rank, tp_rank);
  o.control = std::move(control);
  o.pull = kv.transfer.consumes();
  o.transport = kv.transfer.transport;
  auto worker = KvWorker::start(memory, std::move(o));
  if (!worker.ok())
    return make_error("KV transfer, data-parallel rank {} TP rank {}: {}", dp_rank, tp_rank,
                      worker.error().message);
  return worker;
}

}  // namespace kestrel
