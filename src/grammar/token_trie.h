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
    uint8_t byte = 0;
    uint16_t depth = 0;      // the root is 0
    uint32_t end = 0;        // index past this node's subtree
    uint32_t tok_begin = 0;  // tokens whose text ends here: tokens()[tok_begin, tok_end)
    uint32_t tok_end = 0;
  };

  // pieces[id] is token id's text; empty pieces (control tokens) are left out.
  explicit TokenTrie(const std::vector<std::string>& pieces);

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int32_t n_vocab() const { return n_vocab_; }
  int32_t max_depth() const { return max_depth_; }

 private:
  std::vector<Node> nodes_;  // nodes_[0] is the root
  std::vector<int32_t> tokens_;
  int32_t n_vocab_ = 0;
  int32_t max_depth_ = 0;
};

}  // namespace tessera::grammar
