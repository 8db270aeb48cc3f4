// BPE by merge rank. Byte-level ("gpt2" vocabularies, Hugging Face BPE with a
// ByteLevel pre-tokenizer): the text is split by the pre-tokenizer's regexes;
// each piece starts as one symbol per byte (GPT-2's byte -> printable
// character table), and the adjacent pair with the lowest merge rank merges
// first (ties: leftmost) until no pair has a merge. With byte_fallback
// (SentencePiece-style tokenizer.json, e.g. Gemma): the text is normalized
// (" " -> "▁"), pieces start as one symbol per UTF-8 character, the same
// merges apply, and a character that is no token is emitted as its bytes'
// <0xNN> tokens, as Hugging Face tokenizers and transformers.js do.
#include <algorithm>

#include "core/error.h"
#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"

namespace tessera::tok {
namespace {

class BpeModel final : public Model {
 public:
  BpeModel(const Vocab& vocab, std::span<const std::pair<std::string_view, std::string_view>> merges,
           std::string_view merges_key, PreTokenizer pre, BpeOptions options)
      : vocab_(vocab), pre_(std::move(pre)), options_(std::move(options)) {
    if (options_.byte_fallback) {
      byte_token_.fill(-1);
      for (int32_t id = 0; id < vocab.size(); ++id) {
        const int b = vocab.type[id] == TokenType::kByte ? parse_byte_token(vocab.text[id]) : -1;
        if (b >= 0 && byte_token_[b] < 0) byte_token_[b] = id;
      }
    } else {
      const auto& chars = byte_level_chars();
      for (int b = 0; b < 256; ++b) byte_token_[b] = vocab.find(chars[b]);
    }
    merges_.reserve(merges.size());
    std::string joined;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const auto& [a, b] = merges[rank];
      const int32_t left = vocab.find(a), right = vocab.find(b);
      joined.assign(a);
      joined.append(b);
      const int32_t merged = vocab.find(joined);
      TESSERA_CHECK(left >= 0 && right >= 0 && merged >= 0, kCorruptFile,
                    "{}[{}] '{} {}': '{}' is not in the vocabulary", merges_key, rank, a, b,
                    left < 0 ? a : right < 0 ? b : std::string_view(joined));
      // A later duplicate of a pair keeps the first (lower) rank.
      merges_.insert(left, right, PairMap::Value{static_cast<int32_t>(rank), merged});
    }
  }

  std::string_view kind() const override { return "bpe"; }

  void encode(std::string_view text, std::vector<int32_t>& out) const override {
    // The normalizer, then Hugging Face's ByteLevel add_prefix_space: each
    // stretch between added tokens starts with a space.
    std::string prefixed;
    if (!options_.normalizer.empty()) {
      prefixed = options_.normalizer.apply(text);
      text = prefixed;
    }
    if (!options_.byte_fallback && vocab_.add_space_prefix && !text.empty() && text.front() != ' ') {
      std::string with_space = " ";
      with_space += text;
      prefixed = std::move(with_space);
      text = prefixed;
    }
    std::vector<std::string_view> words;
    if (pre_.empty()) words.push_back(text);
    else pre_.split(text, words);
    Scratch scratch;
    for (const std::string_view w : words) encode_word(w, scratch, out);
  }

  std::string piece(int32_t id) const override {
    const std::string& t = vocab_.text[id];
    const TokenType type = vocab_.type[id];
    if (type == TokenType::kByte) {
      const int b = parse_byte_token(t);
      if (b >= 0) return std::string(1, static_cast<char>(b));
    }
    if (options_.byte_fallback) return options_.decoder.apply(t);
    // Added tokens are stored as their text, not in the byte-level alphabet.
    if (type != TokenType::kNormal && type != TokenType::kUndefined) return t;
    std::string out;
    out.reserve(t.size());
    for (size_t pos = 0; pos < t.size();) {
      const size_t start = pos;
      const int b = code_point_to_byte(next_code_point(t, pos));
      if (b >= 0) out += static_cast<char>(b);
      else out.append(t, start, pos - start);  // outside the alphabet: keep as is
    }
    return out;
  }

 private:
  struct Symbol {
    int32_t id;  // -1: a byte (byte-level) or character (byte_fallback) with no token
    int32_t prev;
    int32_t next;
    uint32_t start;  // bytes of the word this symbol began as (byte_fallback)
    uint32_t length;
  };
  struct Candidate {
    int32_t rank;
    int32_t left;  // symbol positions
    int32_t right;
    int32_t left_id;
    int32_t right_id;
    int32_t merged;
    bool operator>(const Candidate& o) const { return rank > o.rank || (rank == o.rank && left > o.left); }
  };
  // Buffers reused across the words of one encode() call.
  struct Scratch {
    std::vector<Symbol> syms;
    std::vector<Candidate> heap;
    std::string word;
  };

  void push_candidate(Scratch& s, int32_t left, int32_t right) const {
    if (left < 0 || right < 0) return;
    const int32_t a = s.syms[left].id, b = s.syms[right].id;
    if (a < 0 || b < 0) return;
    const PairMap::Value m = merges_.find(a, b);
    if (m.rank < 0) return;
    s.heap.push_back(Candidate{m.rank, left, right, a, b, m.id});
    std::push_heap(s.heap.begin(), s.heap.end(), std::greater<>{});
  }

  void emit(int32_t id, std::vector<int32_t>& out) const {
    if (id >= 0) out.push_back(id);
    else if (vocab_.ids.unk >= 0) out.push_back(vocab_.ids.unk);
  }

  // A character that is no token: its bytes' tokens when all exist, else unk.
  void emit_fallback(std::string_view ch, std::vector<int32_t>& out) const {
    bool all = true;
    for (const char c : ch) all = all && byte_token_[static_cast<uint8_t>(c)] >= 0;
    if (!all) return emit(-1, out);
    for (const char c : ch) out.push_back(byte_token_[static_cast<uint8_t>(c)]);
  }

  // One symbol per byte (byte-level) or per UTF-8 character (byte_fallback).
  void init_symbols(std::string_view w, Scratch& s) const {
    s.syms.clear();
    for (size_t pos = 0; pos < w.size();) {
      const size_t n = options_.byte_fallback ? std::min(utf8_len(static_cast<uint8_t>(w[pos])), w.size() - pos) : 1;
      const int32_t id = options_.byte_fallback ? vocab_.find(w.substr(pos, n)) : byte_token_[static_cast<uint8_t>(w[pos])];
      const auto i = static_cast<int32_t>(s.syms.size());
      s.syms.push_back(Symbol{id, i - 1, i + 1, static_cast<uint32_t>(pos), static_cast<uint32_t>(n)});
      pos += n;
    }
    if (!s.syms.empty()) s.syms.back().next = -1;
  }

  void encode_word(std::string_view w, Scratch& s, std::vector<int32_t>& out) const {
    if (options_.ignore_merges) {
      s.word.clear();
      if (options_.byte_fallback) s.word = w;
      else for (const char c : w) s.word += byte_level_chars()[static_cast<uint8_t>(c)];
      const int32_t id = vocab_.find(s.word);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    init_symbols(w, s);
    const auto n = static_cast<int32_t>(s.syms.size());
    if (n == 0) return;
    s.heap.clear();
    for (int32_t i = 0; i + 1 < n; ++i) push_candidate(s, i, i + 1);
    while (!s.heap.empty()) {
      std::pop_heap(s.heap.begin(), s.heap.end(), std::greater<>{});
      const Candidate c = s.heap.back();
      s.heap.pop_back();
      Symbol& l = s.syms[c.left];
      // Stale when either side has merged since: a symbol's id only changes
      // by growing, and a merged-away right symbol is no longer l.next.
      if (l.id != c.left_id || l.next != c.right || s.syms[c.right].id != c.right_id) continue;
      Symbol& r = s.syms[c.right];
      l.id = c.merged;
      l.next = r.next;
      if (r.next >= 0) s.syms[r.next].prev = c.left;
      r.id = -2;
      r.prev = r.next = -1;
      push_candidate(s, l.prev, c.left);
      push_candidate(s, c.left, l.next);
    }
    for (int32_t i = 0; i >= 0; i = s.syms[i].next) {
      const Symbol& sym = s.syms[i];
      // Only an unmerged symbol can lack a token: merges yield tokens.
      if (sym.id < 0 && options_.byte_fallback) emit_fallback(w.substr(sym.start, sym.length), out);
      else emit(sym.id, out);
    }
  }

  const Vocab& vocab_;
  PreTokenizer pre_;
  BpeOptions options_;
  std::array<int32_t, 256> byte_token_{};  // per byte: its byte-level or <0xNN> token
  PairMap merges_;  // (left id, right id) -> rank, merged id
};

}  // namespace

std::string Replacements::apply(std::string_view text) const {
  std::string cur(text), next;
  for (const Step& step : steps) {
    if (step.form != NormalForm::kNone) {
      cur = normalize(cur, step.form);
      continue;
    }
    if (step.prepend) {
      if (!cur.empty()) cur.insert(0, step.to);
      continue;
    }
    if (step.from.empty()) continue;
    next.clear();
    for (size_t pos = 0;;) {
      const size_t hit = cur.find(step.from, pos);
      if (hit == std::string::npos) {
        next.append(cur, pos, std::string::npos);
        break;
      }
      next.append(cur, pos, hit - pos);
      next += step.to;
      pos = hit + step.from.size();
    }
    cur.swap(next);
  }
  return cur;
}

bool Replacements::only_forms() const {
  return std::all_of(steps.begin(), steps.end(), [](const Step& s) { return s.form != NormalForm::kNone; });
}

std::unique_ptr<Model> make_bpe_model(const Vocab& vocab,
                                      std::span<const std::pair<std::string_view, std::string_view>> merges,
                                      std::string_view merges_key, PreTokenizer pre, BpeOptions options) {
  return std::make_unique<BpeModel>(vocab, merges, merges_key, std::move(pre), options);
}

}  // namespace tessera::tok
