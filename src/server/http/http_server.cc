#include "server/http/http_server.h"

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include "base/logging.h"
#include "server/http/connection.h"

namespace kestrel::server {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {
// The server whose I/O thread this is, to refuse blocking calls that would deadlock.
thread_local const HttpServer::Impl* t_io_thread_of = nullptr;
// Bound on waiting for connections to finish closing once told to (they close at once unless a
// handler blocks an I/O thread).
constexpr std::chrono::seconds kCloseWait{5};
}  // namespace

struct HttpServer::Impl final : detail::ConnectionOwner {
  explicit Impl(HttpServerOptions opts) : opts(std::move(opts)) {}

  const HttpServerOptions& options() const override { return opts; }
  const Router& router() const override { return routes; }
  bool stopping() const override { return is_stopping.load(); }

  void connection_closed(uint64_t id) override {
    std::lock_guard lock(mu);
    connections.erase(id);
    connections_cv.notify_all();
  }

  void accept_next() {
    acceptor.async_accept(asio::make_strand(ioc), [this](error_code ec, tcp::socket socket) {
      on_accept(ec, std::move(socket));
    });
  }

  void on_accept(error_code ec, tcp::socket socket) {
    if (!acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors and the like: back off instead of spinning.
      KLOG_WARN("accept failed: {}", ec.message());
      retry_timer.expires_after(std::chrono::milliseconds(50));
      retry_timer.async_wait([this](error_code wait_ec) {
        if (!wait_ec && acceptor.is_open()) accept_next();
      });
      return;
    }
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // SSE events must not wait for Nagle
    auto conn = std::make_shared<detail::Connection>(std::move(socket), next_id, *this);
    bool rejected;
    bool closing;
    {
      std::lock_guard lock(mu);
      rejected = opts.max_connections > 0 && connections.size() >= opts.max_connections;
      closing = force_closing;
      connections.emplace(next_id++, conn);
    }
    if (closing) {
      conn->force_close();
    } else if (rejected) {
      conn->start_rejecting(503, "ServiceUnavailableError", "Too many connections");
    } else {
      conn->start();
    }
    accept_next();
  }

  void close_acceptor() {
    error_code ignored;
    acceptor.close(ignored);
    retry_timer.cancel();
  }

  // Tells every open connection `fn`.
  template <typename Fn>
  void for_each_connection(Fn fn) {
    std::vector<std::shared_ptr<detail::Connection>> live;
    {
      std::lock_guard lock(mu);
      for (auto& [id, weak] : connections) {
        if (auto conn = weak.lock()) live.push_back(std::move(conn));
      }
    }
    for (auto& conn : live) fn(*conn);
  }

  bool wait_for_no_connections(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mu);
    return connections_cv.wait_until(lock, deadline, [&] { return connections.empty(); });
  }

  HttpServerOptions opts;
  Router routes;
  std::atomic<bool> is_stopping{false};
  std::atomic<uint16_t> bound_port{0};
  bool started = false;
  std::atomic<bool> shut_down{false};

  mutable std::mutex mu;  // guards connections, next_id, force_closing
  std::condition_variable connections_cv;
  std::unordered_map<uint64_t, std::weak_ptr<detail::Connection>> connections;
  uint64_t next_id = 1;
  bool force_closing = false;

  std::vector<std::thread> threads;
  // Declared last so that it is destroyed first: pending handlers still own connections, which
  // call back into the members above while they are destroyed.
  asio::io_context ioc;
  asio::strand<asio::io_context::executor_type> accept_strand{ioc.get_executor()};
  tcp::acceptor acceptor{accept_strand};
  asio::steady_timer retry_timer{accept_strand};
  asio::executor_work_guard<asio::io_context::executor_type> work{ioc.get_executor()};
};

HttpServer::HttpServer(HttpServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

HttpServer::~HttpServer() {
  shutdown(std::chrono::milliseconds(0));
}

void HttpServer::route(std::string method, std::string path, Handler handler) {
  KCHECK(!impl_->started, "routes must be added before start()");
  impl_->routes.add(std::move(method), std::move(path), std::move(handler));
}

Status HttpServer::start() {
  KCHECK(!impl_->started, "start() called twice");
  Impl& s = *impl_;
  if (s.opts.io_threads < 1) return make_error("io_threads must be at least 1");
  error_code ec;
  auto address = asio::ip::make_address(s.opts.host, ec);
  tcp::endpoint endpoint;
  if (!ec) {
    endpoint = tcp::endpoint(address, s.opts.port);
  } else {
    tcp::resolver resolver(s.ioc);
    auto results = resolver.resolve(s.opts.host, std::to_string(s.opts.port), ec);
    if (ec || results.empty()) {
      return make_error("cannot resolve host '{}': {}", s.opts.host, ec.message());
    }
    endpoint = results.begin()->endpoint();
  }
  auto fail = [&](std::string_view what) {
    error_code ignored;
    s.acceptor.close(ignored);
    return make_error("cannot {} {}:{}: {}", what, s.opts.host, s.opts.port, ec.message());
  };
  if (s.acceptor.open(endpoint.protocol(), ec)) return fail("open socket for");
  if (s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec)) return fail("configure");
  if (s.opts.reuse_port &&
      s.acceptor.set_option(asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>(true),
                            ec))
    return fail("share");
  if (s.acceptor.bind(endpoint, ec)) return fail("bind");
  if (s.acceptor.listen(asio::socket_base::max_listen_connections, ec)) return fail("listen on");
  s.bound_port = s.acceptor.local_endpoint(ec).port();

  s.started = true;
  asio::post(s.accept_strand, [&s] { s.accept_next(); });
  for (int i = 0; i < s.opts.io_threads; ++i) {
    s.threads.emplace_back([&s] {
      t_io_thread_of = &s;
      while (true) {
        try {
          s.ioc.run();
          return;
        } catch (const std::exception& e) {
          KLOG_ERROR("uncaught exception on an HTTP I/O thread: {}", e.what());
        }
      }
    });
  }
  KLOG_INFO("HTTP server listening on {}:{} ({} I/O threads)", s.opts.host, s.bound_port.load(),
            s.opts.io_threads);
  return Status::Ok();
}

uint16_t HttpServer::port() const {
  return impl_->bound_port;
}

size_t HttpServer::connection_count() const {
  std::lock_guard lock(impl_->mu);
  return impl_->connections.size();
}

void HttpServer::stop_accepting() {
  Impl& s = *impl_;
  if (!s.started) return;
  if (s.accept_strand.running_in_this_thread()) {
    s.close_acceptor();
    return;
  }
  if (t_io_thread_of == &s || s.ioc.stopped()) {
    // Waiting here could block the only thread that would run the close.
    asio::post(s.accept_strand, [&s] { s.close_acceptor(); });
    return;
  }
  std::promise<void> closed;
  asio::post(s.accept_strand, [&s, &closed] {
    s.close_acceptor();
    closed.set_value();
  });
  closed.get_future().wait();
}

void HttpServer::shutdown(std::chrono::milliseconds grace) {
  Impl& s = *impl_;
  if (!s.started) return;
  KCHECK(t_io_thread_of != &s, "HttpServer::shutdown() called from its own I/O thread");
  if (s.shut_down.exchange(true)) return;
  auto deadline = std::chrono::steady_clock::now() + grace;
  stop_accepting();
  s.is_stopping = true;
  s.for_each_connection([](detail::Connection& c) { c.close_if_idle(); });
  if (!s.wait_for_no_connections(deadline) && grace.count() > 0) {
    KLOG_INFO("closing {} connection(s) still busy after the shutdown grace period",
              connection_count());
  }
  {
    std::lock_guard lock(s.mu);
    s.force_closing = true;
  }
  s.for_each_connection([](detail::Connection& c) { c.force_close(); });
  if (!s.wait_for_no_connections(std::chrono::steady_clock::now() + kCloseWait)) {
    KLOG_WARN("{} connection(s) did not close; an I/O thread may be blocked", connection_count());
  }
  s.work.reset();
  s.ioc.stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();
}

}  // namespace kestrel::server
