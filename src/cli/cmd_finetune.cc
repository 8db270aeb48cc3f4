// tessera finetune: a LoRA adapter trained on a text file over a frozen
// base (--method qlora: the same over a quantized base file), written as
// llama.cpp's adapter GGUF that generate, perplexity and serve load with
// --lora; or a soft prompt (--method prompt), written as the .npy that
// generate and serve load with --soft-prompt (train/finetune.h).
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "adapters/lora_gguf.h"
#include "adapters/random_lora.h"
#include "cli/command.h"
#include "cli/text_file.h"
#include "core/error.h"
#include "format/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "train/finetune.h"

namespace tessera::cli {
namespace {

struct FinetuneArgs {
  std::string model, data, out, val, method = "lora", targets = "all";
  train::TrainOptions o;
  int threads = 0;
  int64_t log_every = 10;
};

TESSERA_COMMAND("finetune", "Train a LoRA adapter (llama.cpp's adapter GGUF) or a soft prompt (.npy) on a text file", [](CLI::App& sub) {
  auto a = std::make_shared<FinetuneArgs>();
  sub.add_option("-m,--model", a->model, "Base model GGUF (llama); quantized for QLoRA")->required();
  sub.add_option("--data", a->data, "Training text")->required();
  sub.add_option("-o,--out", a->out, "Output: the adapter GGUF (lora, qlora) or the soft prompt .npy (prompt)")->required();
  sub.add_option("--method", a->method, "lora (any base), qlora (a quantized base) or prompt (prompt tuning)")
      ->check(CLI::IsMember({"lora", "qlora", "prompt"}))
      ->capture_default_str();
  sub.add_option("--val", a->val, "Validation text: its loss and perplexity before and after");
  sub.add_option("--rank", a->o.rank, "LoRA rank")->capture_default_str();
  sub.add_option("--virtual-tokens", a->o.n_virtual, "Prompt tuning: rows of the soft prompt")->capture_default_str();
  sub.add_option("--alpha", a->o.alpha, "LoRA alpha (the delta is scaled by alpha / rank)")->capture_default_str();
  sub.add_option("--targets", a->targets, "Linears adapted: all, or a list of q,k,v,o,gate,up,down")->capture_default_str();
  sub.add_option("--lr", a->o.adamw.lr, "AdamW learning rate")->capture_default_str();
  sub.add_option("--weight-decay", a->o.adamw.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  sub.add_option("--epochs", a->o.epochs, "Passes over the training windows")->capture_default_str();
  sub.add_option("--steps", a->o.steps, "Stop after this many steps (0: --epochs)")->capture_default_str();
  sub.add_option("--batch", a->o.batch, "Windows per step")->capture_default_str();
  sub.add_option("-c,--ctx", a->o.ctx, "Tokens predicted per window")->capture_default_str();
  sub.add_option("--seed", a->o.seed, "Seed of the initialization and the window order")->capture_default_str();
  sub.add_option("--log-every", a->log_every, "Print the loss every N steps")->capture_default_str();
  sub.add_option("-t,--threads", a->threads, "Threads (windows of a step in parallel; default: all cores)");
  return [a]() {
    a->o.targets = adapters::parse_lora_targets(a->targets);
    const LoadedModel lm = load_model(a->model);
    const auto tok = load_tokenizer(lm);
    const train::LoraTrainModel m(*lm.file);
    if (a->method == "qlora") {
      bool quantized = false;
      for (const gguf::TensorInfo& t : lm.file->tensors()) {
        quantized |= t.name.ends_with("attn_q.weight") && t.type != DType::kF32 && t.type != DType::kF16 &&
                     t.type != DType::kBF16;
      }
      TESSERA_CHECK(quantized, kInvalidArgument, "--method qlora: '{}' is not quantized (give a Q4_0/Q8_0/K-quant base, "
                    "or --method lora)", a->model);
    }
    const auto windows = train::text_windows(tok->encode(read_text_file(a->data), true), a->o.ctx);
    ThreadPool pool(a->threads);
    std::vector<std::vector<int32_t>> val;
    if (!a->val.empty()) val = train::text_windows(tok->encode(read_text_file(a->val), true), a->o.ctx);
    const bool prompt_tuning = a->method == "prompt";
    LoraAdapter lora;
    std::vector<float> prompt;
    if (prompt_tuning) {
      prompt = train::init_prompt(m, a->o.n_virtual, a->o.seed);
    } else {
      lora = train::init_lora(m.config(), a->o.rank, a->o.alpha, a->o.targets, a->o.seed);
    }
    if (!val.empty()) {
      const double l = train::mean_loss(m, val, nullptr, pool);
      std::printf("validation before: loss %.4f, perplexity %.3f (%zu windows of %lld)\n", l, std::exp(l), val.size(),
                  static_cast<long long>(a->o.ctx));
    }
    std::fprintf(stderr, "training %s: %zu windows of %lld tokens, batch %lld\n", a->method.c_str(), windows.size(),
                 static_cast<long long>(a->o.ctx), static_cast<long long>(a->o.batch));
    const train::StepCallback log = [&](const train::TrainReport& r) {
      if (r.step % a->log_every == 0 || r.step == r.steps) {
        std::fprintf(stderr, "step %lld/%lld  loss %.4f  %.0f tokens/s\n", static_cast<long long>(r.step),
                     static_cast<long long>(r.steps), r.loss, static_cast<double>(r.tokens) / r.seconds);
      }
    };
    if (prompt_tuning) {
      train::train_prompt(m, windows, prompt, a->o, pool, log);
    } else {
      train::train_lora(m, windows, lora, a->o, pool, log);
    }
    if (!val.empty()) {
      const double l = prompt_tuning ? train::mean_loss(m, val, nullptr, pool, &prompt) : train::mean_loss(m, val, &lora, pool);
      std::printf("validation after: loss %.4f, perplexity %.3f\n", l, std::exp(l));
    }
    if (prompt_tuning) {
      train::write_soft_prompt_npy(prompt, m.config().n_embd, a->out);
    } else {
      adapters::write_lora_gguf(lora, m.config().arch, a->out);
    }
    std::printf("wrote %s\n", a->out.c_str());
    return 0;
  };
});

}  // namespace
}  // namespace tessera::cli
