// kestrel proxy — the guides' load_balance_proxy_server_example.py: the OpenAI routes in front of
// prefill and decode instances (proxy/proxy_server.h), with the same flags and defaults. Runs
// until SIGINT/SIGTERM, then lets requests in flight finish.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "base/logging.h"
#include "cli/commands.h"
#include "cli/serve_args.h"
#include "proxy/proxy_server.h"
#include "server/http/signals.h"

namespace kestrel::cli {

namespace {

constexpr std::chrono::seconds kShutdownGrace{30};

int run_proxy(int argc, char** argv) {
  proxy::ProxyOptions o;
  if (const char* key = std::getenv("OPENAI_API_KEY"); key != nullptr) o.api_key = key;
  CLI::App app{
      "The PD load-balancing proxy: each request is prefilled on a prefill instance, then "
      "decoded on a decode instance that loads its KV (the guides' "
      "load_balance_proxy_server_example.py).",
      "kestrel proxy"};
  app.add_option("--host", o.host, "address to listen on (default localhost)");
  app.add_option("--port", o.port, "port to listen on (default 8000)")->check(CLI::Range(0, 65535));
  app.add_option("--prefiller-hosts", o.prefiller_hosts, "prefill instances' hosts, one per rank")
      ->expected(1, -1);
  app.add_option("--prefiller-ports", o.prefiller_ports, "their HTTP ports, in the same order")
      ->expected(1, -1);
  app.add_option("--decoder-hosts", o.decoder_hosts, "decode instances' hosts, one per rank")
      ->expected(1, -1);
  app.add_option("--decoder-ports", o.decoder_ports, "their HTTP ports, in the same order")
      ->expected(1, -1);
  app.add_option("--max-retries", o.max_retries,
                 "attempts per request before it fails (only before the first byte; default 3)");
  app.add_option("--retry-delay", o.retry_delay,
                 "seconds before the second attempt, doubled for each next (default 0.001)");
  app.add_option("--max-waiting-retries", o.max_waiting_retries,
                 "health probes of an instance added at run time before it is dropped (default 3)");
  app.add_option("--waiting-retry-interval", o.waiting_retry_interval,
                 "seconds between health probes of added and failed instances (default 10)");
  app.add_option("--workers", o.workers,
                 "threads for the backend connections (the original's uvicorn workers; default 1)");
  app.add_option("--log-level", o.log_level, "debug | info | warning | error (any case)");
  std::vector<std::string> args(argv + 1, argv + argc);
  auto normalized = normalize_vllm_argv(app, args);
  if (!normalized.ok()) {
    std::fprintf(stderr, "kestrel proxy: error: %s\n", normalized.error().message.c_str());
    return 2;
  }
  std::reverse(normalized->begin(), normalized->end());
  try {
    app.parse(*normalized);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::transform(o.log_level.begin(), o.log_level.end(), o.log_level.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  if (Status st = proxy::check_proxy_options(o); !st.ok()) {
    std::fprintf(stderr, "kestrel proxy: error: %s\n", st.message().c_str());
    return 2;
  }
  set_log_level(o.log_level);
  server::SignalWaiter signals;
  proxy::ProxyServer server(o);
  if (Status st = server.start(); !st.ok()) {
    KLOG_ERROR("cannot serve on {}:{}: {}", o.host, o.port, st.message());
    return 1;
  }
  const int sig = signals.wait();
  KLOG_INFO("Shutting down (signal {}); finishing requests in flight for up to {} s", sig,
            kShutdownGrace.count());
  server.stop(kShutdownGrace);
  return 0;
}

}  // namespace

KESTREL_COMMAND("proxy",
                "the PD load-balancing proxy in front of prefill and decode instances (the "
                "guides' load_balance_proxy_server_example.py)",
                run_proxy);

}  // namespace kestrel::cli
