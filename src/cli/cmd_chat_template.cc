// tessera chat-template: render a conversation with a model's chat template,
// exactly the text `serve` would tokenize for /v1/chat/completions, written
// to stdout as it is (no newline added).
#include <cstdio>
#include <ctime>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "format/hf_model.h"
#include "format/json_file.h"
#include "template/chat_template.h"

namespace tessera::cli {
namespace {

using nlohmann::ordered_json;

struct ChatTemplateOptions {
  std::string model;
  std::string chat_template;
  std::string messages_file;
  std::string bos_token;
  std::string eos_token;
  std::string date;
  bool add_generation_prompt = false;
};

// A token of tokenizer_config.json: a string, {"content": ...} or absent.
std::string template_config_token(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return "";
  const nlohmann::json& t = config[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string()) return t["content"].get<std::string>();
  return "";
}

// "YYYY-MM-DD" as seconds since the epoch at 00:00 UTC.
int64_t parse_fixed_date(const std::string& date) {
  std::tm tm{};
  const char* end = strptime(date.c_str(), "%Y-%m-%d", &tm);
  TESSERA_CHECK(end != nullptr && *end == '\0', kInvalidArgument, "--date '{}' is not YYYY-MM-DD", date);
  return static_cast<int64_t>(timegm(&tm));
}

int run_chat_template(const ChatTemplateOptions& o) {
  TESSERA_CHECK(!o.model.empty() || !o.chat_template.empty(), kInvalidArgument,
                "give a Hugging Face model folder (-m) or a template (--chat-template)");
  TESSERA_CHECK(!o.messages_file.empty(), kInvalidArgument, "give the conversation (--messages FILE.json)");
  // The template's source: --chat-template wins; else the folder's
  // tokenizer_config.json. bos/eos come from that config when there is one.
  std::string config_path;
  std::string option = o.chat_template;
  if (!o.model.empty()) {
    TESSERA_CHECK(hf::is_folder(o.model), kInvalidArgument, "-m {}: not a Hugging Face model folder", o.model);
    config_path = (std::filesystem::path(hf::tokenizer_json_path(o.model)).parent_path() / "tokenizer_config.json")
                      .string();
    if (option.empty()) option = config_path;
  } else if (option.size() >= 5 && option.compare(option.size() - 5, 5, ".json") == 0) {
    config_path = option;
  }
  const server::ChatTemplate chat = server::ChatTemplate::resolve(option, std::nullopt);
  std::string bos = o.bos_token, eos = o.eos_token;
  if (!config_path.empty() && std::filesystem::exists(config_path)) {
    const nlohmann::json config = read_json_file(config_path);
    if (bos.empty()) bos = template_config_token(config, "bos_token");
    if (eos.empty()) eos = template_config_token(config, "eos_token");
  }

  // An array of messages, or an object with "messages" and other template
  // variables (tools, documents, enable_thinking, ...), keys kept in order.
  // Parsed as ordered_json: `tools | tojson` prints keys in the file's order.
  ordered_json input;
  {
    const MappedFile file(o.messages_file);
    const auto* begin = reinterpret_cast<const char*>(file.data());
    try {
      input = ordered_json::parse(begin, begin + file.size());
    } catch (const ordered_json::exception& e) {
      fail(ErrorCode::kInvalidArgument, "{}: not valid JSON: {}", o.messages_file, e.what());
    }
  }
  ordered_json messages = input, extra = ordered_json::object();
  if (input.is_object()) {
    TESSERA_CHECK(input.contains("messages"), kInvalidArgument, "{}: no \"messages\"", o.messages_file);
    messages = input["messages"];
    for (const auto& [key, value] : input.items()) {
      if (key != "messages") extra[key] = value;
    }
  }
  server::ChatTemplate render = chat;
  server::jinja::RenderLimits limits;
  if (!o.date.empty()) limits.fixed_time = parse_fixed_date(o.date);
  render.set_limits(limits);
  const std::string text = render.apply(messages, o.add_generation_prompt, bos, eos, extra);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

TESSERA_COMMAND("chat-template", "Render a conversation with a chat template (as serve does)", [](CLI::App& sub) {
  auto o = std::make_shared<ChatTemplateOptions>();
  sub.add_option("-m,--model", o->model, "Hugging Face model folder: its tokenizer_config.json's chat_template");
  sub.add_option("--chat-template", o->chat_template,
                 "A built-in name, a Jinja file or a tokenizer_config.json (instead of the model's)");
  sub.add_option("--messages", o->messages_file,
                 "JSON: an array of messages, or {\"messages\": [...], \"tools\": [...], other variables}");
  sub.add_flag("--add-generation-prompt", o->add_generation_prompt, "End with the assistant turn's opening");
  sub.add_option("--bos-token", o->bos_token, "bos_token (default: the tokenizer_config.json's)");
  sub.add_option("--eos-token", o->eos_token, "eos_token (default: the tokenizer_config.json's)");
  sub.add_option("--date", o->date, "Fix strftime_now()'s date, YYYY-MM-DD at 00:00 UTC (default: now)");
  return [o]() { return run_chat_template(*o); };
});

}  // namespace
}  // namespace tessera::cli
