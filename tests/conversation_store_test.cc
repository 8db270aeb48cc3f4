// The server's conversation storage (server/conversation_store.h) on a real
// SQLite file: CRUD, search, owners kept apart, two writers appending at
// once (threads and two connections, as two tabs or two servers), the
// version check of a replace, a locked and a corrupt database; and
// /v1/conversations through the HTTP server: behind the API key, kept
// across a restart, 503 with the reason while completions keep working.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <fstream>
#include <thread>

#include <httplib.h>

#include "core/api_error.h"
#include "server/conversation_store.h"
#include "util/server_stack.h"
#include "util/test_util.h"

namespace tessera::server {
namespace {

using json = nlohmann::json;

int status_of_call(const std::function<void()>& f) { return status_of(f); }

TEST(ConversationStore, CrudSearchAndOwners) {
  ConversationStore db(testing::temp_path("crud.db"));
  const json c = db.create("alice", {{"title", "Cats"}, {"messages", {{{"role", "user"}, {"content", "Tell me of cats"}}}}});
  const std::string id = c["id"];
  EXPECT_EQ(c["version"], 1);
  db.create("alice", {{"title", "Dogs"}});
  db.create("bob", {{"title", "Bob's cats"}});
  EXPECT_EQ(db.list("alice", "").size(), 2u);
  EXPECT_EQ(db.list("bob", "").size(), 1u);
  ASSERT_EQ(db.list("alice", "CATS").size(), 1u);   // title, any case
  EXPECT_EQ(db.list("alice", "tell me").size(), 1u);  // a message
  EXPECT_EQ(db.list("alice", "parrots").size(), 0u);
  // Another owner cannot read, change or delete it.
  EXPECT_EQ(status_of_call([&] { db.get("bob", id); }), 404);
  EXPECT_EQ(status_of_call([&] { db.update("bob", id, {{"title", "mine"}}); }), 404);
  EXPECT_EQ(status_of_call([&] { db.remove("bob", id); }), 404);
  EXPECT_EQ(db.update("alice", id, {{"title", "Cats!"}})["title"], "Cats!");
  const json appended = db.append("alice", id, {{"message", {{"role", "assistant"}, {"content", "Meow."}}}});
  EXPECT_EQ(appended["messages"].size(), 2u);
  EXPECT_EQ(appended["messages"][1]["content"], "Meow.");
  EXPECT_EQ(status_of_call([&] { db.append("alice", id, {{"messages", {{{"content", "no role"}}}}}); }), 400);
  const json exported = db.export_all("alice");
  ASSERT_EQ(exported["conversations"].size(), 2u);
  db.remove("alice", id);
  EXPECT_EQ(status_of_call([&] { db.get("alice", id); }), 404);
  EXPECT_EQ(db.import_all("carol", exported), 2);
  EXPECT_EQ(db.list("carol", "meow").size(), 1u);
}

TEST(ConversationStore, ConcurrentAppendsLoseNothing) {
  const std::string path = testing::temp_path("concurrent.db");
  ConversationStore a(path), b(path);  // two connections: two servers on one file
  const std::string id = a.create("u", {})["id"];
  auto writer = [&](ConversationStore& db, const std::string& who) {
    for (int i = 0; i < 100; ++i) db.append("u", id, {{"message", {{"role", "user"}, {"content", who + std::to_string(i)}}}});
  };
  std::thread t1(writer, std::ref(a), "a"), t2(writer, std::ref(b), "b"), t3(writer, std::ref(a), "c");
  t1.join();
  t2.join();
  t3.join();
  const json c = a.get("u", id);
  ASSERT_EQ(c["messages"].size(), 300u);
  EXPECT_EQ(c["version"], 301);
  // Each writer's messages in its own order.
  for (const std::string who : {"a", "b", "c"}) {
    int next = 0;
    for (const json& m : c["messages"]) {
      const std::string s = m["content"];
      if (s.rfind(who, 0) == 0) {
        EXPECT_EQ(s, who + std::to_string(next++));
      }
    }
    EXPECT_EQ(next, 100);
  }
}

TEST(ConversationStore, ReplaceNamesTheVersionItRead) {
  ConversationStore db(testing::temp_path("versions.db"));
  const json c = db.create("u", {{"messages", {{{"role", "user"}, {"content", "one"}}}}});
  const std::string id = c["id"];
  // Tab 1 and tab 2 read version 1; tab 2 edits first; tab 1's replace is refused.
  db.replace("u", id, {{"messages", {{{"role", "user"}, {"content", "two"}}}}, {"version", 1}});
  EXPECT_EQ(status_of_call([&] { db.replace("u", id, {{"messages", json::array()}, {"version", 1}}); }), 409);
  EXPECT_EQ(db.get("u", id)["messages"][0]["content"], "two");
  EXPECT_EQ(status_of_call([&] { db.replace("u", id, {{"messages", json::array()}}); }), 400);
}

// An import is one transaction: a bad conversation (checked before any
// write) or a write that fails midway (a trigger makes SQLite refuse the
// second row) leaves no conversation behind.
TEST(ConversationStore, ImportIsAllOrNothing) {
  const std::string path = testing::temp_path("import.db");
  ConversationStore db(path);
  const json one = {{"title", "one"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  const json boom = {{"title", "boom"}};
  EXPECT_EQ(status_of_call([&] { db.import_all("u", {{"conversations", {one, {{"title", 7}}}}}); }), 400);
  EXPECT_EQ(db.list("u", "").size(), 0u);
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "CREATE TRIGGER refuse BEFORE INSERT ON conversations WHEN NEW.title = 'boom' "
                                "BEGIN SELECT RAISE(ABORT, 'refused'); END",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(other);
  EXPECT_EQ(status_of_call([&] { db.import_all("u", {{"conversations", {one, boom, one}}}); }), 503);
  EXPECT_EQ(db.list("u", "").size(), 0u) << "the first conversation of a failed import stayed";
  EXPECT_EQ(db.import_all("u", {{"conversations", {one, one}}}), 2);
  EXPECT_EQ(db.list("u", "").size(), 2u);
}

TEST(ConversationStore, LockedAndCorruptFilesGiveClearErrors) {
  const std::string path = testing::temp_path("locked.db");
  ConversationStore db(path, /*busy_timeout_ms=*/200);
  const std::string id = db.create("u", {})["id"];
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  try {
    db.append("u", id, {{"message", {{"role", "user"}, {"content", "x"}}}});
    ADD_FAILURE() << "a locked database accepted a write";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 503);
    EXPECT_NE(std::string(e.what()).find("locked"), std::string::npos) << e.what();
  }
  sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(other);
  db.append("u", id, {{"message", {{"role", "user"}, {"content", "x"}}}});  // free again

  const std::string bad = testing::temp_path("corrupt.db");
  std::ofstream(bad) << std::string(8192, 'x');
  try {
    ConversationStore c(bad);
    ADD_FAILURE() << "a corrupt file opened";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 503);
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
}

// --- through the server ---------------------------------------------------------

struct Client {
  httplib::Client c;
  explicit Client(int port) : c("127.0.0.1", port) {}
  std::pair<int, json> call(const std::string& method, const std::string& path, const json& body = nullptr,
                            const std::string& key = "secret") {
    httplib::Headers h;
    if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
    httplib::Result r = method == "GET"    ? c.Get(path, h)
                        : method == "POST"  ? c.Post(path, h, body.dump(), "application/json")
                        : method == "PATCH" ? c.Patch(path, h, body.dump(), "application/json")
                        : method == "PUT"   ? c.Put(path, h, body.dump(), "application/json")
                                            : c.Delete(path, h);
    if (!r) return {0, nullptr};
    return {r->status, r->body.empty() ? json() : json::parse(r->body)};
  }
};

TEST(ConversationApi, BehindTheKeyKeptAcrossRestartsAnd503WhenUnusable) {
  const auto& s = testing::stories260k();
  const std::string path = testing::temp_path("api.db");
  auto with_db = [&](const std::string& db) {
    return [db](ServerOptions& o) {
      o.conversations_db = db;
      o.api_key = "secret";
    };
  };
  std::string id;
  {
    Stack stack(s.lm, *s.tok, stack_config(), false, 0, 24, with_db(path));
    stack.attach();
    Client c(stack.port());
    auto [st, body] = c.call("POST", "/v1/conversations", {{"title", "Hello"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
    ASSERT_EQ(st, 200) << body.dump();
    id = body["id"];
    EXPECT_EQ(c.call("GET", "/v1/conversations", nullptr, "").first, 401);
    EXPECT_EQ(c.call("GET", "/v1/conversations", nullptr, "wrong").first, 401);
    EXPECT_EQ(c.call("POST", "/v1/conversations/" + id + "/messages", {{"message", {{"role", "assistant"}, {"content", "Hello!"}}}}).first, 200);
    EXPECT_EQ(c.call("PATCH", "/v1/conversations/" + id, {{"title", "Greetings"}}).first, 200);
    EXPECT_EQ(c.call("GET", "/v1/conversations?q=hello%21").second["data"].size(), 1u);
    EXPECT_EQ(c.call("GET", "/v1/conversations?q=absent+words").second["data"].size(), 0u);
    EXPECT_EQ(c.call("GET", "/v1/conversations/nope").first, 404);
    EXPECT_EQ(c.call("PUT", "/v1/conversations/" + id, {{"messages", json::array()}, {"version", 1}}).first, 409);
    // A browser sends the key as HTTP Basic's password (base64 of "anyone:secret"): the same owner.
    httplib::Headers basic = {{"Authorization", "Basic YW55b25lOnNlY3JldA=="}};
    httplib::Result r = c.c.Get("/v1/conversations", basic);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(json::parse(r->body)["data"].size(), 1u);
    httplib::Headers wrong = {{"Authorization", "Basic YW55b25lOm5vcGU="}};
    EXPECT_EQ(c.c.Get("/v1/conversations", wrong)->status, 401);
    // The page asks a browser for the key (a Basic challenge); the API a Bearer one.
    httplib::Result page = c.c.Get("/");
    ASSERT_TRUE(page);
    EXPECT_EQ(page->status, 401);
    EXPECT_EQ(page->get_header_value("WWW-Authenticate").rfind("Basic", 0), 0u);
    EXPECT_EQ(c.c.Get("/v1/models")->get_header_value("WWW-Authenticate"), "Bearer");
    EXPECT_EQ(c.c.Get("/", basic)->status, 404);  // past the key: this stack serves no page
  }
  {
    // A new server on the same file: the conversation is there.
    Stack stack(s.lm, *s.tok, stack_config(), false, 0, 24, with_db(path));
    stack.attach();
    Client c(stack.port());
    auto [st, body] = c.call("GET", "/v1/conversations/" + id);
    ASSERT_EQ(st, 200);
    EXPECT_EQ(body["title"], "Greetings");
    EXPECT_EQ(body["messages"].size(), 2u);
    auto [dst, del] = c.call("DELETE", "/v1/conversations/" + id);
    EXPECT_EQ(dst, 200);
    EXPECT_EQ(c.call("GET", "/v1/conversations").second["data"].size(), 0u);
  }
  {
    // A corrupt file: the conversation API says why, completions still work.
    const std::string bad = testing::temp_path("api_corrupt.db");
    std::ofstream(bad) << std::string(8192, 'x');
    Stack stack(s.lm, *s.tok, stack_config(), false, 0, 24, with_db(bad));
    stack.attach();
    Client c(stack.port());
    auto [st, body] = c.call("GET", "/v1/conversations");
    EXPECT_EQ(st, 503);
    EXPECT_NE(body.dump().find("api_corrupt.db"), std::string::npos) << body.dump();
    auto [cst, cbody] = c.call("POST", "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 4}});
    EXPECT_EQ(cst, 200) << cbody.dump();
  }
}

}  // namespace
}  // namespace tessera::server
