// distributed/local_address.h — which of this host's addresses a group member binds and advertises:
// the source address of the route toward the group's rendezvous address (the interface that
// reaches rank 0), never whatever the hostname resolves to (Debian maps it to 127.0.1.1, and
// Gloo pairs bound there cannot be reached from another host). An AddressHints may override it,
// as the CLI fills one from the environment: VLLM_HOST_IP, as in vLLM, names the address
// outright; GLOO_SOCKET_IFNAME, as in PyTorch, names the interface whose address to take (the
// first of a comma-separated list). Reads the host's interfaces and routes.
#pragma once

#include <string>

#include "base/status.h"

namespace kestrel {

struct AddressHints {
  std::string host_ip;         // VLLM_HOST_IP: this address, whatever the routes say
  std::string socket_ifnames;  // GLOO_SOCKET_IFNAME: the first interface's address
};

// This host's address on the route to `peer` (an IPv4 or IPv6 address, or a name):
// hints.host_ip when set, else the address of the first interface of hints.socket_ifnames when
// set, else the source address the kernel picks for a datagram to it.
Expected<std::string> local_address_toward(const std::string& peer, const AddressHints& hints = {});

// The address of network interface `name` (IPv4 first): an error names an interface that does
// not exist or has no address.
Expected<std::string> interface_address(const std::string& name);

}  // namespace kestrel
