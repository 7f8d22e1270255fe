#include "kvx/tcp.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

namespace kestrel {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxIov = 512;  // pieces per system call (IOV_MAX is 1024 on Linux)

int millis_left(Deadline d) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now());
  return int(std::clamp<int64_t>(left.count(), 0, 1000000));
}

void set_nonblocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void tune(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
}

// Moves `done` bytes past the start of the pieces in `iov` (modified in place); returns the
// first piece still to go.
size_t advance(std::vector<iovec>& iov, size_t first, size_t done) {
  while (done > 0 && first < iov.size()) {
    const size_t take = std::min(done, iov[first].iov_len);
    iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + take;
    iov[first].iov_len -= take;
    done -= take;
    if (iov[first].iov_len == 0) ++first;
  }
  while (first < iov.size() && iov[first].iov_len == 0) ++first;
  return first;
}

}  // namespace

TcpConn::~TcpConn() {
  close();
}

TcpConn::TcpConn(TcpConn&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}

TcpConn& TcpConn::operator=(TcpConn&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void TcpConn::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void TcpConn::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Expected<TcpConn> TcpConn::connect(const std::string& host, int port, Deadline deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
      rc != 0)
    return make_error("cannot resolve {}: {}", host, gai_strerror(rc));
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    set_nonblocking(fd);
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = poll(&p, 1, millis_left(deadline)) == 1 ? 0 : -1;
      int err = rc == 0 ? 0 : ETIMEDOUT;
      socklen_t len = sizeof(err);
      if (rc == 0) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        rc = -1;
        errno = err;
      }
    }
    if (rc == 0) {
      freeaddrinfo(found);
      tune(fd);
      return TcpConn(fd);
    }
    error = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(found);
  return make_error("cannot connect to {}:{}: {}", host, port, error);
}

Status TcpConn::wait(bool for_write, Deadline deadline) {
  pollfd p{fd_, short(for_write ? POLLOUT : POLLIN), 0};
  while (true) {
    const int rc = poll(&p, 1, millis_left(deadline));
    if (rc > 0) return Status::Ok();
    if (rc < 0 && errno == EINTR) continue;
    return make_error("timed out");
  }
}

Status TcpConn::send_pieces(std::span<const IoPiece> pieces, Deadline deadline) {
  if (fd_ < 0) return make_error("connection closed");
  std::vector<iovec> iov;
  for (const IoPiece& p : pieces)
    if (p.size > 0) iov.push_back(iovec{p.data, p.size});
  size_t first = 0;
  while (first < iov.size()) {
    msghdr m{};
    m.msg_iov = iov.data() + first;
    m.msg_iovlen = std::min(kMaxIov, iov.size() - first);
    const ssize_t n = sendmsg(fd_, &m, MSG_NOSIGNAL);
    if (n > 0) {
      first = advance(iov, first, size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Status st = wait(true, deadline); !st.ok()) return make_error("send timed out");
      continue;
    }
    return make_error("send failed: {}", n < 0 ? std::strerror(errno) : "closed");
  }
  return Status::Ok();
}

Status TcpConn::recv_pieces(std::span<const IoPiece> pieces, Deadline deadline) {
  if (fd_ < 0) return make_error("connection closed");
  std::vector<iovec> iov;
  for (const IoPiece& p : pieces)
    if (p.size > 0) iov.push_back(iovec{p.data, p.size});
  size_t first = 0;
  while (first < iov.size()) {
    const ssize_t n = readv(fd_, iov.data() + first, int(std::min(kMaxIov, iov.size() - first)));
    if (n > 0) {
      first = advance(iov, first, size_t(n));
      continue;
    }
    if (n == 0) return make_error("the peer closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (Status st = wait(false, deadline); !st.ok()) return make_error("receive timed out");
      continue;
    }
    return make_error("receive failed: {}", std::strerror(errno));
  }
  return Status::Ok();
}

Status TcpConn::send_all(const void* data, size_t n, Deadline deadline) {
  const IoPiece p{const_cast<void*>(data), n};
  return send_pieces(std::span<const IoPiece>(&p, 1), deadline);
}

Status TcpConn::recv_all(void* data, size_t n, Deadline deadline) {
  const IoPiece p{data, n};
  return recv_pieces(std::span<const IoPiece>(&p, 1), deadline);
}

Status TcpConn::send_message(const nlohmann::json& message, Deadline deadline) {
  const std::vector<uint8_t> body = nlohmann::json::to_msgpack(message);
  const uint32_t len = htonl(uint32_t(body.size()));
  const IoPiece pieces[2] = {{const_cast<uint32_t*>(&len), sizeof(len)},
                             {const_cast<uint8_t*>(body.data()), body.size()}};
  return send_pieces(pieces, deadline);
}

Expected<nlohmann::json> TcpConn::recv_message(Deadline deadline, size_t max_bytes) {
  uint32_t len = 0;
  KTRY(recv_all(&len, sizeof(len), deadline));
  len = ntohl(len);
  if (len > max_bytes) return make_error("a message of {} bytes (at most {})", len, max_bytes);
  std::vector<uint8_t> body(len);
  KTRY(recv_all(body.data(), len, deadline));
  try {
    return nlohmann::json::from_msgpack(body);
  } catch (const nlohmann::json::exception& e) {
    return make_error("a malformed message: {}", e.what());
  }
}

TcpListener::~TcpListener() {
  close();
}

TcpListener::TcpListener(TcpListener&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), port_(o.port_) {}

TcpListener& TcpListener::operator=(TcpListener&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = std::exchange(o.fd_, -1);
    port_ = o.port_;
  }
  return *this;
}

void TcpListener::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Expected<TcpListener> TcpListener::listen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
      rc != 0)
    return make_error("cannot resolve {}: {}", host, gai_strerror(rc));
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool ok =
      fd >= 0 && bind(fd, found->ai_addr, found->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0;
  const int err = errno;
  freeaddrinfo(found);
  if (!ok) {
    if (fd >= 0) ::close(fd);
    return make_error("cannot listen on {}:{}: {}", host, port, std::strerror(err));
  }
  sockaddr_storage self{};
  socklen_t len = sizeof(self);
  getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len);
  TcpListener l;
  l.fd_ = fd;
  l.port_ = ntohs(self.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&self)->sin_port
                                            : reinterpret_cast<sockaddr_in6*>(&self)->sin6_port);
  return l;
}

Expected<std::optional<TcpConn>> TcpListener::accept(std::chrono::milliseconds timeout) {
  pollfd p{fd_, POLLIN, 0};
  const int rc = poll(&p, 1, int(timeout.count()));
  if (rc == 0 || (rc < 0 && errno == EINTR)) return std::optional<TcpConn>();
  if (rc < 0) return make_error("accept: {}", std::strerror(errno));
  const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return std::optional<TcpConn>();  // the peer gave up already
  tune(fd);
  return std::optional<TcpConn>(TcpConn(fd));
}

}  // namespace kestrel
