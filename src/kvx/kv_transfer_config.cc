#include "kvx/kv_transfer_config.h"

#include "kvx/ucx_transport.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>

namespace kestrel {

namespace {

using json = nlohmann::json;

constexpr const char* kPullConnectors[] = {"MooncakeConnectorV1", "MooncakeConnector",
                                           "MooncakeConnectorV2", "MooncakeHybridConnector"};

Expected<int> port_of(const json& v) {
  int port = -1;
  if (v.is_number_integer()) {
    port = v.get<int>();
  } else if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (std::from_chars(s.data(), s.data() + s.size(), port).ec != std::errc() || s.empty())
      return make_error("--kv-transfer-config kv_port: '{}' is not a port number", s);
  } else {
    return make_error("--kv-transfer-config kv_port: a port number or its string");
  }
  if (port < 1 || port > 65535)
    return make_error("--kv-transfer-config kv_port: {} is not a port (1-65535)", port);
  return port;
}

Expected<KvLayoutSpec> layout_of(const json& v, const char* side) {
  KvLayoutSpec l;
  for (const char* key : {"dp_size", "tp_size"}) {
    if (!v.contains(key)) continue;
    const json& n = v[key];
    if (!n.is_number_integer() || n.get<int64_t>() < 1)
      return make_error("--kv-transfer-config kv_connector_extra_config.{}.{}: a positive integer",
                        side, key);
    (std::string(key) == "dp_size" ? l.dp_size : l.tp_size) = n.get<int>();
  }
  return l;
}

Expected<std::chrono::milliseconds> seconds_of(const json& extra, const char* key,
                                               std::chrono::milliseconds fallback) {
  if (!extra.contains(key)) return fallback;
  const json& v = extra[key];
  if (!v.is_number() || v.get<double>() <= 0)
    return make_error("--kv-transfer-config kv_connector_extra_config.{}: seconds, above 0", key);
  return std::chrono::milliseconds(int64_t(v.get<double>() * 1000.0));
}

}  // namespace

const char* kv_role_name(KvRole role) {
  switch (role) {
    case KvRole::kProducer:
      return "kv_producer";
    case KvRole::kConsumer:
      return "kv_consumer";
    case KvRole::kBoth:
      return "kv_both";
  }
  return "?";
}

Expected<KvTransferConfig> parse_kv_transfer_config(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return make_error("--kv-transfer-config: not JSON: {}", e.what());
  }
  if (!j.is_object()) return make_error("--kv-transfer-config: a JSON object");
  KvTransferConfig c;
  if (!j.contains("kv_connector") || !j["kv_connector"].is_string())
    return make_error("--kv-transfer-config: missing key 'kv_connector'");
  c.connector = j["kv_connector"].get<std::string>();
  if (c.connector == "MooncakeLayerwiseConnector")
    return make_error(
        "--kv-transfer-config kv_connector=MooncakeLayerwiseConnector: the push connector (prefill "
        "writes each layer into decode's blocks) is not supported; Kestrel's connector pulls "
        "(use MooncakeConnectorV1)");
  if (std::find(std::begin(kPullConnectors), std::end(kPullConnectors), c.connector) ==
      std::end(kPullConnectors))
    return make_error(
        "--kv-transfer-config: unknown KV connector '{}' (MooncakeConnectorV1, MooncakeConnector, "
        "MooncakeConnectorV2, MooncakeHybridConnector)",
        c.connector);
  const std::string role = j.value("kv_role", std::string("kv_both"));
  if (role == "kv_producer") {
    c.role = KvRole::kProducer;
  } else if (role == "kv_consumer") {
    c.role = KvRole::kConsumer;
  } else if (role == "kv_both") {
    c.role = KvRole::kBoth;
  } else {
    return make_error(
        "--kv-transfer-config: unknown kv_role '{}' (kv_producer, kv_consumer, kv_both)", role);
  }
  if (j.contains("kv_port")) {
    KASSIGN(c.kv_port, port_of(j["kv_port"]));
  }
  if (j.contains("engine_id"))
    c.engine_id =
        j["engine_id"].is_string() ? j["engine_id"].get<std::string>() : j["engine_id"].dump();
  c.kv_buffer_device = j.value("kv_buffer_device", c.kv_buffer_device);
  if (j.contains("kv_load_failure_policy")) {
    const std::string p = j["kv_load_failure_policy"].get<std::string>();
    if (p == "fail") {
      c.load_failure_policy = KvLoadFailurePolicy::kFail;
    } else if (p != "recompute") {
      return make_error(
          "--kv-transfer-config kv_load_failure_policy: '{}' is neither fail nor recompute", p);
    }
  }
  const json extra = j.value("kv_connector_extra_config", json::object());
  if (extra.contains("prefill")) {
    KASSIGN(c.prefill, layout_of(extra["prefill"], "prefill"));
  }
  if (extra.contains("decode")) {
    KASSIGN(c.decode, layout_of(extra["decode"], "decode"));
  }
  if (extra.contains("kv_transport")) {
    const std::string t =
        extra["kv_transport"].is_string() ? extra["kv_transport"].get<std::string>() : "";
    if (t == "tcp") {
      c.transport = KvTransport::kTcp;
    } else if (t == "ucx") {
      if (!ucx_available())
        return make_error(
            "--kv-transfer-config kv_connector_extra_config.kv_transport=ucx: this build has no "
            "UCX (install libucx-dev and rebuild)");
      c.transport = KvTransport::kUcx;
    } else if (t == "auto") {
      c.transport = KvTransport::kAuto;
    } else {
      return make_error(
          "--kv-transfer-config kv_connector_extra_config.kv_transport: {} is none of auto, "
          "tcp, ucx",
          extra["kv_transport"].dump());
    }
  }
  KASSIGN(c.lease_duration, seconds_of(extra, "kv_lease_duration", c.lease_duration));
  KASSIGN(c.load_timeout, seconds_of(extra, "kv_load_timeout", c.load_timeout));
  return c;
}

}  // namespace kestrel
