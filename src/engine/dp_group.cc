#include "engine/dp_group.h"

#include <unistd.h>

#include <random>

#include "base/logging.h"
#include "distributed/group_comm.h"
#include "distributed/local_address.h"

namespace kestrel {

Expected<std::unique_ptr<DpGroup>> DpGroup::plan(const DpGroupSpec& spec) {
  std::string endpoint, host;
  if (spec.all_local) {
    const uint64_t nonce = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
    endpoint = fmt::format("ipc:///tmp/kestrel-dp-{}-{:x}.sock", ::getpid(), nonce);
    host = "127.0.0.1";
  } else {
    endpoint = fmt::format("tcp://{}:{}", spec.address, spec.rpc_port);
    auto local = local_address_toward(spec.address, spec.address_hints);
    if (!local.ok())
      return make_error("--data-parallel-address {}: {}", spec.address, local.error().message);
    host = *local;
  }
  return std::unique_ptr<DpGroup>(new DpGroup(spec, std::move(endpoint), std::move(host)));
}

DpGroup::DpGroup(const DpGroupSpec& spec, std::string endpoint, std::string host)
    : spec_(spec), endpoint_(std::move(endpoint)), host_(std::move(host)) {}

DpGroup::~DpGroup() = default;

Status DpGroup::start() {
  if (!spec_.serves) return Status::Ok();
  auto server = StoreServer::start(endpoint_);
  if (!server.ok())
    return make_error(
        "expert parallelism across {} data-parallel ranks: rank 0 cannot serve the group at {} "
        "({}); --data-parallel-address must be an address of this node",
        spec_.size, endpoint_, server.error().message);
  server_ = std::move(*server);
  KLOG_INFO("expert parallelism across {} data-parallel ranks: the group meets at {}", spec_.size,
            endpoint_);
  return Status::Ok();
}

Expected<std::unique_ptr<DeviceComm>> DpGroup::connect_experts(
    int dp_rank, int tp_rank, const std::function<Status()>& alive) const {
  KASSIGN(auto store, StoreClient::connect(endpoint_, spec_.start_timeout));
  GroupCommOptions o;
  o.group = fmt::format("ep/t{}", tp_rank);
  o.rank = dp_rank;
  o.size = spec_.size;
  o.host = host_;
  o.connect_timeout = spec_.start_timeout;
  o.timeout = spec_.collective_timeout;
  o.abort = &abort_.get();
  o.label = "expert-parallel";
  o.alive = alive;
  auto comm = connect_group_comm(o, *store);
  if (!comm.ok())
    return make_error("data-parallel rank {}, TP rank {}: joining the expert group at {}: {}",
                      dp_rank, tp_rank, endpoint_, comm.error().message);
  return comm;
}

Expected<std::unique_ptr<DpLockstep>> DpGroup::join_lockstep(int dp_rank,
                                                             const std::string& settings) const {
  DpLockstepOptions o;
  o.endpoint = endpoint_;
  o.rank = dp_rank;
  o.size = spec_.size;
  o.host = host_;
  o.settings = settings;
  o.start_timeout = spec_.start_timeout;
  o.step_timeout = spec_.collective_timeout;
  o.abort = &abort_.get();
  return DpLockstep::connect(o);
}

Status DpGroup::watch(const std::string& name) {
  std::atomic<bool>* abort = &abort_.get();
  KASSIGN(watcher_, StoreSubscriber::connect(
                        endpoint_, name,
                        [abort, name](const std::string& topic, const std::vector<char>& value) {
                          if (topic != kLostTopic && topic != "fail" && topic != "leave") return;
                          if (!abort->exchange(true))
                            KLOG_ERROR("{}: the data-parallel group failed ({}: {})", name, topic,
                                       std::string(value.begin(), value.end()));
                        }));
  return Status::Ok();
}

}  // namespace kestrel
