// WordPiece ("bert" vocabularies), as BERT's uncased tokenizer: control
// characters dropped, whitespace unified, CJK ideographs and punctuation made
// words of their own, lowercase with accents stripped; then each word is cut
// greedily into the longest vocabulary entries from the left, and a word with
// any uncuttable rest becomes [UNK]. llama.cpp's GGUF conversion writes a
// word-initial piece as "▁piece" and a continuation "##piece" as "piece".
//
// Not lossless: case, accents, whitespace and unknown words are gone.
#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"

namespace tessera::tok {
namespace {

constexpr std::string_view kWpmSpace = "\xE2\x96\x81";  // U+2581 "▁"
// BERT's max_input_chars_per_word: a longer word is [UNK] without trying.
constexpr size_t kMaxWordChars = 100;

class WpmModel final : public Model {
 public:
  explicit WpmModel(const Vocab& vocab) : vocab_(vocab) {}

  std::string_view kind() const override { return "wpm"; }

  void encode(std::string_view text, std::vector<int32_t>& out) const override {
    // Normalise and split into words in one pass: a word ends at whitespace
    // and around every punctuation character or CJK ideograph.
    std::string word;
    size_t word_chars = 0;
    const auto flush = [&] {
      if (!word.empty()) encode_word(word, word_chars, out);
      word.clear();
      word_chars = 0;
    };
    std::string folded;
    for (size_t pos = 0; pos < text.size();) {
      const uint32_t cp = next_code_point(text, pos);
      if (cp == 0 || cp == kReplacementChar || bert_is_control(cp)) continue;
      if (bert_is_whitespace(cp) || is_other_white_space(cp)) {
        flush();
        continue;
      }
      if (bert_is_cjk(cp)) {
        flush();
        append_utf8(word, cp);
        word_chars = 1;
        flush();
        continue;
      }
      folded.clear();
      bert_lower_strip_accents(cp, folded);
      // Folding can give several characters (e.g. a ligature); punctuation is
      // judged on each, as the pre-tokenizer sees the normalised text.
      for (size_t i = 0; i < folded.size();) {
        const size_t start = i;
        const uint32_t c = next_code_point(folded, i);
        if (bert_is_punctuation(c)) {
          flush();
          word.append(folded, start, i - start);
          word_chars = 1;
          flush();
        } else {
          word.append(folded, start, i - start);
          ++word_chars;
        }
      }
    }
    flush();
  }

  std::string piece(int32_t id) const override {
    const std::string& t = vocab_.text[id];
    if (vocab_.type[id] != TokenType::kNormal) return t;
    if (t.compare(0, kWpmSpace.size(), kWpmSpace) != 0) return t;
    std::string out(1, ' ');
    out.append(t, kWpmSpace.size());
    return out;
  }

 private:
  // White_Space characters that are not \t \n \r or Zs (line and paragraph
  // separators); the pre-tokenizer splits on them too.
  static bool is_other_white_space(uint32_t cp) { return cp == 0x2028 || cp == 0x2029; }

  void encode_word(const std::string& word, size_t n_chars, std::vector<int32_t>& out) const {
    const size_t mark = out.size();
    bool ok = n_chars <= kMaxWordChars;
    std::string key;
    for (size_t start = 0; ok && start < word.size();) {
      // Longest match first: shrink `end` one character at a time.
      size_t end = word.size();
      int32_t id = -1;
      while (end > start) {
        key.clear();
        if (start == 0) key = kWpmSpace;
        key.append(word, start, end - start);
        id = vocab_.find(key);
        if (id >= 0) break;
        do {
          --end;
        } while (end > start && (static_cast<uint8_t>(word[end]) & 0xC0) == 0x80);
      }
      if (id < 0) {
        ok = false;
        break;
      }
      out.push_back(id);
      start = end;
    }
    if (!ok) {
      out.resize(mark);
      if (vocab_.ids.unk >= 0) out.push_back(vocab_.ids.unk);
    }
  }

  const Vocab& vocab_;
};

}  // namespace

std::unique_ptr<Model> make_wpm_model(const Vocab& vocab) { return std::make_unique<WpmModel>(vocab); }

}  // namespace tessera::tok
