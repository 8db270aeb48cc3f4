// Tokenizer: special-token splitting, dispatch to the algorithm, pieces and
// streaming detokenization. Loading lives in tokenizer_gguf.cc and
// tokenizer_hf_json.cc, the algorithms in tokenizer_{spm,bpe,wpm}.cc.
#include "tokenizer/tokenizer.h"

#include <xxhash.h>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"

namespace tessera {
namespace tok {

int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = text[i];
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return -1;
    v = v * 16 + d;
  }
  return v;
}

// ---- SpecialMatcher ---------------------------------------------------------

int32_t SpecialMatcher::child(int32_t node, uint8_t byte) const {
  if (node == 0) return root_children_[byte];
  const auto it = children_.find(static_cast<uint64_t>(node) << 8 | byte);
  return it == children_.end() ? 0 : it->second;
}

void SpecialMatcher::add(std::string_view text, int32_t id, bool always) {
  if (text.empty()) return;
  int32_t node = 0;
  for (const char ch : text) {
    const auto byte = static_cast<uint8_t>(ch);
    int32_t next = child(node, byte);
    if (next == 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.push_back(Node{});
      if (node == 0) root_children_[byte] = next;
      else children_.emplace(static_cast<uint64_t>(node) << 8 | byte, next);
    }
    node = next;
  }
  if (nodes_[node].id >= 0) return;  // the same text twice: the first id wins
  nodes_[node] = Node{id, always};
  const auto first = static_cast<uint8_t>(text[0]);
  first_any_[first] = true;
  if (always) first_always_[first] = true;
}

SpecialMatcher::Match SpecialMatcher::find(std::string_view text, size_t from, bool parse_special) const {
  const auto& first = parse_special ? first_any_ : first_always_;
  for (size_t start = from; start < text.size(); ++start) {
    if (!first[static_cast<uint8_t>(text[start])]) continue;
    Match best;
    int32_t node = 0;
    for (size_t i = start; i < text.size(); ++i) {
      node = child(node, static_cast<uint8_t>(text[i]));
      if (node == 0) break;
      const Node& n = nodes_[node];
      if (n.id >= 0 && (n.always || parse_special)) best = Match{start, i - start + 1, n.id};
    }
    if (best.length > 0) return best;
  }
  return Match{};
}

// ---- hash tables ----------------------------------------------------------------

int32_t TextIndex::find(std::string_view s) const {
  if (slots_.empty()) return -1;
  const uint64_t h = XXH3_64bits(s.data(), s.size());
  const auto tag = static_cast<uint32_t>(h >> 32);
  for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
    const Slot& slot = slots_[i];
    if (slot.id < 0) return -1;
    if (slot.tag == tag && (*texts_)[slot.id] == s) return slot.id;
  }
}

void TextIndex::insert(int32_t id) {
  const std::string& s = (*texts_)[id];
  const uint64_t h = XXH3_64bits(s.data(), s.size());
  const auto tag = static_cast<uint32_t>(h >> 32);
  for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
    Slot& slot = slots_[i];
    if (slot.id < 0) {
      slot = Slot{tag, id};
      return;
    }
    if (slot.tag == tag && (*texts_)[slot.id] == s) return;  // first wins
  }
}

uint64_t PairMap::mix(uint64_t k) {
  // splitmix64's finaliser: ids are small and dense, so spread every bit.
  k ^= k >> 30;
  k *= 0xBF58476D1CE4E5B9ull;
  k ^= k >> 27;
  k *= 0x94D049BB133111EBull;
  return k ^ (k >> 31);
}

void PairMap::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap *= 2;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  size_ = 0;
}

void PairMap::insert(int32_t a, int32_t b, Value v) {
  if ((size_ + 1) * 2 > slots_.size()) {
    std::vector<Slot> old = std::move(slots_);
    reserve(std::max<size_t>(16, old.size()));
    for (const Slot& s : old) {
      if (s.key != kEmpty) {
        insert(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xFFFFFFFF), s.value);
      }
    }
  }
  const uint64_t k = key(a, b);
  for (uint64_t i = mix(k) & mask_;; i = (i + 1) & mask_) {
    Slot& slot = slots_[i];
    if (slot.key == kEmpty) {
      slot = Slot{k, v};
      ++size_;
      return;
    }
    if (slot.key == k) return;
  }
}

PairMap::Value PairMap::find(int32_t a, int32_t b) const {
  if (slots_.empty()) return Value{};
  const uint64_t k = key(a, b);
  for (uint64_t i = mix(k) & mask_;; i = (i + 1) & mask_) {
    const Slot& slot = slots_[i];
    if (slot.key == k) return slot.value;
    if (slot.key == kEmpty) return Value{};
  }
}

// ---- Vocab --------------------------------------------------------------------

namespace {

// Texts that end a turn in the chat formats of common models; a control token
// with one of them counts as end of generation (as llama.cpp does).
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>",  "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<EOT>",      "_<EOT>",     "<|end_of_text|>", "<｜end▁of▁sentence｜>",
};
// Candidates for EOT when the metadata names none, most specific first.
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|end_of_turn|>", "<EOT>", "_<EOT>",
};

}  // namespace

void Vocab::finalize() {
  TESSERA_ASSERT(type.size() == text.size());
  TESSERA_ASSERT(score.empty() || score.size() == text.size());
  index.build(text, [](int32_t) { return true; });

  const auto is_control = [&](int32_t id) { return type[id] == TokenType::kControl; };
  if (ids.eot < 0) {
    for (std::string_view t : kEotTexts) {
      const int32_t id = find(t);
      if (id >= 0 && is_control(id)) {
        ids.eot = id;
        break;
      }
    }
  }
  eog.clear();
  for (int32_t id : {ids.eos, ids.eot, ids.eom}) {
    if (id >= 0) eog.push_back(id);
  }
  for (std::string_view t : kEogTexts) {
    const int32_t id = find(t);
    if (id >= 0 && is_control(id)) eog.push_back(id);
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());

  specials = SpecialMatcher{};
  for (int32_t id = 0; id < size(); ++id) {
    const TokenType t = type[id];
    if (t == TokenType::kUserDefined) specials.add(text[id], id, /*always=*/true);
    else if (t == TokenType::kControl || t == TokenType::kUnknown) specials.add(text[id], id, false);
  }
}

}  // namespace tok

// ---- Tokenizer ----------------------------------------------------------------

using tok::TokenType;

Tokenizer::Tokenizer(std::unique_ptr<tok::Vocab> vocab, std::unique_ptr<tok::Model> model)
    : vocab_(std::move(vocab)), model_(std::move(model)) {
  TESSERA_ASSERT(vocab_ && model_);
  vocab_->piece.resize(vocab_->text.size());
  for (int32_t id = 0; id < vocab_->size(); ++id) {
    if (vocab_->type[id] != TokenType::kControl) vocab_->piece[id] = model_->piece(id);
  }
}

Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::string clean;
  if (!tok::is_valid_utf8(text)) {
    clean = tok::sanitize_utf8(text);
    text = clean;
  }
  const tok::Vocab& v = *vocab_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && v.add_bos && v.ids.bos >= 0) out.push_back(v.ids.bos);
  // Special tokens cut the text into stretches the model encodes one by one.
  size_t pos = 0;
  while (pos < text.size()) {
    const tok::SpecialMatcher::Match m = v.specials.find(text, pos, parse_special);
    const size_t end = m.length > 0 ? m.start : text.size();
    if (end > pos) model_->encode(text.substr(pos, end - pos), out);
    if (m.length == 0) break;
    out.push_back(m.id);
    pos = m.start + m.length;
  }
  if (add_special && v.add_eos && v.ids.eos >= 0) out.push_back(v.ids.eos);
  return out;
}

void Tokenizer::append_piece(int32_t id, bool render_special, std::string& out) const {
  TESSERA_CHECK(id >= 0 && id < vocab_->size(), kOutOfRange, "token id {} is outside the vocabulary (n_vocab {})",
                id, vocab_->size());
  const TokenType t = vocab_->type[id];
  if (render_special && (t == TokenType::kControl || t == TokenType::kUnknown)) {
    out += vocab_->text[id];
    return;
  }
  out += vocab_->piece[id];  // "" for control tokens
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  std::string out;
  append_piece(id, render_special, out);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  StreamingDecoder d(*this, render_special);
  std::string out;
  for (const int32_t id : ids) out += d.push(id);
  out += d.flush();
  return out;
}

bool Tokenizer::strips_leading_space() const {
  return vocab_->add_space_prefix && vocab_->kind != tok::ModelKind::kBpe;
}

int32_t Tokenizer::n_vocab() const { return vocab_->size(); }
int32_t Tokenizer::bos_id() const { return vocab_->ids.bos; }
int32_t Tokenizer::eos_id() const { return vocab_->ids.eos; }
int32_t Tokenizer::eot_id() const { return vocab_->ids.eot; }
bool Tokenizer::add_bos() const { return vocab_->add_bos && vocab_->ids.bos >= 0; }
bool Tokenizer::add_eos() const { return vocab_->add_eos && vocab_->ids.eos >= 0; }

bool Tokenizer::is_eog(int32_t id) const {
  return std::binary_search(vocab_->eog.begin(), vocab_->eog.end(), id);
}

bool Tokenizer::is_unused(int32_t id) const {
  return id >= 0 && id < vocab_->size() && vocab_->type[id] == TokenType::kUnused;
}

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < vocab_->size() && vocab_->type[id] == TokenType::kControl;
}

const std::string& Tokenizer::token_text(int32_t id) const {
  TESSERA_CHECK(id >= 0 && id < vocab_->size(), kOutOfRange, "token id {} is outside the vocabulary (n_vocab {})",
                id, vocab_->size());
  return vocab_->text[id];
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  const int32_t id = vocab_->find(text);
  if (id < 0) return std::nullopt;
  return id;
}

std::string_view Tokenizer::kind() const { return model_->kind(); }

// ---- StreamingDecoder -----------------------------------------------------------

StreamingDecoder::StreamingDecoder(const Tokenizer& tok, bool render_special)
    : tok_(tok), render_special_(render_special), strip_pending_(tok.strips_leading_space()) {}

std::string StreamingDecoder::push(int32_t id) {
  piece_.clear();
  tok_.append_piece(id, render_special_, piece_);
  std::string_view bytes = piece_;
  if (strip_pending_ && id != tok_.bos_id()) {
    strip_pending_ = false;
    if (!bytes.empty() && bytes[0] == ' ') bytes.remove_prefix(1);
  }
  std::string out;
  feed(bytes, out);
  return out;
}

void StreamingDecoder::skip(std::span<const int32_t> ids) {
  for (const int32_t id : ids) push(id);
}

std::string StreamingDecoder::flush() {
  std::string out;
  if (bytes_needed_ != 0) tok::append_utf8(out, tok::kReplacementChar);
  code_point_ = 0;
  bytes_needed_ = bytes_seen_ = 0;
  lower_ = 0x80;
  upper_ = 0xBF;
  return out;
}

void StreamingDecoder::feed(std::string_view bytes, std::string& out) {
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto b = static_cast<uint8_t>(bytes[i]);
    if (bytes_needed_ == 0) {
      if (b < 0x80) {
        out += static_cast<char>(b);
      } else if (b >= 0xC2 && b <= 0xDF) {
        bytes_needed_ = 1;
        code_point_ = b & 0x1F;
      } else if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) lower_ = 0xA0;
        if (b == 0xED) upper_ = 0x9F;
        bytes_needed_ = 2;
        code_point_ = b & 0x0F;
      } else if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) lower_ = 0x90;
        if (b == 0xF4) upper_ = 0x8F;
        bytes_needed_ = 3;
        code_point_ = b & 0x07;
      } else {
        tok::append_utf8(out, tok::kReplacementChar);
      }
      continue;
    }
    if (b < lower_ || b > upper_) {
      // The sequence so far is one error; this byte starts afresh.
      code_point_ = 0;
      bytes_needed_ = bytes_seen_ = 0;
      lower_ = 0x80;
      upper_ = 0xBF;
      tok::append_utf8(out, tok::kReplacementChar);
      --i;
      continue;
    }
    lower_ = 0x80;
    upper_ = 0xBF;
    code_point_ = (code_point_ << 6) | (b & 0x3F);
    if (++bytes_seen_ == bytes_needed_) {
      tok::append_utf8(out, code_point_);
      code_point_ = 0;
      bytes_needed_ = bytes_seen_ = 0;
    }
  }
}

}  // namespace tessera
