// Internals shared by the tokenizer implementations: the vocabulary, the
// special-token matcher, and the interface each algorithm (SPM, BPE, WPM)
// implements. Not part of the public API (see tokenizer/tokenizer.h).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/normalize.h"

namespace tessera::tok {

// GGUF tokenizer.ggml.token_type values.
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

enum class ModelKind { kSpm, kBpe, kWpm };

struct SpecialIds {
  int32_t bos = -1;
  int32_t eos = -1;
  int32_t eot = -1;
  int32_t eom = -1;
  int32_t unk = -1;
  int32_t pad = -1;
  int32_t sep = -1;
  int32_t cls = -1;
  int32_t mask = -1;
};

// Finds special-token texts in input: leftmost-longest, as Hugging Face's
// added-token splitter does. User-defined tokens always match; control and
// unknown-type tokens only when parse_special.
class SpecialMatcher {
 public:
  struct Match {
    size_t start = 0;
    size_t length = 0;
    int32_t id = -1;
  };
  void add(std::string_view text, int32_t id, bool always);
  // The first match at or after `from`; length 0 when there is none.
  Match find(std::string_view text, size_t from, bool parse_special) const;

 private:
  struct Node {
    int32_t id = -1;
    bool always = false;
  };
  int32_t child(int32_t node, uint8_t byte) const;
  std::vector<Node> nodes_{Node{}};                 // [0] is the root
  std::array<int32_t, 256> root_children_{};        // 0 = none
  std::unordered_map<uint64_t, int32_t> children_;  // (node << 8 | byte) -> node
  std::array<bool, 256> first_always_{};            // a token that always matches starts with this byte
  std::array<bool, 256> first_any_{};
};

// Open-addressing index from token text to id over a vocabulary's strings:
// one probe into a flat array in the common case, no per-node allocation (the
// hot lookup of every algorithm). The strings must outlive the index.
class TextIndex {
 public:
  // Indexes texts[id] for every id where keep(id); of equal texts the first wins.
  template <class Keep>
  void build(const std::vector<std::string>& texts, Keep keep) {
    texts_ = &texts;
    size_t cap = 16;
    while (cap < texts.size() * 2) cap *= 2;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    for (size_t id = 0; id < texts.size(); ++id) {
      if (keep(static_cast<int32_t>(id))) insert(static_cast<int32_t>(id));
    }
  }
  int32_t find(std::string_view s) const;

 private:
  struct Slot {
    uint32_t tag = 0;  // high hash bits: most mismatches never touch the string
    int32_t id = -1;
  };
  void insert(int32_t id);
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  const std::vector<std::string>* texts_ = nullptr;
};

// Open-addressing map from a pair of token ids to a merge (rank, result).
class PairMap {
 public:
  struct Value {
    int32_t rank = -1;  // -1: absent
    int32_t id = -1;
  };
  void reserve(size_t n);
  // Keeps the first value given for a pair.
  void insert(int32_t a, int32_t b, Value v);
  Value find(int32_t a, int32_t b) const;

 private:
  struct Slot {
    uint64_t key = kEmpty;
    Value value;
  };
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t key(int32_t a, int32_t b) {
    return static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 | static_cast<uint32_t>(b);
  }
  static uint64_t mix(uint64_t k);
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  size_t size_ = 0;
};

struct Vocab {
  ModelKind kind = ModelKind::kSpm;
  std::vector<std::string> text;  // raw entries: "▁the", "Ġthe", "<0x0A>", "<s>"
  std::vector<float> score;       // [n_vocab], or empty (all 0)
  std::vector<TokenType> type;    // [n_vocab]
  SpecialIds ids;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;

  // Filled by finalize():
  TextIndex index;                                       // text -> id (first wins)
  std::vector<int32_t> eog;                              // sorted ids
  std::vector<std::string> piece;                        // bytes each token stands for
  SpecialMatcher specials;

  int32_t size() const { return static_cast<int32_t>(text.size()); }
  float score_of(int32_t id) const { return score.empty() ? 0.0f : score[id]; }
  int32_t find(std::string_view s) const { return index.find(s); }
  // Builds the index, the end-of-generation set and the special matcher;
  // guesses EOT from well-known texts when the metadata names none.
  void finalize();
};

// One tokenization algorithm over a Vocab that outlives it.
class Model {
 public:
  virtual ~Model() = default;
  virtual std::string_view kind() const = 0;
  // Appends the ids of `text`: valid UTF-8 holding no special token, which
  // begins the input or follows a special token (so SentencePiece prefixes
  // it with a space, as llama.cpp does after every special token).
  virtual void encode(std::string_view text, std::vector<int32_t>& out) const = 0;
  // The bytes a non-control token stands for in text.
  virtual std::string piece(int32_t id) const = 0;
};

// Pre-tokenizer split behaviours (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

class Regex;

// A sequence of regex splits, each applied to every piece the previous one
// produced (Hugging Face's Sequence of Split pre-tokenizers).
class PreTokenizer {
 public:
  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // The splits tokenizer.ggml.pre names; an unknown name gets GPT-2's regex
  // and a warning. `known` (optional) says whether the name was recognised.
  static PreTokenizer from_name(std::string_view name, bool* known = nullptr);
  // Throws Error(kCorruptFile) when PCRE2 rejects the pattern.
  void add_split(const std::string& pattern, SplitBehavior behavior = SplitBehavior::kIsolated,
                 bool invert = false);
  bool empty() const { return steps_.empty(); }
  // Appends the pieces of `text` (views into it) to `pieces`.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

  // The steps as given to add_split: two pre-tokenizers with equal lists
  // split every text alike.
  struct SplitSpec {
    std::string pattern;
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool operator==(const SplitSpec&) const = default;
  };
  std::vector<SplitSpec> splits() const;

 private:
  struct Step;
  std::vector<Step> steps_;
};

// Regex sources of the named pre-tokenizers (also used by tokenizer.json's
// ByteLevel use_regex).
extern const char* const kGpt2Pattern;

// A regex that matches `s` literally (tokenizer.json's {"String": ...} patterns).
std::string quote_regex(std::string_view s);

// String replacements in order (tokenizer.json's Replace normalizer or
// decoder with a String pattern; Prepend is a replacement of the start; the
// NFC / NFD / NFKC / NFKD normalizers are a step with a `form`).
struct Replacements {
  struct Step {
    bool prepend = false;  // `to` goes in front of non-empty text; `from` unused
    std::string from;
    std::string to;
    NormalForm form = NormalForm::kNone;  // when set, the step normalizes; the rest is unused
  };
  std::vector<Step> steps;
  bool empty() const { return steps.empty(); }
  // True when every step is a normalization form (allowed on a byte-level BPE).
  bool only_forms() const;
  std::string apply(std::string_view text) const;
};

struct BpeOptions {
  bool ignore_merges = false;  // a word that is itself a token skips merging (Llama 3)
  // SentencePiece-style BPE (tokenizer.json with byte_fallback, e.g. Gemma):
  // words start as one symbol per UTF-8 character instead of GPT-2's
  // byte-level alphabet, and a character that is no token (nor part of a
  // merge) becomes its bytes' <0xNN> tokens (the vocabulary's kByte entries).
  bool byte_fallback = false;
  Replacements normalizer;  // applied to each stretch before pre-tokenizing
  Replacements decoder;     // applied to the text of every non-byte token
};

// A tokenizer.json read and checked, before its algorithm is built: what
// Tokenizer::from_hf_json runs, and what hf_tokenizer_gguf_metadata writes.
struct HfTokenizerParts {
  std::unique_ptr<Vocab> vocab;  // finalized
  std::vector<std::pair<std::string, std::string>> merges;  // model.merges, rank order
  PreTokenizer pre;
  BpeOptions options;
  bool byte_level_prefix_space = false;  // ByteLevel's add_prefix_space
};
// Throws as Tokenizer::from_hf_json does.
HfTokenizerParts read_hf_tokenizer(const std::string& path);

std::unique_ptr<Model> make_spm_model(const Vocab& vocab);
// `merges` in rank order, each a pair of token texts whose concatenation is a
// token; throws Error(kCorruptFile) naming `merges_key` otherwise.
std::unique_ptr<Model> make_bpe_model(const Vocab& vocab,
                                      std::span<const std::pair<std::string_view, std::string_view>> merges,
                                      std::string_view merges_key, PreTokenizer pre, BpeOptions options);
std::unique_ptr<Model> make_wpm_model(const Vocab& vocab);

// Parses "<0xNN>"; -1 when `text` is not of that form.
int parse_byte_token(std::string_view text);

}  // namespace tessera::tok
