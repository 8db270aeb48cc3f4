// A conversation as `tessera chat` holds it: the system message, the turns,
// save and load, and the turn-taking interface its two back ends implement —
// the engine in this process (chat_session.h) and a running server
// (remote_chat.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::chat {

struct Message {
  std::string role;  // system, user, assistant
  std::string content;
};

// One turn's figures (/stats).
struct TurnStats {
  int64_t prompt_tokens = 0;    // the whole conversation, as sent
  int64_t cached_tokens = -1;   // found in the prefix cache (-1: not known, a server)
  int64_t new_tokens = -1;      // tokens this turn added to the conversation (-1: not known)
  int64_t output_tokens = 0;
  double ttft_s = 0.0;
  double seconds = 0.0;
  std::string finish;           // stop, length, abort (interrupted), error
  int64_t prefilled() const { return cached_tokens < 0 ? -1 : prompt_tokens - cached_tokens; }
};

class Conversation {
 public:
  virtual ~Conversation() = default;

  using TextSink = std::function<void(std::string_view)>;
  using StopCheck = std::function<bool()>;
  // Adds a user message and generates the reply, handing its text to `out`
  // as it comes. `stop` is asked as it goes: true aborts the reply, which
  // is kept as far as it got (finish "abort").
  virtual TurnStats send(const std::string& user, const TextSink& out, const StopCheck& stop = {}) = 0;
  // /regen: replaces the last reply with a new one.
  virtual TurnStats regenerate(const TextSink& out, const StopCheck& stop = {}) = 0;

  // /system: sets (or, empty, removes) the system message.
  void set_system(std::string text);
  // /reset: forgets the turns (the system message stays).
  void reset();
  // /save and /load: {"messages": [...]} in OpenAI's shape.
  nlohmann::json to_json() const { return {{"messages", messages_json()}}; }
  void load_json(const nlohmann::json& j);

  const std::vector<Message>& messages() const { return messages_; }
  const TurnStats& last() const { return last_; }

 protected:
  // The system message (if any) and the turns.
  nlohmann::json messages_json() const;
  // The history changed other than by a turn (system, reset, load).
  virtual void history_changed() {}
  // Drops the last reply for /regen (throws when there is none).
  void drop_last_reply();

  std::string system_;
  std::vector<Message> messages_;  // without the system message
  TurnStats last_;
};

}  // namespace tessera::chat
