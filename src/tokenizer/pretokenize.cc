// Pre-tokenizers: regex splits (PCRE2 with UTF, UCP and JIT) and the named
// pre-tokenizers of byte-level BPE vocabularies (tokenizer.ggml.pre). The
// patterns are those each model's tokenizer.json declares.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"

namespace tessera::tok {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

// Llama 3: case-insensitive contractions, at most three digits together.
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: as Llama 3 with single digits.
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// GPT-4o's o200k (gpt-oss, Llama 4): a word is an optional non-letter, then
// upper-case-like letters then lower-case-like ones (or at least one of the
// former), each with an optional case-insensitive contraction; digits in
// threes; '/' may close a punctuation run. As its tokenizer.json writes it:
// llama.cpp's own regex engine runs an approximation of the letter classes
// ("a letter not in a-z" for the upper-case-like ones).
const char* const kGpt4oPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// CJK runs shared by the DeepSeek pre-tokenizers: 一-龥, U+0800-一, 가-U+D7FF.
const char* const kDeepseekCjkPattern = R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
// DeepSeek LLM's letters: the cased letters of its tokenizer.json, written as
// escapes because several endpoints (U+1F7D, U+1FBE, U+2126, U+212A, ...) have
// NFC singleton decompositions that would silently turn into other letters.
const char* const kDeepseekLetterPattern =
    R"(\s?[)"
    R"(A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})"
    R"(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
    R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})"
    R"(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77})"
    R"(\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D})"
    R"(\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE})"
    R"(\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC})"
    R"(\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124})"
    R"(\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E})"
    R"(\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D})"
    R"(\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF})"
    R"(\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F})"
    R"(\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF})"
    R"(\x{1E900}-\x{1E943}]+)";
// DeepSeek LLM's punctuation: ASCII and full-width punctuation, ‘-‟, 　-。.
const char* const kDeepseekPunctPattern =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return fmt::format("PCRE2 error {}", code);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

// A compiled pattern, shared read-only by every thread (match data is per call).
class Regex {
 public:
  explicit Regex(const std::string& pattern) {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &err_offset, nullptr);
    TESSERA_CHECK(code_ != nullptr, kCorruptFile, "pre-tokenizer regex /{}/ does not compile at offset {}: {}",
                  pattern, err_offset, pcre2_message(err));
    // Without JIT (an unsupported CPU) pcre2_match interprets: slower, same result.
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls f(start, end) for each non-empty match, left to right. `text` must
  // be valid UTF-8 (the tokenizer sanitises its input once).
  template <class F>
  void for_each_match(std::string_view text, F&& f) const {
    struct MatchData {
      pcre2_match_data* md;
      ~MatchData() { pcre2_match_data_free(md); }
    } data{pcre2_match_data_create_from_pattern(code_, nullptr)};
    if (data.md == nullptr) throw std::bad_alloc();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t offset = 0;
    while (offset < text.size()) {
      int rc = pcre2_match(code_, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, data.md, nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        // The JIT's 32 KiB stack is too small for this input; the interpreter
        // keeps its backtracking state on the heap.
        rc = pcre2_match(code_, subject, text.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data.md,
                         nullptr);
      }
      if (rc == PCRE2_ERROR_NOMATCH) return;
      TESSERA_CHECK(rc >= 0, kInvalidArgument, "pre-tokenizer regex failed on the input: {}", pcre2_message(rc));
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
      const size_t start = ov[0], end = ov[1];
      if (end <= start) {  // an empty match splits nothing: step over one character
        offset = start + utf8_len(static_cast<uint8_t>(text[start]));
        continue;
      }
      f(start, end);
      offset = end;
    }
  }

 private:
  pcre2_code* code_ = nullptr;
};

struct PreTokenizer::Step {
  std::unique_ptr<Regex> regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  std::string pattern;
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

void PreTokenizer::add_split(const std::string& pattern, SplitBehavior behavior, bool invert) {
  steps_.push_back(Step{std::make_unique<Regex>(pattern), behavior, invert, pattern});
}

std::vector<PreTokenizer::SplitSpec> PreTokenizer::splits() const {
  std::vector<SplitSpec> out;
  for (const Step& s : steps_) out.push_back(SplitSpec{s.pattern, s.behavior, s.invert});
  return out;
}

namespace {

struct Span {
  size_t start, end;
  bool is_match;
};

// Combines the spans of one piece into pieces as `behavior` says (the
// semantics of Hugging Face's SplitDelimiterBehavior).
void emit_spans(std::string_view piece, const std::vector<Span>& spans, SplitBehavior behavior,
                std::vector<std::string_view>& out) {
  std::vector<std::pair<size_t, size_t>> acc;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) acc.emplace_back(s.start, s.end);
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) acc.emplace_back(s.start, s.end);
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !acc.empty()) acc.back().second = s.end;
        else acc.emplace_back(s.start, s.end);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !acc.empty()) acc.back().first = it->start;
        else acc.emplace_back(it->start, it->end);
        previous_match = it->is_match;
      }
      std::reverse(acc.begin(), acc.end());
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match && previous_match) acc.back().second = s.end;
        else acc.emplace_back(s.start, s.end);
        previous_match = s.is_match;
      }
      break;
  }
  for (const auto& [a, b] : acc) out.push_back(piece.substr(a, b - a));
}

}  // namespace

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  if (text.empty()) return;
  std::vector<std::string_view> current{text}, next;
  std::vector<Span> spans;
  for (const Step& step : steps_) {
    next.clear();
    for (const std::string_view piece : current) {
      size_t last = 0;
      if (step.behavior == SplitBehavior::kIsolated && !step.invert) {
        // The common case: every match and every gap is a piece.
        step.regex->for_each_match(piece, [&](size_t start, size_t end) {
          if (start > last) next.push_back(piece.substr(last, start - last));
          next.push_back(piece.substr(start, end - start));
          last = end;
        });
        if (last < piece.size()) next.push_back(piece.substr(last));
        continue;
      }
      spans.clear();
      step.regex->for_each_match(piece, [&](size_t start, size_t end) {
        if (start > last) spans.push_back(Span{last, start, step.invert});
        spans.push_back(Span{start, end, !step.invert});
        last = end;
      });
      if (last < piece.size()) spans.push_back(Span{last, piece.size(), step.invert});
      emit_spans(piece, spans, step.behavior, next);
    }
    current.swap(next);
  }
  pieces.insert(pieces.end(), current.begin(), current.end());
}

PreTokenizer PreTokenizer::from_name(std::string_view name, bool* known) {
  PreTokenizer pre;
  bool found = true;
  if (name == "gpt-2" || name == "gpt2" || name == "mpt" || name == "olmo" || name == "jais" ||
      name == "phi-2" || name == "stablelm" || name == "trillion") {
    pre.add_split(kGpt2Pattern);
  } else if (name == "llama-bpe" || name == "llama3" || name == "llama-v3" || name == "dbrx" ||
             name == "smaug-bpe" || name == "chatglm-bpe") {
    pre.add_split(kLlama3Pattern);
  } else if (name == "gpt-4o" || name == "llama4" || name == "minimax-m2") {
    pre.add_split(kGpt4oPattern);
  } else if (name == "qwen2" || name == "stablelm2" || name == "deepseek-r1-qwen" || name == "hunyuan") {
    pre.add_split(kQwen2Pattern);
  } else if (name == "deepseek-llm") {
    pre.add_split(R"([\r\n])");
    pre.add_split(kDeepseekLetterPattern);
    pre.add_split(kDeepseekPunctPattern);
    pre.add_split(R"(\s+$)");
    pre.add_split(kDeepseekCjkPattern);
    pre.add_split(R"(\p{N}+)");
  } else if (name == "deepseek-coder") {
    pre.add_split(R"([\r\n])");
    pre.add_split(R"(\s?\p{L}+)");
    pre.add_split(R"(\s?\p{P}+)");
    pre.add_split(kDeepseekCjkPattern);
    pre.add_split(R"(\p{N})");
  } else if (name == "falcon") {
    // Punctuation runs (ASCII symbols included), GPT-2's regex, then digit
    // runs cut into threes from the left.
    pre.add_split(R"([\p{P}\$\+<=>\^~\|`]+)");
    pre.add_split(kGpt2Pattern);
    pre.add_split(R"([0-9][0-9][0-9])");
  } else if (name == "starcoder" || name == "refact" || name == "command-r" || name == "smollm" ||
             name == "codeshell" || name == "exaone" || name == "minerva-7b") {
    // Single digits first, then GPT-2's regex.
    pre.add_split(R"(\p{N})");
    pre.add_split(kGpt2Pattern);
  } else if (name == "poro-chat" || name == "bloom" || name == "gpt3-finnish") {
    pre.add_split(R"( ?[^(\s|.,!?…。，、।۔،)]+)");
  } else if (name == "viking") {
    pre.add_split(R"( ?[^(\s|.,!?…。，、।۔،)]+)");
    pre.add_split(R"(\p{N})");
  } else {
    found = false;
    TESSERA_LOG_WARN("tokenizer: unknown pre-tokenizer '{}', using GPT-2's regex", name);
    pre.add_split(kGpt2Pattern);
  }
  if (known != nullptr) *known = found;
  return pre;
}

}  // namespace tessera::tok
