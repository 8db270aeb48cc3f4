// tessera chat: talk to a model in the terminal (src/chat/chat_session.h
// does the work). Line editing and history from libedit; a line ending in
// "\" continues on the next. Ctrl-C stops the reply being generated and
// keeps the session; Ctrl-C twice at the prompt (or Ctrl-D) exits.
#include <signal.h>
#include <unistd.h>

#include <editline/readline.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include "adapters/lora_gguf.h"
#include "chat/chat_session.h"
#include "chat/remote_chat.h"
#include "cli/command.h"
#include "cli/common_options.h"
#include "core/log.h"
#include "format/json_file.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tessera::cli {
namespace {

volatile sig_atomic_t g_interrupts = 0;
void on_sigint(int) { g_interrupts = g_interrupts + 1; }

struct ChatArgs {
  RunOptions run;
  SamplingOptions sampling;
  AdapterOptions adapters;
  std::string chat_template;
  std::string system;
  std::string url;      // a running server instead of -m
  std::string api_key;  // its --api-key
};

// The request fields of the sampling flags, for --url.
nlohmann::json sampling_json(const engine::SamplingParams& p) {
  nlohmann::json j = {{"temperature", p.temperature}, {"top_p", p.top_p}, {"top_k", p.top_k}, {"min_p", p.min_p},
                      {"repetition_penalty", p.repetition_penalty}, {"presence_penalty", p.presence_penalty},
                      {"frequency_penalty", p.frequency_penalty}, {"ignore_eos", p.ignore_eos}};
  if (p.max_tokens > 0) j["max_tokens"] = p.max_tokens;
  if (p.seed) j["seed"] = *p.seed;
  if (!p.stop.empty()) j["stop"] = p.stop;
  return j;
}

const char* kHelp =
    "/system TEXT   set the system message (empty: none)\n"
    "/reset         forget the conversation\n"
    "/regen         replace the last reply\n"
    "/save FILE     save the conversation (JSON)\n"
    "/load FILE     load one\n"
    "/adapter NAME  run the next turns with a --lora NAME=FILE adapter (none: without)\n"
    "/stats         the last turn's tokens and times\n"
    "/exit          leave (or Ctrl-D; Ctrl-C twice)\n"
    "A line ending in \\ continues on the next. Ctrl-C stops a reply.\n";

// One line from the terminal (libedit) or a pipe; nullopt at the end. A
// Ctrl-C at a terminal prompt returns "" with `interrupted` set.
std::optional<std::string> read_line(const char* prompt, bool tty, bool& interrupted) {
  interrupted = false;
  if (!tty) {
    std::string line;
    if (!std::getline(std::cin, line)) return std::nullopt;
    return line;
  }
  const sig_atomic_t before = g_interrupts;
  char* raw = readline(prompt);
  if (raw == nullptr) {
    if (g_interrupts != before) {
      interrupted = true;
      return std::string();
    }
    return std::nullopt;
  }
  std::string line(raw);
  std::free(raw);
  if (!line.empty()) add_history(line.c_str());
  return line;
}

void print_stats(const chat::TurnStats& s) {
  const double tps =
      s.output_tokens > 1 ? static_cast<double>(s.output_tokens - 1) / std::max(s.seconds - s.ttft_s, 1e-9) : 0.0;
  if (s.cached_tokens < 0) {  // a server: it does not say what its cache held
    std::printf("prompt %lld tokens; reply %lld tokens, %s; first token %.3f s, %.1f tokens/s\n",
                static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.output_tokens), s.finish.c_str(),
                s.ttft_s, tps);
    return;
  }
  std::printf("prompt %lld tokens: %lld from the cache, %lld prefilled (this turn added %lld); reply %lld tokens, "
              "%s; first token %.3f s, %.1f tokens/s\n",
              static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.cached_tokens),
              static_cast<long long>(s.prefilled()), static_cast<long long>(s.new_tokens),
              static_cast<long long>(s.output_tokens), s.finish.c_str(), s.ttft_s, tps);
}

// The terminal: reads lines and commands, streams replies. `adapter` does
// /adapter NAME for the back end in use.
int chat_loop(chat::Conversation& session, const std::string& banner,
              const std::function<void(const std::string&)>& adapter) {

  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);  // no SA_RESTART: a read at the prompt returns
  const bool tty = ::isatty(STDIN_FILENO) != 0;
  if (tty) std::printf("tessera chat: %s. /help for commands.\n", banner.c_str());

  auto stream = [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  bool pending_exit = false;
  for (;;) {
    bool interrupted = false;
    std::optional<std::string> line = read_line("> ", tty, interrupted);
    if (!line) break;
    if (interrupted) {
      if (pending_exit) break;
      std::printf("\n(Ctrl-C again to exit)\n");
      pending_exit = true;
      continue;
    }
    pending_exit = false;
    while (!line->empty() && line->back() == '\\') {
      line->back() = '\n';
      std::optional<std::string> more = read_line("… ", tty, interrupted);
      if (!more || interrupted) break;
      *line += *more;
    }
    const std::string& text = *line;
    if (text.empty()) continue;
    try {
      const sig_atomic_t before = g_interrupts;
      auto stop = [before] { return g_interrupts != before; };
      auto arg = [&](size_t n) { return text.size() > n ? text.substr(n + 1) : std::string(); };
      if (text == "/exit" || text == "/quit") break;
      if (text == "/help") {
        std::fputs(kHelp, stdout);
      } else if (text.rfind("/system", 0) == 0) {
        session.set_system(arg(7));
      } else if (text == "/reset") {
        session.reset();
      } else if (text == "/regen") {
        session.regenerate(stream, stop);
        std::printf("\n");
      } else if (text.rfind("/save ", 0) == 0) {
        std::ofstream(arg(5)) << session.to_json().dump(2) << "\n";
        std::printf("saved %zu messages to %s\n", session.messages().size(), arg(5).c_str());
      } else if (text.rfind("/load ", 0) == 0) {
        session.load_json(read_json_file(arg(5)));
        std::printf("loaded %zu messages from %s\n", session.messages().size(), arg(5).c_str());
      } else if (text.rfind("/adapter", 0) == 0) {
        adapter(arg(8));
      } else if (text == "/stats") {
        print_stats(session.last());
      } else if (text[0] == '/') {
        std::printf("unknown command %s (/help)\n", text.c_str());
      } else {
        const chat::TurnStats s = session.send(text, stream, stop);
        std::printf(s.finish == "abort" ? " [stopped]\n" : "\n");
      }
      std::fflush(stdout);
    } catch (const Error& e) {
      std::printf("error: %s\n", e.what());
    }
  }
  if (tty) std::printf("\n");
  return 0;
}

int run_chat(ChatArgs& a) {
  if (!a.url.empty()) {
    TESSERA_CHECK(a.run.model.empty(), kInvalidArgument, "give -m (a model here) or --url (a running server), not both");
    chat::RemoteChat remote(a.url, a.api_key, sampling_json(a.sampling.params(-1)));
    remote.models();  // the URL and the key work, before the first turn
    if (!a.system.empty()) remote.set_system(a.system);
    return chat_loop(remote, a.url, [&](const std::string& name) { remote.set_model(name == "none" ? "" : name); });
  }
  a.run.resolve_model();
  const LoadedModel lm = a.run.load();
  const auto tok = load_tokenizer(lm);
  std::optional<server::ChatTemplate> tmpl = resolve_chat_template(a.chat_template, *lm.file);
  if (!tmpl) {
    TESSERA_LOG_INFO("the model has no chat template: using chatml (--chat-template to choose)");
    tmpl = server::ChatTemplate::resolve("chatml", std::nullopt);
  }
  engine::EngineConfig ec = a.run.engine_config(lm);
  a.adapters.apply(ec, *lm.model);
  std::map<std::string, std::shared_ptr<const LoraAdapter>> named;
  for (const auto& [name, path] : a.adapters.named()) {
    named[name] = adapters::stored_as(adapters::load_lora(path, lm.model->config(), a.adapters.lora_scale),
                                      a.adapters.weight_type());
  }
  engine::Engine eng(*lm.model, tok.get(), ec);
  chat::ChatSession session(eng, *tok, *tmpl, a.sampling.params(-1));
  if (!a.system.empty()) session.set_system(a.system);
  return chat_loop(session, a.run.model, [&](const std::string& name) {
    if (name.empty() || name == "none") return session.set_adapter(nullptr);
    auto it = named.find(name);
    TESSERA_CHECK(it != named.end(), kInvalidArgument, "no adapter '{}' (give --lora {}=FILE)", name, name);
    session.set_adapter(it->second);
  });
}

TESSERA_COMMAND("chat", "Talk to a model in the terminal", [](CLI::App& sub) {
  auto a = std::make_shared<ChatArgs>();
  a->run.max_num_seqs = 1;
  a->run.add_to(sub, /*engine_options=*/false, /*model_optional=*/true);
  a->sampling.n_predict = -1;
  a->sampling.add_to(sub);
  a->adapters.add_to(sub, AdapterScope::kChat);
  sub.add_option("--chat-template", a->chat_template,
                 "A built-in name (chatml, llama-3, ...) or a Jinja file (default: the model's, else chatml)");
  sub.add_option("--system", a->system, "The system message");
  sub.add_option("--url", a->url, "Talk to a running server (http://HOST:PORT) instead of loading -m here");
  sub.add_option("--api-key", a->api_key, "The server's API key (with --url)");
  return [a] { return run_chat(*a); };
});

}  // namespace
}  // namespace tessera::cli
