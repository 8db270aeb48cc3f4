// The router's parts without replicas: the approximate prefix tree against a
// brute-force reference, the routing rule, and the text a request is routed by.
// (End to end with real `tessera serve` replicas: tests/scripts/router.sh.)
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "router/prefix_tree.h"
#include "router/replica_set.h"
#include "router/router.h"

namespace tessera::router {
namespace {

size_t brute_match(const std::vector<std::string>& held, const std::string& q) {
  size_t best = 0;
  for (const std::string& s : held) {
    size_t k = 0;
    while (k < s.size() && k < q.size() && s[k] == q[k]) ++k;
    best = std::max(best, k);
  }
  return best;
}

size_t distinct_prefix_chars(const std::vector<std::string>& held) {
  // Characters of a trie holding every string: the distinct non-empty prefixes.
  std::set<std::string> prefixes;
  for (const std::string& s : held) {
    for (size_t k = 1; k <= s.size(); ++k) prefixes.insert(s.substr(0, k));
  }
  return prefixes.size();
}

TEST(PrefixTree, MatchesBruteForceOnRandomStrings) {
  std::mt19937 rng(3);
  PrefixTree tree;
  std::vector<std::string> held;
  auto random_string = [&](size_t n) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += static_cast<char>('a' + rng() % 3);  // 3 letters: many shared prefixes
    return s;
  };
  for (int i = 0; i < 300; ++i) {
    const std::string s = random_string(rng() % 24);
    tree.insert(s);
    held.push_back(s);
    for (int q = 0; q < 5; ++q) {
      const std::string query = random_string(rng() % 30);
      ASSERT_EQ(tree.match(query), brute_match(held, query)) << query;
    }
    ASSERT_EQ(tree.chars(), distinct_prefix_chars(held));
  }
}

TEST(PrefixTree, EvictsLeastRecentlyUsedPastItsBound) {
  PrefixTree tree(/*max_chars=*/100);
  const std::string a(40, 'a'), b(40, 'b'), c(40, 'c');
  tree.insert(a);
  tree.insert(b);
  tree.insert(a);  // a is now more recent than b
  EXPECT_EQ(tree.chars(), 80u);
  tree.insert(c);  // 120 > 100: b (least recent) goes
  EXPECT_LE(tree.chars(), 100u);
  EXPECT_EQ(tree.match(a), a.size());
  EXPECT_EQ(tree.match(c), c.size());
  EXPECT_EQ(tree.match(b), 0u);
}

TEST(PrefixTree, EvictionKeepsASharedPrefixUsedByTheNewest) {
  PrefixTree tree(/*max_chars=*/60);
  const std::string system(30, 's');
  tree.insert(system + "old user turn");
  tree.insert(system + "new user turn");
  tree.insert(system + "newest one!!!");
  EXPECT_LE(tree.chars(), 60u);
  EXPECT_EQ(tree.match(system + "newest one!!!"), system.size() + 13);
  EXPECT_EQ(tree.match(system + "zzz"), system.size());
}

RoutingOptions cache_aware() { return RoutingOptions{}; }

TEST(ReplicaSet, NewPrefixesSpreadAndEachPrefixStaysOnItsReplica) {
  ReplicaSet set({"http://a", "http://b"}, cache_aware());
  std::vector<std::string> systems;
  for (int t = 0; t < 8; ++t) systems.push_back("system prompt of tenant " + std::to_string(t) + std::string(200, 'x'));
  std::vector<int> home(8);
  for (int t = 0; t < 8; ++t) {
    const Pick p = set.pick(systems[t] + " first question", {});
    ASSERT_GE(p.replica, 0);
    EXPECT_EQ(p.reason, Reason::kNewPrefix);
    home[t] = p.replica;
    set.finished(p.replica, false);
  }
  EXPECT_EQ(std::count(home.begin(), home.end(), 0), 4);  // least text first: 4 tenants each
  for (int round = 0; round < 3; ++round) {
    for (int t = 0; t < 8; ++t) {
      const Pick p = set.pick(systems[t] + " question " + std::to_string(round), {});
      EXPECT_EQ(p.replica, home[t]);
      EXPECT_EQ(p.reason, Reason::kPrefix);
      EXPECT_GE(p.matched_chars, systems[t].size());
      set.finished(p.replica, false);
    }
  }
}

TEST(ReplicaSet, ImbalancedLoadsGoToTheLeastLoaded) {
  RoutingOptions o = cache_aware();
  o.balance_abs = 2;
  o.balance_rel = 1.5;
  ReplicaSet set({"http://a", "http://b"}, o);
  const std::string text(100, 'p');
  const int home = set.pick(text, {}).replica;  // stays in flight
  set.pick(text, {});
  set.pick(text, {});  // 3 in flight at home, 0 elsewhere: imbalanced now
  const Pick p = set.pick(text, {});
  EXPECT_EQ(p.reason, Reason::kLoad);
  EXPECT_NE(p.replica, home);
}

TEST(ReplicaSet, SkipsUnhealthyAndTriedReplicasAndForgetsADeadOnesTree) {
  ReplicaSet set({"http://a", "http://b"}, cache_aware());
  const std::string text(100, 'q');
  const Pick first = set.pick(text, {});
  set.finished(first.replica, false);
  const Pick retry = set.pick(text, {first.replica});
  EXPECT_NE(retry.replica, first.replica);
  set.finished(retry.replica, true);
  EXPECT_EQ(set.pick(text, {0, 1}).replica, -1);

  set.set_healthy(first.replica, false);
  EXPECT_EQ(set.stats()[first.replica].tree_chars, 0u);
  for (int i = 0; i < 4; ++i) {
    const Pick p = set.pick(text, {});
    EXPECT_NE(p.replica, first.replica);
    set.finished(p.replica, false);
  }
  set.set_healthy(1 - first.replica, false);
  EXPECT_FALSE(set.any_healthy());
  EXPECT_EQ(set.pick(text, {}).replica, -1);
  const std::vector<ReplicaStats> st = set.stats();
  EXPECT_EQ(st[retry.replica].failures, 1);
  EXPECT_EQ(st[0].in_flight + st[1].in_flight, 0);
}

TEST(ReplicaSet, RoundRobinIgnoresPrefixes) {
  RoutingOptions o;
  o.policy = Policy::kRoundRobin;
  ReplicaSet set({"http://a", "http://b", "http://c"}, o);
  const std::string text(100, 'r');
  std::vector<int> got;
  for (int i = 0; i < 6; ++i) {
    const Pick p = set.pick(text, {});
    EXPECT_EQ(p.reason, Reason::kRoundRobin);
    got.push_back(p.replica);
    set.finished(p.replica, false);
  }
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 0, 1, 2}));
}

TEST(RoutingText, ChatMessagesInOrderAndCompletionPrompts) {
  using nlohmann::json;
  const json chat = json::parse(R"({"messages": [{"role": "system", "content": "S"},
      {"role": "user", "content": [{"type": "text", "text": "U1"}, {"type": "image_url"}, {"type": "text", "text": "U2"}]}]})");
  EXPECT_EQ(routing_text(chat), "system\nS\nuser\nU1U2\n");
  EXPECT_EQ(routing_text(json::parse(R"({"prompt": "Once upon"})")), "Once upon");
  EXPECT_EQ(routing_text(json::parse(R"({"prompt": [1, 2, 3]})")), "[1,2,3]");
  EXPECT_EQ(routing_text(json::parse(R"([1])")), "");
  EXPECT_EQ(routing_text(json::parse(R"({"messages": "not a list"})")), "");
}

}  // namespace
}  // namespace tessera::router
