#include "dist/local_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace kestrel {

Expected<std::string> local_address_toward(const std::string& peer) {
  if (const char* ip = std::getenv("VLLM_HOST_IP"); ip != nullptr && *ip != '\0')
    return std::string(ip);
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
      char text[INET6_ADDRSTRLEN] = {};
      const void* addr =
          self.ss_family == AF_INET
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&self)->sin_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&self)->sin6_addr);
      if (inet_ntop(self.ss_family, addr, text, sizeof(text)) != nullptr) local = text;
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
