#include "router/prefix_tree.h"

#include <algorithm>
#include <queue>
#include <utility>
#include <vector>

namespace tessera::router {

PrefixTree::PrefixTree(size_t max_chars) : root_(std::make_unique<Node>()), max_chars_(max_chars) {}

PrefixTree::~PrefixTree() = default;

size_t PrefixTree::match(std::string_view text) const {
  const Node* node = root_.get();
  size_t pos = 0;
  while (pos < text.size()) {
    auto it = node->children.find(text[pos]);
    if (it == node->children.end()) break;
    const std::string& label = it->second->label;
    const size_t n = std::min(label.size(), text.size() - pos);
    size_t k = 0;
    while (k < n && label[k] == text[pos + k]) ++k;
    pos += k;
    if (k < label.size()) break;  // ended inside the edge
    node = it->second.get();
  }
  return pos;
}

void PrefixTree::insert(std::string_view text) {
  const uint64_t now = ++tick_;
  Node* node = root_.get();
  node->used = now;
  size_t pos = 0;
  while (pos < text.size()) {
    auto it = node->children.find(text[pos]);
    if (it == node->children.end()) {
      auto leaf = std::make_unique<Node>();
      leaf->label.assign(text.substr(pos));
      leaf->parent = node;
      leaf->used = now;
      chars_ += leaf->label.size();
      node->children.emplace(text[pos], std::move(leaf));
      break;
    }
    Node* child = it->second.get();
    const std::string& label = child->label;
    const size_t n = std::min(label.size(), text.size() - pos);
    size_t k = 0;
    while (k < n && label[k] == text[pos + k]) ++k;
    if (k < label.size()) {
      // Split the edge at k: a new middle node takes the common part.
      auto mid = std::make_unique<Node>();
      mid->label = label.substr(0, k);
      mid->parent = node;
      mid->used = now;
      std::unique_ptr<Node> old = std::move(it->second);
      old->label.erase(0, k);
      old->parent = mid.get();
      mid->children.emplace(old->label[0], std::move(old));
      it->second = std::move(mid);
      child = it->second.get();
    }
    child->used = now;
    pos += k;
    node = child;
  }
  if (chars_ > max_chars_) evict();
}

void PrefixTree::clear() {
  root_ = std::make_unique<Node>();
  chars_ = 0;
}

// Least recently used leaves first, down to 90% of the bound (so that a full
// tree does not evict on every insert); a parent left without children
// becomes a leaf in its turn.
void PrefixTree::evict() {
  const size_t target = max_chars_ - max_chars_ / 10;
  using Entry = std::pair<uint64_t, Node*>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> leaves;
  std::vector<Node*> stack{root_.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (n != root_.get() && n->children.empty()) leaves.emplace(n->used, n);
    for (auto& [c, child] : n->children) stack.push_back(child.get());
  }
  while (chars_ > target && !leaves.empty()) {
    Node* leaf = leaves.top().second;
    leaves.pop();
    Node* parent = leaf->parent;
    chars_ -= leaf->label.size();
    parent->children.erase(leaf->label[0]);
    if (parent != root_.get() && parent->children.empty()) leaves.emplace(parent->used, parent);
  }
}

}  // namespace tessera::router
