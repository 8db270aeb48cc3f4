#include "chat/conversation.h"

#include "core/error.h"

namespace tessera::chat {

void Conversation::set_system(std::string text) {
  system_ = std::move(text);
  history_changed();
}

void Conversation::reset() {
  messages_.clear();
  history_changed();
}

nlohmann::json Conversation::messages_json() const {
  nlohmann::json m = nlohmann::json::array();
  if (!system_.empty()) m.push_back({{"role", "system"}, {"content", system_}});
  for (const Message& x : messages_) m.push_back({{"role", x.role}, {"content", x.content}});
  return m;
}

void Conversation::drop_last_reply() {
  TESSERA_CHECK(!messages_.empty() && messages_.back().role == "assistant", kInvalidArgument,
                "nothing to regenerate: the conversation does not end with a reply");
  messages_.pop_back();
}

void Conversation::load_json(const nlohmann::json& j) {
  TESSERA_CHECK(j.is_object() && j.contains("messages") && j["messages"].is_array(), kInvalidArgument,
                "a saved conversation is {{\"messages\": [...]}}");
  std::string system;
  std::vector<Message> messages;
  for (const auto& m : j["messages"]) {
    TESSERA_CHECK(m.is_object() && m.contains("role") && m["role"].is_string() && m.contains("content") &&
                      m["content"].is_string(),
                  kInvalidArgument, "each message needs a string role and content");
    const std::string role = m["role"];
    TESSERA_CHECK(role == "system" || role == "user" || role == "assistant", kInvalidArgument,
                  "unknown role '{}' (system, user, assistant)", role);
    if (role == "system") {
      system = m["content"];
    } else {
      messages.push_back({role, m["content"]});
    }
  }
  system_ = std::move(system);
  messages_ = std::move(messages);
  history_changed();
}

}  // namespace tessera::chat
