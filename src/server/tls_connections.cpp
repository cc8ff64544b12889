#include "server/tls_connections.h"

#include <utility>

namespace allot::server {

namespace {

// The connection the calling worker serves, while it serves one.
struct Serving {
  const TlsConnections* owner = nullptr;
  std::string address;  // set once counted
  bool counted = false;
  bool over = false;
};
thread_local Serving serving;

}  // namespace

class TlsConnections::Queue final : public httplib::TaskQueue {
 public:
  Queue(TlsConnections& c, std::size_t threads) : c_(c), pool_(threads) {}
  void enqueue(std::function<void()> fn) override {
    pool_.enqueue([this, fn = std::move(fn)] {
      serving = Serving{&c_, {}, false, false};
      struct Done {
        TlsConnections& c;
        ~Done() {
          if (serving.counted) c.give_back(serving.address);
          serving = Serving{};
        }
      } done{c_};
      fn();
    });
  }
  void shutdown() override { pool_.shutdown(); }

 private:
  TlsConnections& c_;
  httplib::ThreadPool pool_;
};

httplib::TaskQueue* TlsConnections::new_queue(std::size_t threads) {
  return new Queue(*this, threads);  // cpp-httplib owns it
}

bool TlsConnections::admit(const std::string& address) {
  if (max_ == 0 || serving.owner != this) return true;
  if (serving.counted) return !serving.over;
  std::lock_guard lk(mu_);
  auto& n = open_[address];
  ++n;
  serving.counted = true;
  serving.address = address;
  serving.over = n > max_;
  return !serving.over;
}

void TlsConnections::give_back(const std::string& address) {
  std::lock_guard lk(mu_);
  auto it = open_.find(address);
  if (it != open_.end() && --it->second == 0) open_.erase(it);
}

std::size_t TlsConnections::open_from(const std::string& address) const {
  std::lock_guard lk(mu_);
  auto it = open_.find(address);
  return it == open_.end() ? 0 : it->second;
}

}  // namespace allot::server
