#include "server/http/signals.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>

namespace kestrel::server {

struct SignalWaiter::Impl {
  boost::asio::io_context ioc;
  boost::asio::signal_set signals{ioc};
};

SignalWaiter::SignalWaiter(std::initializer_list<int> signals) : impl_(std::make_unique<Impl>()) {
  for (int sig : signals) impl_->signals.add(sig);
}

SignalWaiter::~SignalWaiter() = default;

int SignalWaiter::wait() {
  int caught = 0;
  impl_->signals.async_wait([&caught](const boost::system::error_code& ec, int sig) {
    if (!ec) caught = sig;
  });
  impl_->ioc.restart();
  impl_->ioc.run();
  return caught;
}

void SignalWaiter::cancel() {
  boost::asio::post(impl_->ioc, [this] { impl_->signals.cancel(); });
}

}  // namespace kestrel::server
