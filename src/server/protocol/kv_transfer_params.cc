#include "server/protocol/kv_transfer_params.h"

#include <cstdlib>

namespace kestrel {

namespace {

using json = nlohmann::json;

// The block ids of group 0: Mooncake V1 sends a flat list, V2 and Kestrel one list per group.
Expected<std::vector<int64_t>> block_ids_of(const json& v) {
  if (!v.is_array() || v.empty()) return make_error("remote_block_ids: a non-empty list");
  const json& ids = v[0].is_array() ? v[0] : v;
  if (v[0].is_array() && v.size() > 1)
    return make_error(
        "remote_block_ids: {} KV cache groups; hybrid KV layouts are not transferred yet",
        v.size());
  std::vector<int64_t> out;
  for (const json& id : ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < 1)
      return make_error("remote_block_ids: block ids are integers of at least 1");
    out.push_back(id.get<int64_t>());
  }
  if (out.empty()) return make_error("remote_block_ids: no blocks");
  return out;
}

template <typename T>
Expected<T> need(const json& p, const char* key) {
  if (!p.contains(key) || p[key].is_null()) return make_error("{} is missing", key);
  try {
    return p[key].get<T>();
  } catch (const json::exception&) {
    return make_error("{} has the wrong type", key);
  }
}

}  // namespace

Expected<KvTransferParams> parse_kv_transfer_params(const json& p) {
  KvTransferParams out;
  if (p.is_null()) return out;
  if (!p.is_object()) return make_error("kv_transfer_params must be an object");
  out.do_remote_decode = p.value("do_remote_decode", false);
  if (!p.value("do_remote_prefill", false)) return out;
  if (out.do_remote_decode)
    return make_error("kv_transfer_params: do_remote_prefill and do_remote_decode together");
  auto bad = [](const Error& e) {
    return make_error("kv_transfer_params (remote prefill): {}", e.message);
  };
  RemotePrefillParams r;
  auto host = need<std::string>(p, "remote_host");
  if (!host.ok()) return bad(host.error());
  r.host = *host;
  if (p.contains("remote_port") && p["remote_port"].is_string()) {
    r.port = std::atoi(p["remote_port"].get<std::string>().c_str());
  } else {
    auto port = need<int>(p, "remote_port");
    if (!port.ok()) return bad(port.error());
    r.port = *port;
  }
  if (r.port < 1 || r.port > 65535) return bad(Error{"remote_port is not a port"});
  auto blocks = block_ids_of(p.value("remote_block_ids", json()));
  if (!blocks.ok()) return bad(blocks.error());
  r.block_ids = std::move(*blocks);
  if (p.contains("remote_engine_id") && !p["remote_engine_id"].is_null())
    r.engine_id = p["remote_engine_id"].is_string() ? p["remote_engine_id"].get<std::string>()
                                                    : p["remote_engine_id"].dump();
  r.request_id = p.value("remote_request_id", std::string());
  r.tp_size = p.value("remote_tp_size", p.value("remote_ptp_size", 1));
  if (r.tp_size < 1) return bad(Error{"remote_tp_size must be at least 1"});
  r.block_size = p.value("remote_block_size", 0);
  r.num_prompt_tokens = p.value("remote_num_prompt_tokens", int64_t(-1));
  if (p.contains("remote_state_slot") && !p["remote_state_slot"].is_null()) {
    auto slot = need<int32_t>(p, "remote_state_slot");
    if (!slot.ok()) return bad(slot.error());
    if (*slot < 0) return bad(Error{"remote_state_slot must be at least 0"});
    r.state_slot = *slot;
  }
  auto lease = need<uint64_t>(p, "kv_lease_id");
  auto epoch = need<uint64_t>(p, "kv_lease_epoch");
  if (!lease.ok()) return bad(lease.error());
  if (!epoch.ok()) return bad(epoch.error());
  r.lease = *lease;
  r.epoch = *epoch;
  const double seconds = p.value("kv_lease_duration", 0.0);
  r.lease_duration = std::chrono::milliseconds(int64_t(seconds * 1000.0));
  out.remote_prefill = std::move(r);
  return out;
}

json kv_transfer_params_json(const KvTransferResult& h) {
  const int64_t num_blocks = h.block_ids.empty() ? 0 : int64_t(h.block_ids[0].size());
  return {{"do_remote_prefill", true},
          {"do_remote_decode", false},
          {"remote_engine_id", h.engine_id},
          {"remote_request_id", h.request_id},
          {"remote_host", h.host},
          {"remote_port", h.port},
          {"remote_tp_size", h.tp_size},
          {"remote_ptp_size", h.tp_size},
          {"remote_pcp_size", 1},
          {"remote_dcp_size", 1},
          {"remote_block_size", h.block_size},
          {"remote_block_ids", h.block_ids},
          {"num_prompt_blocks", num_blocks},
          {"remote_num_prompt_tokens", h.num_prompt_tokens},
          {"last_token_id", h.last_token_id},
          {"kv_lease_version", 1},
          {"kv_lease_id", h.lease},
          {"kv_lease_epoch", h.epoch},
          {"kv_lease_duration", double(h.lease_duration.count()) / 1000.0},
          {"remote_state_slot", h.state_slot >= 0 ? json(h.state_slot) : json()}};
}

}  // namespace kestrel
