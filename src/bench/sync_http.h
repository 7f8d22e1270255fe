// bench/sync_http.h — a blocking HTTP/1.1 client on one keep-alive connection, for the few
// set-up calls `bench serve` makes before its run (/v1/models, /tokenize, /detokenize).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace kestrel::bench {

struct HttpReply {
  int status = 0;
  std::string body;
};

class SyncHttpClient {
 public:
  SyncHttpClient(std::string host, uint16_t port, std::string api_key);
  ~SyncHttpClient();
  SyncHttpClient(const SyncHttpClient&) = delete;
  SyncHttpClient& operator=(const SyncHttpClient&) = delete;

  // GET or POST (with a JSON body) `path`. The connection is opened on first use and reopened
  // once if the server closed it; errors name the URL. Any status is returned, not only 200.
  Expected<HttpReply> get(const std::string& path);
  Expected<HttpReply> post_json(const std::string& path, const std::string& body);

 private:
  struct Conn;
  Expected<HttpReply> call(bool post, const std::string& path, const std::string& body);

  std::string host_;
  uint16_t port_;
  std::string api_key_;
  std::unique_ptr<Conn> conn_;
};

}  // namespace kestrel::bench
