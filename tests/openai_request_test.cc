// OpenAI request parsing (server/openai_request.h) at the parse level, with
// no transport: which top-level fields each endpoint takes, and that every
// other one is refused naming it.
#include <nlohmann/json.hpp>

#include <string>

#include "template/chat_template.h"
#include "server/openai_request.h"
#include "server/sampling_json.h"
#include "server/tool_calls.h"
#include "grammar/matcher.h"
#include "util/test_util.h"

namespace tessera::server {
namespace {

using nlohmann::json;

class OpenAiRequest : public ::testing::Test {
 protected:
  OpenAiRequest() : chatml_(ChatTemplate::resolve("chatml", std::nullopt)) {
    ctx_.tokenizer = testing::stories260k().tok.get();
    ctx_.chat_template = &chatml_;
    ctx_.max_model_len = 256;
    ctx_.served_model_name = "stories";
  }
  json completion() const { return {{"prompt", "Once upon a time"}, {"max_tokens", 4}}; }
  json chat() const { return {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 4}}; }

  // The ApiError parsing `body` throws (status 0 when it parses).
  ApiError parse(const json& body, Endpoint ep) const {
    try {
      if (ep == Endpoint::kChat) {
        parse_chat_request(body, ctx_);
      } else {
        parse_completion_request(body, ctx_);
      }
    } catch (const ApiError& e) {
      return e;
    }
    return ApiError(0, "");
  }

  ChatTemplate chatml_;
  ModelContext ctx_;
};

TEST_F(OpenAiRequest, StructuredOutputFieldsCompileOrAreRefusedNamingWhy) {
  const json schema = {{"type", "object"}, {"properties", {{"b", {{"type", "integer"}}}, {"a", {{"type", "string"}}}}}};
  const json good[] = {
      {{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}, {"strict", true}}}}}},
      {{"response_format", {{"type", "json_object"}}}},
      {{"json_schema", schema}},
      {{"grammar", "root ::= \"yes\" | \"no\""}},
      {{"regex", "[0-9]{3}"}},
  };
  for (Endpoint ep : {Endpoint::kCompletions, Endpoint::kChat}) {
    for (const json& extra : good) {
      json body = ep == Endpoint::kChat ? chat() : completion();
      body.update(extra);
      const ApiRequest r = ep == Endpoint::kChat ? parse_chat_request(body, ctx_) : parse_completion_request(body, ctx_);
      ASSERT_NE(r.params.constraint, nullptr) << extra.dump();
    }
    json text = ep == Endpoint::kChat ? chat() : completion();
    text["response_format"] = {{"type", "text"}};
    EXPECT_EQ((ep == Endpoint::kChat ? parse_chat_request(text, ctx_) : parse_completion_request(text, ctx_)).params.constraint,
              nullptr);
  }
  // The body's text keeps the schema's property order ("b" before "a"),
  // which the parsed json has lost: outputs follow the order written.
  json body = completion();
  body["json_schema"] = schema;
  const std::string raw = R"({"prompt": "x", "max_tokens": 4, "json_schema": {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}})";
  const ApiRequest r = parse_completion_request(json::parse(raw), ctx_, raw);
  const std::string rules = r.params.constraint->grammar.to_string();
  EXPECT_LT(rules.find("property b"), rules.find("property a")) << rules;

  const std::pair<json, std::pair<std::string, std::string>> refused[] = {
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "string"}, {"contentMediaType", "x"}}}}}}}},
       {"response_format", "contentMediaType"}},
      {{{"response_format", {{"type", "xml"}}}}, {"response_format", "xml"}},
      {{{"grammar", "root ::= item\n"}}, {"grammar", "undefined rule 'item'"}},
      {{{"regex", "(a"}}, {"regex", "missing ')'"}},
      {{{"regex", "a+"}, {"grammar", "root ::= \"a\""}}, {"regex", "give one"}},
  };
  for (const auto& [extra, want] : refused) {
    json b = chat();
    b.update(extra);
    const ApiError e = parse(b, Endpoint::kChat);
    EXPECT_EQ(e.status(), 400) << extra.dump();
    EXPECT_EQ(e.param(), want.first) << e.what();
    EXPECT_NE(std::string(e.what()).find(want.second), std::string::npos) << e.what();
  }
}

TEST_F(OpenAiRequest, ToolsCompileToACallGrammarWhenACallIsRequired) {
  const json weather = {{"type", "function"},
                        {"function", {{"name", "get_weather"},
                                      {"parameters", {{"type", "object"},
                                                      {"properties", {{"city", {{"type", "string"}}}}},
                                                      {"required", {"city"}}}}}}};
  json body = chat();
  body["tools"] = json::array({weather});
  EXPECT_FALSE(parse_chat_request(body, ctx_).params.constraint);  // auto: free text, parsed after
  EXPECT_TRUE(parse_chat_request(body, ctx_).tools.has_value());
  body["tool_choice"] = "required";
  EXPECT_TRUE(parse_chat_request(body, ctx_).params.constraint);
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const ApiRequest named = parse_chat_request(body, ctx_);
  ASSERT_TRUE(named.params.constraint);
  EXPECT_EQ(named.tools->format, ToolFormat::kGeneric);  // chatml names no tool-call format
  body["tool_choice"] = "none";
  EXPECT_FALSE(parse_chat_request(body, ctx_).tools.has_value());

  const std::pair<json, std::string> refused[] = {
      {{{"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}, "tool_choice"},
      {{{"tools", json::array({{{"type", "function"}, {"function", {{"name", ""}}}}})}}, "tools[0].function.name"},
      {{{"tools", json::array({weather, weather})}}, "tools[1].function.name"},
      {{{"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}}, "tool_choice"},
      {{{"tool_choice", "always"}}, "tool_choice"},
  };
  for (const auto& [extra, param] : refused) {
    json b = chat();
    b["tools"] = json::array({weather});
    b.update(extra);
    const ApiError e = parse(b, Endpoint::kChat);
    EXPECT_EQ(e.status(), 400) << extra.dump();
    EXPECT_EQ(e.param(), param) << e.what();
  }
  json no_tools = chat();
  no_tools["tool_choice"] = "required";
  EXPECT_EQ(parse(no_tools, Endpoint::kChat).param(), "tool_choice");
}

TEST(ToolCalls, EachFamilysFormatParsesAndTheGrammarWritesIt) {
  using F = ToolFormat;
  EXPECT_EQ(detect_tool_format("{% if tools %}<tool_call>{% endif %}"), F::kHermes);
  EXPECT_EQ(detect_tool_format("[TOOL_CALLS]"), F::kMistral);
  EXPECT_EQ(detect_tool_format("<|python_tag|>"), F::kLlama3);
  EXPECT_EQ(detect_tool_format("{{ messages }}"), F::kGeneric);
  const auto h = parse_tool_calls("Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
                                  "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>", F::kHermes);
  ASSERT_EQ(h.calls.size(), 2u);
  EXPECT_EQ(h.content, "Sure.");
  EXPECT_EQ(h.calls[0].name, "f");
  EXPECT_EQ(json::parse(h.calls[0].arguments), json({{"x", 1}}));
  EXPECT_EQ(parse_tool_calls("[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]", F::kMistral).calls.size(), 1u);
  EXPECT_EQ(parse_tool_calls(" {\"name\": \"f\", \"parameters\": {\"a\": [1]}}", F::kLlama3).calls.at(0).arguments, "{\"a\":[1]}");
  EXPECT_EQ(parse_tool_calls("{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {}}]}", F::kGeneric).calls.size(), 1u);
  // Not a call: content, whole.
  const auto plain = parse_tool_calls("<tool_call>\n{broken\n</tool_call>", F::kHermes);
  EXPECT_TRUE(plain.calls.empty());
  EXPECT_EQ(plain.content, "<tool_call>\n{broken\n</tool_call>");  // nothing dropped

  // The grammar of a required call accepts what the parser reads, per family.
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
  grammar::TokenMasker m(pieces, {});
  ToolConfig cfg;
  cfg.tools = {{"f", nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]})"), true},
               {"g", nlohmann::ordered_json::parse(R"({"type": "object"})"), false}};
  cfg.choice = "required";
  const std::pair<F, std::string> written[] = {
      {F::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>"},
      {F::kLlama3, "{\"name\": \"f\", \"parameters\": {\"x\": 3}}"},
      {F::kMistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": 3}}, {\"name\": \"g\", \"arguments\": {}}]"},
      {F::kGeneric, "{\"tool_calls\": [{\"name\": \"g\", \"arguments\": {}}]}"},
  };
  for (const auto& [f, text] : written) {
    cfg.format = f;
    grammar::Matcher x(tool_call_constraint(cfg), m);
    EXPECT_TRUE(x.accept_bytes(text) && x.can_end()) << text;
    EXPECT_FALSE(parse_tool_calls(text, f).calls.empty()) << text;
    grammar::Matcher y(tool_call_constraint(cfg), m);
    EXPECT_FALSE(y.accept_bytes(text.substr(0, text.size() / 2) + "\"x\": \"three\"")) << text;
  }
  cfg.format = F::kHermes;
  cfg.choice = "named";
  cfg.named = "g";
  grammar::Matcher z(tool_call_constraint(cfg), m);
  EXPECT_FALSE(z.accept_bytes("<tool_call>\n{\"name\": \"f\""));
}

TEST_F(OpenAiRequest, FieldsTheServerDoesNotImplementAreRefusedNamingThem) {
  const json unknown = {{"guided_json", {{"type", "object"}}}, {"min_tokens", 3},
                        {"typo_field", 1},
                        {"guided_regex", "a+"},          {"store", true},
                        {"include_stop_str_in_output", true}, {"skip_special_tokens", false}};
  for (Endpoint ep : {Endpoint::kCompletions, Endpoint::kChat}) {
    for (const auto& [name, value] : unknown.items()) {
      json body = ep == Endpoint::kChat ? chat() : completion();
      body[name] = value;
      const ApiError e = parse(body, ep);
      EXPECT_EQ(e.status(), 400) << name;
      EXPECT_EQ(e.param(), name) << e.what();
      EXPECT_EQ(e.to_json()["error"]["type"], "invalid_request_error");
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
  // Fields of the other endpoint are unknown here.
  json c = completion();
  c["add_generation_prompt"] = true;
  EXPECT_EQ(parse(c, Endpoint::kCompletions).param(), "add_generation_prompt");
  json ch = chat();
  ch["echo"] = true;
  EXPECT_EQ(parse(ch, Endpoint::kChat).param(), "echo");
}

TEST_F(OpenAiRequest, EveryFieldTheParserReadsIsAccepted) {
  // A valid value for each sampling field: none is refused as unknown.
  const json valid = {{"temperature", 0.5},      {"top_p", 0.9},          {"top_k", 5},
                      {"min_p", 0.1},            {"presence_penalty", 0.1}, {"frequency_penalty", 0.1},
                      {"repetition_penalty", 1.1}, {"seed", 7},           {"max_tokens", 4},
                      {"max_completion_tokens", 4}, {"n", 2},             {"ignore_eos", true},
                      {"stop", "x"},             {"stop_token_ids", json::array({1})}, {"speculative", false},
                      {"kv_policy", "dense"}};
  for (std::string_view f : kSamplingFields) EXPECT_TRUE(valid.contains(std::string(f))) << f;
  for (Endpoint ep : {Endpoint::kCompletions, Endpoint::kChat}) {
    json body = ep == Endpoint::kChat ? chat() : completion();
    body.update(valid);
    // OpenAI fields with no effect here, the refusable ones at their harmless
    // values, and null (not given) for anything.
    body.update({{"user", "u"}, {"safety_identifier", "s"}, {"metadata", {{"k", "v"}}}, {"store", false},
                 {"logit_bias", json::object()}, {"stream", false},
                 {"stream_options", {{"include_usage", true}}}, {"model", "stories"}, {"some_future_field", nullptr}});
    if (ep == Endpoint::kChat) {
      body.update({{"tools", json::array()}, {"functions", json::array()}, {"tool_choice", "none"}, {"parallel_tool_calls", true},
                   {"response_format", {{"type", "text"}}}, {"logprobs", true}, {"top_logprobs", 2},
                   {"add_generation_prompt", true}, {"chat_template_kwargs", json::object()}});
    } else {
      body.update({{"suffix", ""}, {"best_of", 2}, {"echo", false}, {"logprobs", 2}});
    }
    const ApiError e = parse(body, ep);
    EXPECT_EQ(e.status(), 0) << body.dump() << " -> " << e.what();
  }
  // The refusable fields asking for something are refused.
  const json refusable = {{"suffix", "x"}, {"logit_bias", {{"1", 5}}}};
  for (const auto& [f, v] : refusable.items()) {
    json body = completion();
    body[f] = v;
    EXPECT_EQ(parse(body, Endpoint::kCompletions).param(), f);
  }
  // Known fields that need something this context lacks are refused for
  // that reason, not as unknown.
  for (const char* f : {"prompt_cache", "soft_prompt"}) {
    json body = completion();
    body[f] = f == std::string("prompt_cache") ? json{{"modules", json::array()}} : json("x");
    const ApiError e = parse(body, Endpoint::kCompletions);
    EXPECT_EQ(e.param(), f);
    EXPECT_EQ(std::string(e.what()).find("Unrecognized"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::server
