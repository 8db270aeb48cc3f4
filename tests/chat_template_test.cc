// Chat templates: the built-ins against each family's documented prompt
// format, Qwen3's own template from its tokenizer_config.json, the templates
// in the vocab GGUFs, and how the server picks a template. Expected prompts
// are written out by hand from the documented formats and from reading the
// Qwen3 template.
#include <atomic>
#include <filesystem>
#include <functional>
#include <thread>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "format/gguf.h"
#include "template/chat_template.h"
#include "util/test_util.h"

namespace tessera::server {
namespace {

using nlohmann::json;

// system + user + assistant + user
json three_turns() {
  return json::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "How are you?"}
  ])");
}

std::string apply_builtin(const std::string& name, const json& messages, bool add_generation_prompt,
                          const std::string& bos = "<s>", const std::string& eos = "</s>") {
  return ChatTemplate::resolve(name, std::nullopt).apply(messages, add_generation_prompt, bos, eos);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(ChatTemplateBuiltin, Llama2) {
  const std::string expected =
      "<s>[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] How are you? [/INST]";
  EXPECT_EQ(apply_builtin("llama-2", three_turns(), true), expected);
  EXPECT_EQ(apply_builtin("llama-2", three_turns(), false), expected);  // the prompt already ends at [/INST]
  EXPECT_EQ(apply_builtin("llama-2", json::parse(R"([{"role": "user", "content": " Hi "}])"), true),
            "<s>[INST] Hi [/INST]");
}

TEST(ChatTemplateBuiltin, Llama3) {
  const std::string body =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>";
  EXPECT_EQ(apply_builtin("llama-3", three_turns(), true, "<|begin_of_text|>", "<|eot_id|>"),
            body + "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(apply_builtin("llama-3", three_turns(), false, "<|begin_of_text|>", "<|eot_id|>"), body);
}

TEST(ChatTemplateBuiltin, Chatml) {
  const std::string body =
      "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
      "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n";
  EXPECT_EQ(apply_builtin("chatml", three_turns(), true), body + "<|im_start|>assistant\n");
  EXPECT_EQ(apply_builtin("chatml", three_turns(), false), body);
}

TEST(ChatTemplateBuiltin, Mistral) {
  const std::string expected = "<s>[INST] You are helpful.\n\nHi [/INST] Hello!</s>[INST] How are you? [/INST]";
  EXPECT_EQ(apply_builtin("mistral", three_turns(), true), expected);
  EXPECT_EQ(apply_builtin("mistral", three_turns(), false), expected);
}

TEST(ChatTemplateBuiltin, Phi3) {
  const std::string body =
      "<|system|>\nYou are helpful.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n"
      "<|user|>\nHow are you?<|end|>\n";
  EXPECT_EQ(apply_builtin("phi-3", three_turns(), true), body + "<|assistant|>\n");
  EXPECT_EQ(apply_builtin("phi-3", three_turns(), false), body);
}

TEST(ChatTemplateBuiltin, Gemma) {
  const std::string body =
      "<bos><start_of_turn>user\nYou are helpful.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
      "<start_of_turn>user\nHow are you?<end_of_turn>\n";
  EXPECT_EQ(apply_builtin("gemma", three_turns(), true, "<bos>", "<eos>"), body + "<start_of_turn>model\n");
  EXPECT_EQ(apply_builtin("gemma", three_turns(), false, "<bos>", "<eos>"), body);
}

TEST(ChatTemplateBuiltin, RolesMustAlternate) {
  const json twice_user = json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
  const json assistant_first = json::parse(R"([{"role": "assistant", "content": "a"}])");
  for (const char* name : {"gemma", "llama-2", "mistral"}) {
    for (const json& bad : {twice_user, assistant_first}) {
      const std::string msg = error_of([&] { apply_builtin(name, bad, true); });
      EXPECT_NE(msg.find("roles must alternate user/assistant/user/..."), std::string::npos) << name << ": " << msg;
      EXPECT_EQ(msg.find("chat template error at"), std::string::npos) << "raise_exception's text is passed as is";
    }
  }
}

TEST(ChatTemplateBuiltin, NamesAndNullContent) {
  for (const char* name : {"llama-2", "llama-3", "chatml", "mistral", "phi-3", "gemma"}) {
    ASSERT_TRUE(ChatTemplate::builtin_source(name).has_value()) << name;
  }
  EXPECT_FALSE(ChatTemplate::builtin_source("llama-4").has_value());
  // an assistant turn that only called tools has null content
  const json messages = json::parse(R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": null}])");
  EXPECT_EQ(apply_builtin("chatml", messages, false), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n");
}

// ---- Qwen3's own template --------------------------------------------------

ChatTemplate qwen3_template() {
  const std::string path = testing::shared_path("models/tokenizers/qwen3/tokenizer_config.json");
  EXPECT_TRUE(std::filesystem::exists(path)) << path;
  return ChatTemplate::resolve(path, std::nullopt);
}

TEST(ChatTemplateQwen3, SystemUserAssistantUser) {
  const ChatTemplate t = qwen3_template();
  const std::string body =
      "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
      "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n";
  EXPECT_EQ(t.apply(three_turns(), true, "", "<|im_end|>"), body + "<|im_start|>assistant\n");
  EXPECT_EQ(t.apply(three_turns(), false, "", "<|im_end|>"), body);
  // enable_thinking=false pre-fills an empty think block
  EXPECT_EQ(t.apply(three_turns(), true, "", "<|im_end|>", json{{"enable_thinking", false}}),
            body + "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(t.apply(three_turns(), true, "", "<|im_end|>", json{{"enable_thinking", true}}),
            body + "<|im_start|>assistant\n");
}

TEST(ChatTemplateQwen3, ThinkingInAssistantHistory) {
  const ChatTemplate t = qwen3_template();
  // before the last user turn the reasoning is dropped
  json messages = three_turns();
  messages[2]["content"] = "<think>\nLet me think.\n</think>\n\nHello!";
  EXPECT_EQ(t.apply(messages, true, "", "<|im_end|>"),
            "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n"
            "<|im_start|>assistant\n");
  // after the last user turn it is kept, and an answer without one gets an empty block
  const json after = json::parse(R"([
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "<think>\nReason.\n</think>\n\nAnswer."}
  ])");
  EXPECT_EQ(t.apply(after, false, "", "<|im_end|>"),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nReason.\n</think>\n\nAnswer.<|im_end|>\n");
  json plain = after;
  plain[1]["content"] = "Answer.";
  EXPECT_EQ(t.apply(plain, false, "", "<|im_end|>"),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nAnswer.<|im_end|>\n");
  json with_field = plain;
  with_field[1]["reasoning_content"] = "\nFrom the field.\n";
  EXPECT_EQ(t.apply(with_field, false, "", "<|im_end|>"),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nFrom the field.\n</think>\n\nAnswer."
            "<|im_end|>\n");
}

TEST(ChatTemplateQwen3, ToolsAndToolCalls) {
  const ChatTemplate t = qwen3_template();
  // ordered_json keeps the request's key order in `tools | tojson`
  const nlohmann::ordered_json extra = nlohmann::ordered_json::parse(R"({"tools": [
    {"type": "function", "function": {"name": "get_weather", "description": "Get weather",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]})");
  const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
      {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
  ])");
  const std::string expected =
      "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
      "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get weather\", "
      "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}\n</tools>\n\n"
      "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "
      "XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
      "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n";
  EXPECT_EQ(t.apply(messages, true, "", "<|im_end|>", extra), expected);
}

// ---- resolve() and apply()'s input handling --------------------------------

TEST(ChatTemplateResolve, NameFileGgufOrError) {
  EXPECT_EQ(ChatTemplate::resolve("chatml", std::string("ignored")).source(), *ChatTemplate::builtin_source("chatml"));
  const std::string file = testing::temp_path("custom.jinja");
  testing::write_file(file, "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}\n");
  const ChatTemplate from_file = ChatTemplate::resolve(file, std::string("ignored"));
  EXPECT_EQ(from_file.apply(three_turns(), false, "", ""),
            "[system:You are helpful.][user:Hi][assistant:Hello!][user:How are you?]");
  const ChatTemplate from_gguf = ChatTemplate::resolve("", std::string("{{ bos_token }}{{ messages | length }}"));
  EXPECT_EQ(from_gguf.apply(three_turns(), false, "<s>", ""), "<s>4");
  EXPECT_EQ(error_of([] { ChatTemplate::resolve("", std::nullopt); }),
            "this model has no chat template; start the server with --chat-template NAME|FILE (llama-2, llama-3, "
            "chatml, mistral, phi-3, gemma)");
  EXPECT_NE(error_of([] { ChatTemplate::resolve("", std::string()); }).find("this model has no chat template"),
            std::string::npos);
  EXPECT_NE(error_of([] { ChatTemplate::resolve("no-such-template", std::nullopt); })
                .find("'no-such-template' is neither a built-in template"),
            std::string::npos);
  const std::string config = testing::temp_path("bad_config.json");
  testing::write_file(config, R"({"eos_token": "x"})");
  EXPECT_NE(error_of([&] { ChatTemplate::resolve(config, std::nullopt); }).find("no \"chat_template\""),
            std::string::npos);
}

TEST(ChatTemplateApply, ContentPartsVariablesAndErrors) {
  const ChatTemplate t = ChatTemplate::from_source(
      "{% for m in messages %}{{ m.content }}|{% endfor %}{{ tools }}|{{ documents }}|{{ add_generation_prompt }}"
      "{{ bos_token }}{{ eos_token }}{{ extra_var | default('-') }}");
  const json parts = json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                  {"type": "text", "text": "b"}]}])");
  EXPECT_EQ(t.apply(parts, true, "<s>", "</s>"), "a\nb|None|None|True<s></s>-");
  EXPECT_EQ(t.apply(parts, false, "", "", json{{"extra_var", 7}, {"tools", json::array()}}), "a\nb|[]|None|False7");
  const json image = json::parse(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])");
  EXPECT_EQ(error_of([&] { t.apply(image, true, "", ""); }),
            "messages[0].content: part type 'image_url' is not supported (text only)");
  EXPECT_EQ(error_of([&] { t.apply(json::object(), true, "", ""); }), "messages must be an array");
  EXPECT_EQ(error_of([&] { t.apply(json::array({1}), true, "", ""); }), "messages[0] must be an object");
  EXPECT_NE(error_of([&] { t.apply(parts, true, "", "", json{{"messages", 1}}); }).find("set by the server"),
            std::string::npos);
  // rendering errors name the template position
  const ChatTemplate broken = ChatTemplate::from_source("ok\n{{ messages[0].content.nope() }}");
  EXPECT_EQ(error_of([&] { broken.apply(three_turns(), true, "", ""); }),
            "chat template error at 2:28: 'str object' has no attribute 'nope'");
}

TEST(ChatTemplateApply, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of([] { ChatTemplate::from_source("{% for m in messages %}\n{{ m.content }"); }),
            "chat template syntax error at 2:14: unexpected '}'");
}

TEST(ChatTemplateApply, LimitsApply) {
  ChatTemplate t = ChatTemplate::from_source("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  jinja::RenderLimits limits;
  limits.max_steps = 100000;
  t.set_limits(limits);
  EXPECT_NE(error_of([&] { t.apply(three_turns(), true, "", ""); }).find("limit of 100000 steps"), std::string::npos);
}

TEST(ChatTemplateApply, ConcurrentRendersAgree) {
  const ChatTemplate t = qwen3_template();
  const std::string expected = t.apply(three_turns(), true, "", "<|im_end|>");
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 50; ++k) {
        if (t.apply(three_turns(), true, "", "<|im_end|>") != expected) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_NE(error_of([] { ChatTemplate().apply(three_turns(), true, "", ""); }).find("no template"), std::string::npos);
}

// ---- templates shipped in the vocab GGUFs ----------------------------------

TEST(ChatTemplateGguf, VocabTemplatesParseAndRender) {
  TESSERA_REQUIRE_SHARED("models/vocab");
  int with_template = 0;
  for (const auto& entry : std::filesystem::directory_iterator(testing::shared_path("models/vocab"))) {
    if (entry.path().extension() != ".gguf") continue;
    const gguf::File file = gguf::File::open(entry.path().string());
    const std::string source = file.get_string_or("tokenizer.chat_template", "");
    if (source.empty()) continue;
    ++with_template;
    SCOPED_TRACE(entry.path().filename().string());
    const ChatTemplate t = ChatTemplate::resolve("", source);
    const std::string prompt = t.apply(three_turns(), true, "<s>", "</s>");
    EXPECT_NE(prompt.find("How are you?"), std::string::npos) << prompt;
    if (entry.path().filename() == "ggml-vocab-phi-3.gguf") {
      // Phi-3's own template drops the system turn and opens an assistant turn after each user turn
      EXPECT_EQ(prompt, "<s><|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n<|user|>\nHow are you?<|end|>\n"
                        "<|assistant|>\n");
    }
  }
  EXPECT_GE(with_template, 1) << "no vocab GGUF carries tokenizer.chat_template";
}

}  // namespace
}  // namespace tessera::server
