// Conversations kept on the server (the chat page's history), in SQLite
// (Debian's libsqlite3): one row per conversation, owned by the API key
// that wrote it, so one user's conversations are invisible to another key.
//
// Safe for many threads (one connection, serialized) and many processes
// (WAL journal, a busy timeout): a conversation's messages are appended by
// one UPDATE that SQLite runs under its write lock (the stored array is
// extended in place), so two tabs appending at once both land; a
// whole-conversation replace names the version it read and gets 409 when
// another write came first. Failures are ApiErrors a client can read: a
// database another process holds locked past the timeout is 503 "locked",
// an unreadable file 503 "unreadable" (the rest of the API keeps serving).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

struct sqlite3;

namespace tessera::server {

class ConversationStore {
 public:
  // Opens (creating if needed) the database at `path`. Throws ApiError(503)
  // naming the file and SQLite's reason when it cannot be used.
  explicit ConversationStore(const std::string& path, int busy_timeout_ms = 2000);
  ~ConversationStore();
  ConversationStore(const ConversationStore&) = delete;
  ConversationStore& operator=(const ConversationStore&) = delete;

  // [{id, title, created, updated, version, messages: count}], newest first;
  // `query` (when not empty) must occur in the title or a message.
  nlohmann::json list(const std::string& owner, const std::string& query);
  // {id, title, created, updated, version, messages: [...], settings: {...}}; 404 when absent.
  nlohmann::json get(const std::string& owner, const std::string& id);
  // A new conversation from {title?, messages?, settings?}; returns get()'s shape.
  nlohmann::json create(const std::string& owner, const nlohmann::json& body);
  // Changes the title and/or settings ({title?, settings?}).
  nlohmann::json update(const std::string& owner, const std::string& id, const nlohmann::json& body);
  // Appends {messages: [...]} (or one {message}) atomically.
  nlohmann::json append(const std::string& owner, const std::string& id, const nlohmann::json& body);
  // Replaces the messages ({messages, version}): 409 when `version` is not
  // the stored one (another tab wrote since).
  nlohmann::json replace(const std::string& owner, const std::string& id, const nlohmann::json& body);
  void remove(const std::string& owner, const std::string& id);
  // {conversations: [get()...]} and back (new ids; returns how many; the
  // import is one transaction: all or nothing).
  nlohmann::json export_all(const std::string& owner);
  int64_t import_all(const std::string& owner, const nlohmann::json& body);

 private:
  void exec(const char* sql);
  std::string insert_locked(const std::string& owner, const nlohmann::json& body);
  [[noreturn]] void fail(const char* what);

  std::string path_;
  sqlite3* db_ = nullptr;
  std::mutex mu_;
};

// The owner of a request's conversations: a hash of its API key ("" when
// the server has no key).
std::string conversation_owner(const std::string& api_key);

}  // namespace tessera::server
