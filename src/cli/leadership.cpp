#include "cli/leadership.h"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "server/standby.h"
#include "store/postgres_lease.h"

namespace allot::cli {

using Clock = std::chrono::steady_clock;

namespace {
// Gone before the lease could expire on PostgreSQL's clock: a renewal sent at t0 keeps the lease
// until t0 + expiry at the least, and this leader stops this much before that.
constexpr auto kMargin = std::chrono::milliseconds(500);

[[noreturn]] void step_down(const std::string& why) {
  std::fprintf(stderr, "allot: %s: stopping now (restarted, this server stands by)\n", why.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  std::_Exit(server::kDeposedExit);
}

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}
}  // namespace

struct Leadership::Impl {
  std::unique_ptr<store::LeaderLease> lease;
  LeadershipOptions opts;
  std::string address;
  std::atomic<Clock::rep> valid_until{0};
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::thread renewer, watchdog;

  void renewed_at(Clock::time_point sent) {
    valid_until = (sent + opts.expiry - kMargin).time_since_epoch().count();
  }
  bool wait(std::chrono::milliseconds d) {
    std::unique_lock lk(mu);
    return !cv.wait_for(lk, d, [&] { return stopping; });
  }

  void renew_loop() {
    std::string last_error;
    while (wait(opts.renew_every)) {
      const auto sent = Clock::now();
      auto r = lease->renew();
      if (r.ok() && r.value()) {
        renewed_at(sent);
        last_error.clear();
      } else if (r.ok()) {
        auto now = lease->current();
        step_down("the leader lease (epoch " + std::to_string(lease->epoch()) + ") was taken by " +
                  (now.ok() ? now.value().holder + " at " + now.value().address + " (epoch " +
                                  std::to_string(now.value().epoch) + ")"
                            : std::string("another server")));
      } else if (r.error().reason != last_error) {
        last_error = r.error().reason;
        std::fprintf(stderr, "allot: cannot renew the leader lease: %s\n", last_error.c_str());
      }
    }
  }
  void watch_loop() {
    while (wait(std::chrono::milliseconds(100))) {
      if (Clock::now().time_since_epoch().count() > valid_until.load()) {
        step_down("the leader lease (epoch " + std::to_string(lease->epoch()) +
                  ") could not be renewed in time; another server may take it over");
      }
    }
  }
};

Leadership::Leadership(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Leadership::~Leadership() {
  {
    std::lock_guard lk(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->renewer.joinable()) impl_->renewer.join();
  if (impl_->watchdog.joinable()) impl_->watchdog.join();
}

std::int64_t Leadership::epoch() const {
  return impl_->lease->epoch();
}
const std::string& Leadership::address() const {
  return impl_->address;
}

void Leadership::release() {
  {
    std::lock_guard lk(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->renewer.joinable()) impl_->renewer.join();
  if (impl_->watchdog.joinable()) impl_->watchdog.join();
  impl_->lease->release();
}

core::Result<std::unique_ptr<Leadership>> Leadership::stand_by(const LeadershipOptions& o,
                                                               const sigset_t& signals, int& sig,
                                                               int& port) {
  server::StandbyListener listener(o.tls_cert, o.tls_key);
  auto bound = listener.start(o.host, o.port);
  if (!bound.ok()) return bound.error();
  port = bound.value();
  auto impl = std::make_unique<Impl>();
  impl->opts = o;
  impl->address = o.advertise;
  if (impl->address.empty()) {
    const bool any = o.host == "0.0.0.0" || o.host == "::" || o.host.empty();
    impl->address = std::string(o.tls_cert.empty() ? "http" : "https") + "://" +
                    (any                                     ? this_host()
                     : o.host.find(':') != std::string::npos ? "[" + o.host + "]"
                                                             : o.host) +
                    ":" + std::to_string(port);
  }
  auto lease = store::LeaderLease::open(
      o.uri, {this_host() + ":" + std::to_string(::getpid()), impl->address, o.expiry});
  if (!lease.ok()) return lease.error();
  impl->lease = std::move(lease.value());

  std::string shown, last_error;
  bool said = false;
  for (;;) {
    const auto sent = Clock::now();
    auto taken = impl->lease->try_take();
    if (taken.ok() && taken.value()) {
      impl->renewed_at(sent);
      break;
    }
    if (!taken.ok() && taken.error().reason != last_error) {
      last_error = taken.error().reason;
      std::fprintf(stderr, "allot: cannot reach the leader lease: %s\n", last_error.c_str());
    }
    auto now = impl->lease->current();
    if (now.ok()) {
      const auto& st = now.value();
      const std::string leader = st.expired ? "" : st.address;
      listener.set_leader(leader, st.epoch);
      if (!said || leader != shown) {
        std::printf("allot server standing by on %s: %s\n", impl->address.c_str(),
                    leader.empty()
                        ? "no leader now"
                        : ("the leader is " + leader + " (epoch " + std::to_string(st.epoch) + ")")
                              .c_str());
        std::fflush(stdout);
        said = true;
        shown = leader;
      }
    }
    listener.serve();  // from the first look at the lease on, naming its holder
    timespec ts{};
    ts.tv_sec = o.poll_every.count() / 1000;
    ts.tv_nsec = (o.poll_every.count() % 1000) * 1'000'000;
    if (int s = sigtimedwait(&signals, nullptr, &ts); s > 0) {
      sig = s;
      return std::unique_ptr<Leadership>();
    }
  }
  listener.stop();
  std::printf("allot server is the leader (epoch %lld) at %s\n",
              static_cast<long long>(impl->lease->epoch()), impl->address.c_str());
  std::fflush(stdout);
  auto* raw = impl.get();
  raw->renewer = std::thread([raw] { raw->renew_loop(); });
  raw->watchdog = std::thread([raw] { raw->watch_loop(); });
  return std::unique_ptr<Leadership>(new Leadership(std::move(impl)));
}

}  // namespace allot::cli
