#include "server/conversation_store.h"

#include <sqlite3.h>

#include <chrono>
#include <random>

#include <fmt/format.h>

#include "core/api_error.h"
#include "kvstore/block_record.h"

namespace tessera::server {
namespace {

using json = nlohmann::json;

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string new_id() {
  static std::mt19937_64 rng{std::random_device{}()};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  return fmt::format("conv-{:016x}", rng());
}

// A prepared statement, finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &st_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(st_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  int prepared() const { return rc_; }
  Stmt& text(int i, const std::string& s) {
    sqlite3_bind_text(st_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& real(int i, double v) {
    sqlite3_bind_double(st_, i, v);
    return *this;
  }
  Stmt& integer(int i, int64_t v) {
    sqlite3_bind_int64(st_, i, v);
    return *this;
  }
  int step() { return sqlite3_step(st_); }
  std::string col_text(int i) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st_, i));
    return p != nullptr ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(st_, i))) : std::string();
  }
  double col_real(int i) const { return sqlite3_column_double(st_, i); }
  int64_t col_int(int i) const { return sqlite3_column_int64(st_, i); }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
  int rc_ = SQLITE_OK;
};

json field_or(const json& body, const char* key, const json& fallback) {
  return body.is_object() && body.contains(key) ? body[key] : fallback;
}

json checked_messages(const json& m, const char* param) {
  if (!m.is_array()) throw ApiError(400, fmt::format("'{}' must be an array of messages", param), param);
  for (const json& x : m) {
    if (!x.is_object() || !x.contains("role") || !x["role"].is_string()) {
      throw ApiError(400, fmt::format("each of '{}' needs a string 'role'", param), param);
    }
  }
  return m;
}

}  // namespace

std::string conversation_owner(const std::string& api_key) {
  if (api_key.empty()) return "";
  const auto* p = reinterpret_cast<const uint8_t*>(api_key.data());
  return kvstore::hash128(std::span<const uint8_t>(p, api_key.size())).hex();
}

ConversationStore::ConversationStore(const std::string& path, int busy_timeout_ms) : path_(path) {
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    const std::string why = db_ != nullptr ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw ApiError(503, fmt::format("conversation storage {} cannot be opened: {}", path, why), "", "storage_unavailable");
  }
  sqlite3_busy_timeout(db_, busy_timeout_ms);
  try {
    exec("PRAGMA journal_mode=WAL");
    exec("CREATE TABLE IF NOT EXISTS conversations (id TEXT PRIMARY KEY, owner TEXT NOT NULL, title TEXT NOT NULL, "
         "created REAL NOT NULL, updated REAL NOT NULL, version INTEGER NOT NULL, messages TEXT NOT NULL, "
         "settings TEXT NOT NULL)");
    exec("CREATE INDEX IF NOT EXISTS conversations_owner ON conversations(owner, updated)");
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

ConversationStore::~ConversationStore() { sqlite3_close(db_); }

void ConversationStore::fail(const char* what) {
  const int code = sqlite3_errcode(db_) & 0xff;
  const std::string msg = sqlite3_errmsg(db_);
  if (code == SQLITE_BUSY || code == SQLITE_LOCKED) {
    throw ApiError(503, fmt::format("conversation storage {} is locked by another writer; try again ({})", path_, what),
                   "", "storage_locked");
  }
  if (code == SQLITE_CORRUPT || code == SQLITE_NOTADB) {
    throw ApiError(503, fmt::format("conversation storage {} is unreadable: {} ({})", path_, msg, what), "",
                   "storage_unavailable");
  }
  throw ApiError(503, fmt::format("conversation storage {}: {} ({})", path_, msg, what), "", "storage_unavailable");
}

void ConversationStore::exec(const char* sql) {
  if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK) fail(sql);
}

json ConversationStore::list(const std::string& owner, const std::string& query) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "SELECT id, title, created, updated, version, json_array_length(messages) FROM conversations "
               "WHERE owner = ?1 AND (?2 = '' OR instr(lower(title), lower(?2)) > 0 OR "
               "instr(lower(messages), lower(?2)) > 0) ORDER BY updated DESC");
  if (st.prepared() != SQLITE_OK) fail("list");
  st.text(1, owner).text(2, query);
  json out = json::array();
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) {
    out.push_back({{"id", st.col_text(0)}, {"title", st.col_text(1)}, {"created", st.col_real(2)},
                   {"updated", st.col_real(3)}, {"version", st.col_int(4)}, {"messages", st.col_int(5)}});
  }
  if (rc != SQLITE_DONE) fail("list");
  return out;
}

json ConversationStore::get(const std::string& owner, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "SELECT title, created, updated, version, messages, settings FROM conversations "
               "WHERE owner = ?1 AND id = ?2");
  if (st.prepared() != SQLITE_OK) fail("get");
  st.text(1, owner).text(2, id);
  const int rc = st.step();
  if (rc == SQLITE_DONE) throw ApiError(404, fmt::format("no conversation '{}'", id), "id", "not_found");
  if (rc != SQLITE_ROW) fail("get");
  return {{"id", id}, {"title", st.col_text(0)}, {"created", st.col_real(1)}, {"updated", st.col_real(2)},
          {"version", st.col_int(3)}, {"messages", json::parse(st.col_text(4))},
          {"settings", json::parse(st.col_text(5))}};
}

// A new conversation's row from a request body (validated first: nothing
// is written for a bad one). The caller holds mu_.
std::string ConversationStore::insert_locked(const std::string& owner, const json& body) {
  const json messages = checked_messages(field_or(body, "messages", json::array()), "messages");
  const json title = field_or(body, "title", "New conversation");
  if (!title.is_string()) throw ApiError(400, "'title' must be a string", "title");
  const json settings = field_or(body, "settings", json::object());
  const std::string id = new_id();
  Stmt st(db_, "INSERT INTO conversations VALUES (?1, ?2, ?3, ?4, ?4, 1, ?5, ?6)");
  if (st.prepared() != SQLITE_OK) fail("create");
  st.text(1, id).text(2, owner).text(3, title.get<std::string>()).real(4, now_s()).text(5, messages.dump())
      .text(6, settings.dump());
  if (st.step() != SQLITE_DONE) fail("create");
  return id;
}

json ConversationStore::create(const std::string& owner, const json& body) {
  std::string id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = insert_locked(owner, body);
  }
  return get(owner, id);
}

json ConversationStore::update(const std::string& owner, const std::string& id, const json& body) {
  const json* title = body.is_object() && body.contains("title") ? &body["title"] : nullptr;
  const json* settings = body.is_object() && body.contains("settings") ? &body["settings"] : nullptr;
  if (title != nullptr && !title->is_string()) throw ApiError(400, "'title' must be a string", "title");
  {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt st(db_, "UPDATE conversations SET title = coalesce(?3, title), settings = coalesce(?4, settings), "
                 "updated = ?5, version = version + 1 WHERE owner = ?1 AND id = ?2");
    if (st.prepared() != SQLITE_OK) fail("update");
    st.text(1, owner).text(2, id).real(5, now_s());
    if (title != nullptr) st.text(3, title->get<std::string>());
    if (settings != nullptr) st.text(4, settings->dump());
    if (st.step() != SQLITE_DONE) fail("update");
    if (sqlite3_changes(db_) == 0) throw ApiError(404, fmt::format("no conversation '{}'", id), "id", "not_found");
  }
  return get(owner, id);
}

json ConversationStore::append(const std::string& owner, const std::string& id, const json& body) {
  json add = body.is_object() && body.contains("message") ? json::array({body["message"]})
                                                            : field_or(body, "messages", json());
  add = checked_messages(add, "messages");
  {
    std::lock_guard<std::mutex> lock(mu_);
    // One statement: SQLite appends to the stored array in place, so two
    // appenders (two tabs, two servers) never overwrite each other.
    Stmt st(db_, "UPDATE conversations SET messages = (SELECT json_group_array(json(value)) FROM "
                 "(SELECT value FROM json_each(messages) UNION ALL SELECT value FROM json_each(?3))), "
                 "updated = ?4, version = version + 1 WHERE owner = ?1 AND id = ?2");
    if (st.prepared() != SQLITE_OK) fail("append");
    st.text(1, owner).text(2, id).text(3, add.dump()).real(4, now_s());
    if (st.step() != SQLITE_DONE) fail("append");
    if (sqlite3_changes(db_) == 0) throw ApiError(404, fmt::format("no conversation '{}'", id), "id", "not_found");
  }
  return get(owner, id);
}

json ConversationStore::replace(const std::string& owner, const std::string& id, const json& body) {
  const json messages = checked_messages(field_or(body, "messages", json()), "messages");
  const json version = field_or(body, "version", json());
  if (!version.is_number_integer()) throw ApiError(400, "'version' (the one read) is required", "version");
  {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt st(db_, "UPDATE conversations SET messages = ?3, updated = ?4, version = version + 1 "
                 "WHERE owner = ?1 AND id = ?2 AND version = ?5");
    if (st.prepared() != SQLITE_OK) fail("replace");
    st.text(1, owner).text(2, id).text(3, messages.dump()).real(4, now_s()).integer(5, version.get<int64_t>());
    if (st.step() != SQLITE_DONE) fail("replace");
    if (sqlite3_changes(db_) == 0) {
      Stmt probe(db_, "SELECT version FROM conversations WHERE owner = ?1 AND id = ?2");
      probe.text(1, owner).text(2, id);
      if (probe.step() != SQLITE_ROW) throw ApiError(404, fmt::format("no conversation '{}'", id), "id", "not_found");
      throw ApiError(409, fmt::format("conversation '{}' changed since version {} (now {}): read it again",
                                      id, version.get<int64_t>(), probe.col_int(0)),
                     "version", "conflict");
    }
  }
  return get(owner, id);
}

void ConversationStore::remove(const std::string& owner, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "DELETE FROM conversations WHERE owner = ?1 AND id = ?2");
  if (st.prepared() != SQLITE_OK) fail("delete");
  st.text(1, owner).text(2, id);
  if (st.step() != SQLITE_DONE) fail("delete");
  if (sqlite3_changes(db_) == 0) throw ApiError(404, fmt::format("no conversation '{}'", id), "id", "not_found");
}

json ConversationStore::export_all(const std::string& owner) {
  json all = json::array();
  for (const json& summary : list(owner, "")) all.push_back(get(owner, summary["id"].get<std::string>()));
  return {{"object", "conversations"}, {"conversations", all}};
}

// One transaction: every conversation is imported, or (a bad one, a full
// disk, a locked file) none is.
int64_t ConversationStore::import_all(const std::string& owner, const json& body) {
  const json convs = field_or(body, "conversations", json());
  if (!convs.is_array()) throw ApiError(400, "'conversations' must be an array", "conversations");
  for (const json& c : convs) {
    checked_messages(field_or(c, "messages", json::array()), "conversations[].messages");
    if (!field_or(c, "title", "").is_string()) throw ApiError(400, "'title' must be a string", "conversations[].title");
  }
  std::lock_guard<std::mutex> lock(mu_);
  exec("BEGIN IMMEDIATE");
  try {
    for (const json& c : convs) insert_locked(owner, c);
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  return static_cast<int64_t>(convs.size());
}

}  // namespace tessera::server
