#include "chat/remote_chat.h"

#include <httplib.h>

#include <chrono>

#include "core/error.h"

namespace tessera::chat {
namespace {

using json = nlohmann::json;

httplib::Headers auth_headers(const std::string& key) {
  httplib::Headers h;
  if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
  return h;
}

std::string error_text(const httplib::Result& r) {
  if (!r) return httplib::to_string(r.error());
  try {
    return json::parse(r->body).at("error").at("message").get<std::string>();
  } catch (const std::exception&) {
    return fmt::format("HTTP {}", r->status);
  }
}

}  // namespace

RemoteChat::RemoteChat(std::string url, std::string api_key, json sampling)
    : url_(std::move(url)), api_key_(std::move(api_key)), sampling_(std::move(sampling)) {
  while (!url_.empty() && url_.back() == '/') url_.pop_back();
  TESSERA_CHECK(url_.rfind("http://", 0) == 0 || url_.rfind("https://", 0) == 0, kInvalidArgument,
                "--url {}: give http://HOST:PORT", url_);
}

json RemoteChat::models() const {
  httplib::Client cli(url_);
  cli.set_connection_timeout(5, 0);
  const httplib::Result r = cli.Get("/v1/models", auth_headers(api_key_));
  TESSERA_CHECK(r && r->status == 200, kIo, "{}: {}", url_, error_text(r));
  return json::parse(r->body);
}

TurnStats RemoteChat::send(const std::string& user, const TextSink& out, const StopCheck& stop) {
  messages_.push_back({"user", user});
  try {
    return generate(out, stop);
  } catch (...) {
    messages_.pop_back();  // the turn did not happen
    throw;
  }
}

TurnStats RemoteChat::regenerate(const TextSink& out, const StopCheck& stop) {
  TESSERA_CHECK(!messages_.empty(), kInvalidArgument, "nothing to regenerate: the conversation does not end with a reply");
  const Message reply = messages_.back();
  drop_last_reply();
  try {
    return generate(out, stop);
  } catch (...) {
    messages_.push_back(reply);  // keep the reply we had
    throw;
  }
}

TurnStats RemoteChat::generate(const TextSink& out, const StopCheck& stop) {
  json body = sampling_;
  body["messages"] = messages_json();
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (!model_.empty()) body["model"] = model_;

  TurnStats st;
  std::string reply, buffer, error_body;
  bool aborted = false;
  const auto t0 = std::chrono::steady_clock::now();
  httplib::Client cli(url_);
  cli.set_connection_timeout(5, 0);
  cli.set_read_timeout(600, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.headers = auth_headers(api_key_);
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  int status = 0;
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, n);
      return true;
    }
    buffer.append(data, n);
    size_t nl;
    while ((nl = buffer.find('\n')) != std::string::npos) {
      std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("data: ", 0) != 0 || line == "data: [DONE]") continue;
      const json chunk = json::parse(line.substr(6), nullptr, /*allow_exceptions=*/false);
      if (chunk.is_discarded()) continue;
      if (chunk.contains("usage") && chunk["usage"].is_object()) {
        st.prompt_tokens = chunk["usage"].value("prompt_tokens", int64_t{0});
        st.output_tokens = chunk["usage"].value("completion_tokens", int64_t{0});
      }
      if (!chunk.contains("choices") || !chunk["choices"].is_array() || chunk["choices"].empty()) continue;
      const json& c = chunk["choices"][0];
      if (c.contains("finish_reason") && c["finish_reason"].is_string()) st.finish = c["finish_reason"];
      if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string()) {
        const std::string piece = c["delta"]["content"];
        if (!piece.empty()) {
          if (reply.empty()) st.ttft_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          reply += piece;
          out(piece);
        }
      }
    }
    if (stop && stop()) {
      aborted = true;
      return false;  // closes the connection: the server aborts the reply
    }
    return true;
  };
  const httplib::Result r = cli.send(req);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (aborted) {
    st.finish = "abort";
  } else if (!r || status != 200) {
    std::string why = !r ? httplib::to_string(r.error()) : fmt::format("HTTP {}", status);
    try {
      why = json::parse(error_body).at("error").at("message").get<std::string>();
    } catch (const std::exception&) {
    }
    fail(ErrorCode::kIo, "{}: {}", url_, why);
  }
  messages_.push_back({"assistant", reply});
  last_ = st;
  return st;
}

}  // namespace tessera::chat
