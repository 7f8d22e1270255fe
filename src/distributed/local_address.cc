#include "distributed/local_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kestrel {

namespace {

std::string address_text(const sockaddr* a) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* addr =
      a->sa_family == AF_INET
          ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(a)->sin_addr)
          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
  return inet_ntop(a->sa_family, addr, text, sizeof(text)) != nullptr ? text : "";
}

}  // namespace

Expected<std::string> interface_address(const std::string& name) {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0)
    return make_error("cannot list this host's interfaces: {}", std::strerror(errno));
  std::string v4, v6;
  bool exists = false;
  for (ifaddrs* i = all; i != nullptr; i = i->ifa_next) {
    if (i->ifa_name == nullptr || name != i->ifa_name) continue;
    exists = true;
    if (i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family == AF_INET && v4.empty()) v4 = address_text(i->ifa_addr);
    if (i->ifa_addr->sa_family == AF_INET6 && v6.empty()) v6 = address_text(i->ifa_addr);
  }
  freeifaddrs(all);
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  return make_error("network interface {} {}", name,
                    exists ? "has no address" : "does not exist on this host");
}

Expected<std::string> local_address_toward(const std::string& peer, const AddressHints& named) {
  if (!named.host_ip.empty()) return named.host_ip;
  if (!named.socket_ifnames.empty()) {
    const std::string& list = named.socket_ifnames;
    auto address = interface_address(list.substr(0, list.find(',')));
    if (!address.ok())
      return make_error("GLOO_SOCKET_IFNAME={}: {}", list, address.error().message);
    return address;
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(peer.c_str(), "9", &hints, &found); rc != 0)
    return make_error("cannot resolve {}: {}", peer, gai_strerror(rc));
  std::string error = "no address";
  std::string local;
  for (addrinfo* a = found; a != nullptr && local.empty(); a = a->ai_next) {
    // Connecting a datagram socket sends nothing; it only picks the route and source address.
    const int fd = socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    sockaddr_storage self{};
    socklen_t len = sizeof(self);
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) == 0) {
      local = address_text(reinterpret_cast<const sockaddr*>(&self));
    } else {
      error = std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (local.empty()) return make_error("no route from this host to {}: {}", peer, error);
  return local;
}

}  // namespace kestrel
