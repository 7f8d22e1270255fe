#include "proxy/proxy_server.h"

#include <fmt/format.h>

#include <optional>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "proxy/upstream.h"
#include "server/http/http_server.h"
#include "server/http/json_error.h"

namespace kestrel::proxy {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

constexpr std::chrono::milliseconds kProbeConnectTimeout{2000};
constexpr std::chrono::milliseconds kProbeTimeout{5000};
constexpr std::chrono::milliseconds kForwardTimeout{30000};

void respond_json(server::Responder& r, int status, const json& body) {
  r.respond(status, "application/json", body.dump());
}

void respond_error(server::Responder& r, int status, const char* type, const std::string& message) {
  r.respond(status, "application/json", server::json_error_body(status, type, message));
}

}  // namespace

Status check_proxy_options(const ProxyOptions& o) {
  if (o.prefiller_hosts.size() != o.prefiller_ports.size())
    return make_error("--prefiller-hosts ({}) and --prefiller-ports ({}) differ in length",
                      o.prefiller_hosts.size(), o.prefiller_ports.size());
  if (o.decoder_hosts.size() != o.decoder_ports.size())
    return make_error("--decoder-hosts ({}) and --decoder-ports ({}) differ in length",
                      o.decoder_hosts.size(), o.decoder_ports.size());
  if (o.prefiller_hosts.empty() || o.decoder_hosts.empty())
    return make_error("at least one prefill and one decode instance are needed");
  for (int p : o.prefiller_ports)
    if (p < 1 || p > 65535) return make_error("--prefiller-ports: {} is not a port", p);
  for (int p : o.decoder_ports)
    if (p < 1 || p > 65535) return make_error("--decoder-ports: {} is not a port", p);
  if (o.port < 0 || o.port > 65535) return make_error("--port: {} is not a port", o.port);
  if (o.max_retries < 1) return make_error("--max-retries: at least 1");
  if (!(o.retry_delay >= 0)) return make_error("--retry-delay: seconds, at least 0");
  if (o.max_waiting_retries < 1) return make_error("--max-waiting-retries: at least 1");
  if (!(o.waiting_retry_interval > 0)) return make_error("--waiting-retry-interval: above 0");
  if (o.workers < 1) return make_error("--workers: at least 1");
  return Status::Ok();
}

struct ProxyServer::Impl {
  explicit Impl(ProxyOptions o)
      : options(std::move(o)),
        work(asio::make_work_guard(ioc)),
        control(asio::make_strand(ioc)),
        probe_timer(control) {}

  ProxyOptions options;
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  Strand control;  // the prober and the route handlers' own exchanges
  asio::steady_timer probe_timer;
  InstancePool pool;
  LeaseReleaser leases;
  std::shared_ptr<std::atomic<int64_t>> in_flight = std::make_shared<std::atomic<int64_t>>(0);
  ProxyContext ctx;
  std::unique_ptr<server::HttpServer> http;

  UpstreamRequest backend_request(const Instance& to, std::string method, std::string target,
                                  std::chrono::milliseconds timeout) const {
    UpstreamRequest r;
    r.host = to.host;
    r.port = to.port;
    r.method = std::move(method);
    r.target = std::move(target);
    r.connect_timeout = std::min(timeout, ctx.settings.connect_timeout);
    r.idle_timeout = timeout;
    if (!ctx.settings.api_key.empty())
      r.headers.emplace_back("Authorization", "Bearer " + ctx.settings.api_key);
    return r;
  }

  void schedule_probes(std::chrono::milliseconds after) {
    probe_timer.expires_after(after);
    probe_timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      probe_now();
      schedule_probes(interval());
    });
  }

  std::chrono::milliseconds interval() const {
    return std::chrono::milliseconds(int64_t(options.waiting_retry_interval * 1000.0));
  }

  void probe_now() {
    leases.drain();
    for (const InstancePool::Handle& h : pool.to_probe()) {
      UpstreamRequest r = backend_request(*h, "GET", "/health", kProbeTimeout);
      r.connect_timeout = kProbeConnectTimeout;
      fetch(control, std::move(r), [this, h](UpstreamReply reply) {
        const bool ok = reply.error.empty() && reply.status == 200;
        pool.probed(h, ok);
        if (ok) KLOG_INFO("{} instance {} is up", role_name(h->role), h->address());
      });
    }
  }

  void models(std::shared_ptr<server::Responder> responder) {
    auto instances = pool.all(Role::kDecode);
    for (const auto& p : pool.all(Role::kPrefill)) instances.push_back(p);
    if (instances.empty()) {
      respond_error(*responder, 503, "ServiceUnavailableError", "no instance is available");
      return;
    }
    fetch(control, backend_request(*instances.front(), "GET", "/v1/models", kForwardTimeout),
          [responder, address = instances.front()->address()](UpstreamReply reply) {
            if (!reply.error.empty()) {
              respond_error(*responder, 502, "BadGatewayError",
                            fmt::format("instance {}: {}", address, reply.error));
              return;
            }
            responder->respond(reply.status, "application/json", std::move(reply.body));
          });
  }

  // Every instance resets its prefix cache; 200 when all did.
  void reset_prefix_cache(std::shared_ptr<server::Responder> responder) {
    std::vector<InstancePool::Handle> all = pool.all(Role::kPrefill);
    for (const auto& d : pool.all(Role::kDecode)) all.push_back(d);
    struct Gather {
      json results = json::array();
      size_t left = 0;
      bool ok = true;
    };
    auto g = std::make_shared<Gather>();
    g->left = all.size();
    if (all.empty()) {
      respond_json(*responder, 200, json{{"results", json::array()}});
      return;
    }
    for (const auto& h : all) {
      fetch(control, backend_request(*h, "POST", "/reset_prefix_cache", kForwardTimeout),
            [g, h, responder](UpstreamReply reply) {
              const bool ok = reply.error.empty() && reply.status == 200;
              g->ok = g->ok && ok;
              g->results.push_back(json{{"instance", h->address()},
                                        {"type", role_name(h->role)},
                                        {"status", reply.status},
                                        {"error", reply.error}});
              if (--g->left == 0)
                respond_json(*responder, g->ok ? 200 : 502, {{"results", g->results}});
            });
    }
  }

  // POST /instances/add and /instances/remove: {"type": "prefill" | "decode", "instances":
  // ["host:port", ...]}.
  void change_instances(const server::HttpRequest& request, server::Responder& responder,
                        bool add) {
    const json body = json::parse(request.body, nullptr, false);
    const std::string type = body.is_object() && body.contains("type") && body["type"].is_string()
                                 ? body["type"].get<std::string>()
                                 : "";
    if (type != "prefill" && type != "decode") {
      respond_error(responder, 400, "BadRequestError", "'type' must be \"prefill\" or \"decode\"");
      return;
    }
    if (!body.contains("instances") || !body["instances"].is_array()) {
      respond_error(responder, 400, "BadRequestError",
                    "'instances' must be a list of \"host:port\" strings");
      return;
    }
    const Role role = type == "prefill" ? Role::kPrefill : Role::kDecode;
    std::vector<Instance> parsed;
    for (const json& v : body["instances"]) {
      if (!v.is_string()) {
        respond_error(responder, 400, "BadRequestError",
                      "'instances' must be a list of \"host:port\" strings");
        return;
      }
      auto i = parse_instance(role, v.get<std::string>());
      if (!i.ok()) {
        respond_error(responder, 400, "BadRequestError", i.error().message);
        return;
      }
      parsed.push_back(*i);
    }
    json changed = json::array(), unchanged = json::array();
    for (const Instance& i : parsed) {
      const bool done =
          add ? pool.add_waiting(i, options.max_waiting_retries) : pool.remove(role, i.address());
      (done ? changed : unchanged).push_back(i.address());
      if (done) KLOG_INFO("{} {} instance {}", add ? "adding" : "removing", type, i.address());
    }
    if (add) asio::post(control, [this] { probe_now(); });
    respond_json(responder, 200,
                 json{{"message", fmt::format("{} {} instance(s) {}", changed.size(), type,
                                              add ? "added (taking requests once they answer)"
                                                  : "removed (after their requests finish)")},
                      {add ? "added" : "removed", changed},
                      {add ? "already_known" : "unknown", unchanged}});
  }

  void add_routes() {
    http->route("POST", "/v1/completions",
                [this](const server::HttpRequest& r, std::shared_ptr<server::Responder> out) {
                  run_pd_request(ctx, ApiKind::kCompletion, r, std::move(out));
                });
    http->route("POST", "/v1/chat/completions",
                [this](const server::HttpRequest& r, std::shared_ptr<server::Responder> out) {
                  run_pd_request(ctx, ApiKind::kChat, r, std::move(out));
                });
    http->route("GET", "/v1/models",
                [this](const server::HttpRequest&, std::shared_ptr<server::Responder> out) {
                  models(std::move(out));
                });
    http->route("GET", "/healthcheck",
                [this](const server::HttpRequest&, std::shared_ptr<server::Responder> out) {
                  const InstancePool::Counts c = pool.counts();
                  respond_json(*out, 200,
                               json{{"status", "ok"},
                                    {"prefill_instances", c.prefill},
                                    {"decode_instances", c.decode},
                                    {"request_num", in_flight->load()}});
                });
    http->route("GET", "/health",
                [](const server::HttpRequest&, std::shared_ptr<server::Responder> out) {
                  out->respond(200, "text/plain", "");
                });
    http->route("POST", "/reset_prefix_cache",
                [this](const server::HttpRequest&, std::shared_ptr<server::Responder> out) {
                  reset_prefix_cache(std::move(out));
                });
    http->route("POST", "/instances/add",
                [this](const server::HttpRequest& r, std::shared_ptr<server::Responder> out) {
                  change_instances(r, *out, true);
                });
    http->route("POST", "/instances/remove",
                [this](const server::HttpRequest& r, std::shared_ptr<server::Responder> out) {
                  change_instances(r, *out, false);
                });
  }
};

ProxyServer::ProxyServer(ProxyOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

ProxyServer::~ProxyServer() {
  stop(std::chrono::milliseconds(0));
}

Status ProxyServer::start() {
  Impl& m = *impl_;
  KTRY(check_proxy_options(m.options));
  const ProxyOptions& o = m.options;
  for (size_t i = 0; i < o.prefiller_hosts.size(); ++i)
    m.pool.add_ready(
        Instance{Role::kPrefill, o.prefiller_hosts[i], uint16_t(o.prefiller_ports[i])});
  for (size_t i = 0; i < o.decoder_hosts.size(); ++i)
    m.pool.add_ready(Instance{Role::kDecode, o.decoder_hosts[i], uint16_t(o.decoder_ports[i])});
  m.ctx.executor = m.ioc.get_executor();
  m.ctx.pool = &m.pool;
  m.ctx.leases = &m.leases;
  m.ctx.in_flight = m.in_flight;
  m.ctx.settings.max_retries = o.max_retries;
  m.ctx.settings.retry_delay = std::chrono::duration<double>(o.retry_delay);
  m.ctx.settings.api_key = o.api_key;
  server::HttpServerOptions ho;
  ho.host = o.host;
  ho.port = uint16_t(o.port);
  m.http = std::make_unique<server::HttpServer>(ho);
  m.add_routes();
  KTRY(m.http->start());
  for (int i = 0; i < o.workers; ++i) m.threads.emplace_back([&m] { m.ioc.run(); });
  asio::post(m.control, [&m] { m.schedule_probes(m.interval()); });
  KLOG_INFO("PD proxy on http://{}:{}: {} prefill and {} decode instance(s)", o.host, port(),
            o.prefiller_hosts.size(), o.decoder_hosts.size());
  return Status::Ok();
}

uint16_t ProxyServer::port() const {
  return impl_->http ? impl_->http->port() : 0;
}

void ProxyServer::stop(std::chrono::milliseconds grace) {
  Impl& m = *impl_;
  if (m.http) {
    m.http->stop_accepting();
    m.http->shutdown(grace);
  }
  asio::post(m.control, [&m] { m.probe_timer.cancel(); });
  m.work.reset();
  m.ioc.stop();
  for (std::thread& t : m.threads) t.join();
  m.threads.clear();
}

}  // namespace kestrel::proxy
