// dist::Group for threads of one process (the tensor-parallel tests): rank r
// is group.rank(r); the ranks' threads meet at each collective, and the last
// to arrive does the work for all: sums the parts in rank order (so every
// rank gets the same bits), gathers them to the root, or copies the root's
// string.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "dist/group.h"

namespace tessera::testing {

class ThreadGroup {
 public:
  explicit ThreadGroup(int n) : floats_(static_cast<size_t>(n)), parts_(static_cast<size_t>(n)), strings_(static_cast<size_t>(n)) {
    for (int r = 0; r < n; ++r) handles_.push_back(std::make_unique<Handle>(*this, r));
  }
  dist::Group* rank(int r) { return handles_[static_cast<size_t>(r)].get(); }
  int size() const { return static_cast<int>(handles_.size()); }

 private:
  struct Handle final : dist::Group {
    Handle(ThreadGroup& g, int r) : group(g), rank_of(r) {}
    int rank() const override { return rank_of; }
    int size() const override { return group.size(); }
    void sum(std::span<float> values) override { group.sum(rank_of, values); }
    std::string broadcast(std::string value, int root) override { return group.broadcast(rank_of, std::move(value), root); }
    void gather(std::span<const float> part, std::span<float> all, int root) override {
      group.gather(rank_of, part, all, root);
    }
    void all_gather(std::span<const float> part, std::span<float> all) override {
      group.all_gather(rank_of, part, all);
    }
    ThreadGroup& group;
    int rank_of;
  };

  // Waits for every rank; the last one runs `last` (under the lock) first.
  template <class F>
  void meet(std::unique_lock<std::mutex>& lock, F last) {
    const uint64_t generation = generation_;
    if (++arrived_ < size()) {
      cv_.wait(lock, [&] { return generation_ != generation; });
      return;
    }
    last();
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  }
  void sum(int rank, std::span<float> values) {
    std::unique_lock lock(mu_);
    floats_[static_cast<size_t>(rank)] = values;
    meet(lock, [&] {
      std::vector<float> total(values.size(), 0.0f);
      for (const std::span<float> p : floats_) {
        for (size_t i = 0; i < total.size() && i < p.size(); ++i) total[i] += p[i];
      }
      for (const std::span<float> p : floats_) std::copy_n(total.begin(), std::min(total.size(), p.size()), p.begin());
    });
  }
  void gather(int rank, std::span<const float> part, std::span<float> all, int root) {
    std::unique_lock lock(mu_);
    parts_[static_cast<size_t>(rank)] = part;
    if (rank == root) gathered_ = all;
    meet(lock, [&] {
      for (size_t r = 0; r < parts_.size(); ++r) std::copy(parts_[r].begin(), parts_[r].end(), gathered_.begin() + r * parts_[r].size());
    });
  }
  void all_gather(int rank, std::span<const float> part, std::span<float> all) {
    std::unique_lock lock(mu_);
    parts_[static_cast<size_t>(rank)] = part;
    floats_[static_cast<size_t>(rank)] = all;
    meet(lock, [&] {
      for (const std::span<float> dest : floats_) {
        for (size_t r = 0; r < parts_.size(); ++r) std::copy(parts_[r].begin(), parts_[r].end(), dest.begin() + r * parts_[r].size());
      }
    });
  }
  std::string broadcast(int rank, std::string value, int root) {
    std::unique_lock lock(mu_);
    strings_[static_cast<size_t>(rank)] = std::move(value);
    meet(lock, [&] {
      for (std::string& s : strings_) s = strings_[static_cast<size_t>(root)];
    });
    return strings_[static_cast<size_t>(rank)];
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::span<float>> floats_;
  std::vector<std::span<const float>> parts_;
  std::span<float> gathered_;
  std::vector<std::string> strings_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<std::unique_ptr<Handle>> handles_;
};

}  // namespace tessera::testing
