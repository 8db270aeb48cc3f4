// SentencePiece BPE ("llama" vocabularies): the text, with spaces written as
// "▁" and one "▁" in front, starts as one symbol per UTF-8 character; the
// adjacent pair whose concatenation is a piece with the highest score merges
// first (ties: leftmost), until no pair is a piece. A character that is no
// piece falls back to its bytes' <0xNN> tokens.
#include <algorithm>

#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"

namespace tessera::tok {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

class SpmModel final : public Model {
 public:
  explicit SpmModel(const Vocab& vocab) : vocab_(vocab) {
    // SentencePiece forms pieces only from normal, user-defined and unused
    // entries; control, unknown and byte tokens never come out of merging.
    const auto mergeable = [&](int32_t id) {
      const TokenType t = vocab.type[id];
      return t == TokenType::kNormal || t == TokenType::kUserDefined || t == TokenType::kUnused ||
             t == TokenType::kUndefined;
    };
    pieces_.build(vocab.text, mergeable);
    byte_token_.fill(-1);
    for (int32_t id = 0; id < vocab.size(); ++id) {
      if (vocab.type[id] == TokenType::kByte) {
        const int b = parse_byte_token(vocab.text[id]);
        if (b >= 0 && byte_token_[b] < 0) byte_token_[b] = id;
      }
      // A piece with "▁" after some other character would span two words.
      if (mergeable(id)) {
        std::string_view t = vocab.text[id];
        while (t.substr(0, kSpmSpace.size()) == kSpmSpace) t.remove_prefix(kSpmSpace.size());
        if (t.find(kSpmSpace) != std::string_view::npos) split_words_ = false;
      }
    }
  }

  std::string_view kind() const override { return "spm"; }

  void encode(std::string_view text, std::vector<int32_t>& out) const override {
    std::string norm;
    norm.reserve(text.size() + text.size() / 4 + 3);
    if (vocab_.add_space_prefix) norm += kSpmSpace;
    for (const char c : text) {
      if (c == ' ') norm += kSpmSpace;
      else norm += c;
    }
    Scratch scratch;
    if (!split_words_) {
      merge(norm, scratch, out);
      return;
    }
    // No piece holds "▁" after another character, so no merge crosses the
    // start of a "▁" run that follows a non-"▁": merging each such word on
    // its own gives the same tokens as merging the whole text, with small
    // queues instead of one the size of the text.
    size_t word = 0;
    for (size_t pos = kSpmSpace.size(); pos + kSpmSpace.size() <= norm.size(); ++pos) {
      if (norm.compare(pos, kSpmSpace.size(), kSpmSpace) == 0 &&
          norm.compare(pos - kSpmSpace.size(), kSpmSpace.size(), kSpmSpace) != 0) {
        merge(std::string_view(norm).substr(word, pos - word), scratch, out);
        word = pos;
      }
    }
    merge(std::string_view(norm).substr(word), scratch, out);
  }

  std::string piece(int32_t id) const override {
    const std::string& t = vocab_.text[id];
    if (vocab_.type[id] == TokenType::kByte) {
      const int b = parse_byte_token(t);
      if (b >= 0) return std::string(1, static_cast<char>(b));
    }
    if (vocab_.type[id] == TokenType::kUnknown) return "\xE2\x96\x85";  // "▅": something was lost
    if (vocab_.type[id] == TokenType::kUserDefined) return t;
    std::string out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, kSpmSpace.size(), kSpmSpace) == 0) {
        out += ' ';
        i += kSpmSpace.size();
      } else {
        out += t[i++];
      }
    }
    return out;
  }

 private:
  struct Symbol {
    uint32_t start;
    uint32_t length;  // 0 once merged into its left neighbour
    int32_t prev;
    int32_t next;
  };
  struct Bigram {
    float score;
    int32_t left;
    int32_t right;
    uint32_t length;  // of the merged piece; stale when the symbols changed
  };
  struct Lower {
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };

  // Buffers reused across the words of one encode() call.
  struct Scratch {
    std::vector<Symbol> syms;
    std::vector<Bigram> heap;
  };

  void merge(std::string_view s, Scratch& scratch, std::vector<int32_t>& out) const {
    std::vector<Symbol>& syms = scratch.syms;
    syms.clear();
    for (size_t pos = 0; pos < s.size();) {
      const size_t n = std::min(utf8_len(static_cast<uint8_t>(s[pos])), s.size() - pos);
      const auto i = static_cast<int32_t>(syms.size());
      syms.push_back(Symbol{static_cast<uint32_t>(pos), static_cast<uint32_t>(n), i - 1, i + 1});
      pos += n;
    }
    if (syms.empty()) return;
    syms.back().next = -1;

    std::vector<Bigram>& heap = scratch.heap;
    heap.clear();
    const auto try_add = [&](int32_t left, int32_t right) {
      if (left < 0 || right < 0) return;
      const uint32_t len = syms[left].length + syms[right].length;
      const int32_t id = pieces_.find(s.substr(syms[left].start, len));
      if (id < 0) return;
      heap.push_back(Bigram{vocab_.score_of(id), left, right, len});
      std::push_heap(heap.begin(), heap.end(), Lower{});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) try_add(i - 1, i);

    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), Lower{});
      const Bigram top = heap.back();
      heap.pop_back();
      Symbol& l = syms[top.left];
      Symbol& r = syms[top.right];
      if (l.length == 0 || r.length == 0 || l.length + r.length != top.length) continue;
      l.length += r.length;
      r.length = 0;
      l.next = r.next;
      if (r.next >= 0) syms[r.next].prev = top.left;
      try_add(l.prev, top.left);
      try_add(top.left, l.next);
    }

    for (int32_t i = 0; i >= 0; i = syms[i].next) {
      const std::string_view p = s.substr(syms[i].start, syms[i].length);
      const int32_t id = pieces_.find(p);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      // Byte fallback when every byte has its token; otherwise one <unk>.
      bool all_bytes = true;
      for (const char c : p) all_bytes = all_bytes && byte_token_[static_cast<uint8_t>(c)] >= 0;
      if (all_bytes) {
        for (const char c : p) out.push_back(byte_token_[static_cast<uint8_t>(c)]);
      } else if (vocab_.ids.unk >= 0) {
        out.push_back(vocab_.ids.unk);
      }
    }
  }

  const Vocab& vocab_;
  TextIndex pieces_;                     // mergeable entries
  std::array<int32_t, 256> byte_token_;  // <0xNN> ids, -1 when absent
  bool split_words_ = true;              // see encode()
};

}  // namespace

std::unique_ptr<Model> make_spm_model(const Vocab& vocab) { return std::make_unique<SpmModel>(vocab); }

}  // namespace tessera::tok
