// Waits for SIGINT/SIGTERM on a thread of its own (no work in a signal
// handler): `tessera serve` and `tessera route` shut down cleanly on the
// first signal and exit at once on the second.
#pragma once

#include <pthread.h>

#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace tessera::cli {

// Waits for SIGINT/SIGTERM on its own thread (they are blocked everywhere
// else) and reports the first; the second ends the process.
class SignalWaiter {
 public:
  SignalWaiter() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);  // inherited by every thread started later
    std::signal(SIGPIPE, SIG_IGN);              // a vanished client is a failed write, not a signal
    thread_ = std::thread([this] { run(); });
  }
  ~SignalWaiter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      exiting_ = true;
    }
    pthread_kill(thread_.native_handle(), SIGTERM);
    thread_.join();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return signalled_ != 0; });
  }
  int signal() const {
    std::lock_guard<std::mutex> lock(mu_);
    return signalled_;
  }

 private:
  void run() {
    for (;;) {
      int sig = 0;
      if (sigwait(&set_, &sig) != 0) continue;
      std::lock_guard<std::mutex> lock(mu_);
      if (exiting_) return;
      if (signalled_ != 0) {
        std::fprintf(stderr, "second signal: exiting now\n");
        std::_Exit(1);
      }
      signalled_ = sig;
      cv_.notify_all();
    }
  }
  sigset_t set_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int signalled_ = 0;
  bool exiting_ = false;
  std::thread thread_;
};

}  // namespace tessera::cli
