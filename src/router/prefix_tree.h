// An approximate prefix tree of the prompts a replica was sent: the router's
// guess at what that replica's prefix cache holds (SGLang's cache-aware
// router keeps the same per-worker tree). Text, not tokens: the router does
// not tokenize, and a long common text prefix means a long common token
// prefix for any tokenizer. Bounded: past `max_chars` the least recently
// used leaves go first, as the replica's own cache evicts.
//
// A radix tree over bytes; not thread-safe (the router locks around it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace tessera::router {

class PrefixTree {
 public:
  explicit PrefixTree(size_t max_chars = size_t{1} << 24);
  ~PrefixTree();
  PrefixTree(const PrefixTree&) = delete;
  PrefixTree& operator=(const PrefixTree&) = delete;
  PrefixTree(PrefixTree&&) noexcept = default;
  PrefixTree& operator=(PrefixTree&&) noexcept = default;

  // Characters of `text`'s longest prefix held by the tree. Read-only.
  size_t match(std::string_view text) const;
  // Adds `text` (marking its whole path used now) and evicts past the bound.
  void insert(std::string_view text);
  void clear();
  size_t chars() const { return chars_; }  // characters held (edge labels)
  size_t max_chars() const { return max_chars_; }

 private:
  struct Node {
    std::string label;  // the edge from the parent
    Node* parent = nullptr;
    std::map<char, std::unique_ptr<Node>> children;
    uint64_t used = 0;  // tick of the last insert through this node
  };
  void evict();

  std::unique_ptr<Node> root_;
  size_t chars_ = 0;
  size_t max_chars_;
  uint64_t tick_ = 0;
};

}  // namespace tessera::router
