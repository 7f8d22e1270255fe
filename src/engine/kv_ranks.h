// engine/kv_ranks.h — an instance's prefill/decode disaggregation pieces per rank, from
// --kv-transfer-config (issue 21): data-parallel rank d's engine id (the configured one, with
// _dp<d> when there are several ranks) and its TP ranks' ports (kv_port + d · tp_size + t,
// Mooncake's per-rank blocks), the rank's engine-side connector, and each TP rank's KV worker.
// Set-up only: the engine client owns the connectors, each rank's model runner its worker.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/engine_config.h"
#include "engine/kv_connector.h"
#include "kvx/kv_worker.h"

namespace kestrel {

std::string kv_engine_id(const KvInstance& kv, int dp_rank);
int kv_rank_port(const KvInstance& kv, int dp_rank, int tp_rank);

// Data-parallel rank `dp_rank`'s connector; `moves_state`: the model has linear-attention layers.
std::unique_ptr<KvConnector> make_kv_connector(const KvInstance& kv, int dp_rank,
                                               bool moves_state = false);

// The KV worker of TP rank `tp_rank` of data-parallel rank `dp_rank`, over its runner's pool:
// a producer's serves its port (TP rank 0's answers the lease messages through `control`), a
// consumer's pulls. `whole` is the model's configuration before sharding (a TP rank's model
// describes only its own heads). An error names a model whose KV cannot move and a port
// already taken.
Expected<std::unique_ptr<KvWorker>> start_kv_worker(const KvInstance& kv, const CausalLM& model,
                                                    const ModelConfig& whole,
                                                    const KVMemoryView& memory, int dp_rank,
                                                    int tp_rank, KvControlHandler control = {});

}  // namespace kestrel
