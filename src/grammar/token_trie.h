// The vocabulary as a byte trie stored in depth-first order, so that a walk
// skips a whole subtree (every token sharing a dead prefix) with one jump.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::grammar {

class TokenTrie {
 public:
  struct Node {
    uint32_t end = 0;     // index past this node's subtree
    int32_t token = 0;    // a token whose text ends here, or n_vocab() (none)
    uint16_t depth = 0;   // the root is 0
    uint8_t byte = 0;
  };

  // pieces[id] is token id's text; empty pieces (control tokens) are left
  // out. Walks set bit `token` of every live node: bit n_vocab() is the
  // scratch bit of nodes without a token (callers clear it).
  explicit TokenTrie(const std::vector<std::string>& pieces);

  const std::vector<Node>& nodes() const { return nodes_; }
  // Tokens with the same text as another's (byte-fallback twins): pairs
  // (the node's token, the twin). Allowed exactly when the first is.
  const std::vector<std::pair<int32_t, int32_t>>& twins() const { return twins_; }
  int32_t n_vocab() const { return n_vocab_; }
  int32_t max_depth() const { return max_depth_; }
  // kWays + 1 node indices at boundaries between the root's subtrees that
  // cut the nodes in kWays runs of about equal size: walks run them side by
  // side, so that one run's dependent loads overlap another's.
  static constexpr int kWays = 4;
  const std::vector<uint32_t>& splits() const { return splits_; }
  // The bytes from the root to `node`, its own last.
  std::string path_to(uint32_t node) const;

 private:
  std::vector<Node> nodes_;  // nodes_[0] is the root
  std::vector<std::pair<int32_t, int32_t>> twins_;
  std::vector<uint32_t> splits_;
  std::vector<uint32_t> parents_;  // per node (the root's is 0); walks never read it
  int32_t n_vocab_ = 0;
  int32_t max_depth_ = 0;
};

}  // namespace tessera::grammar
