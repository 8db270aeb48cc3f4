// Tokenizers: text <-> token ids for the vocabularies GGUF files and Hugging
// Face tokenizer.json files describe.
//
//   SentencePiece-style BPE ("llama"): score-driven bigram merges over UTF-8
//     characters, "▁" for spaces, <0xNN> byte fallback.
//   Byte-level BPE ("gpt2"): GPT-2's byte<->unicode mapping, merge ranks, and
//     the pre-tokenizer regexes (PCRE2) that tokenizer.ggml.pre names.
//   WordPiece ("bert"): BERT normalisation, greedy longest-match sub-words.
//
// Special tokens: user-defined tokens (GGUF token_type 4, non-special added
// tokens of tokenizer.json) are always recognised in text, as Hugging Face and
// llama.cpp do; control tokens (type 3, e.g. "<|im_start|>", "<s>") only when
// encode() is asked to parse_special. Matching is leftmost-longest. Each
// stretch of text between special tokens is tokenized on its own (SPM gives
// each its "▁" prefix, as llama.cpp does).
//
// Round trip: decode(encode(s)) == s for valid UTF-8 with SPM (byte fallback)
// and byte-level BPE. WordPiece is lossy (case, accents, whitespace, [UNK]).
// tokenizer.json normalizers applied: NFC, NFD, NFKC, NFKD (Unicode 15.0
// tables, tokenizer/normalize.h), and Replace/Prepend for a
// byte_fallback BPE; any other normalizer, and added tokens'
// lstrip/rstrip/single_word flags, are refused at load.
//
// A Tokenizer is immutable after construction: every const method may be
// called from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "format/gguf.h"

namespace tessera {

namespace tok {
struct Vocab;
class Model;
}  // namespace tok

class Tokenizer {
 public:
  // From GGUF tokenizer.ggml.* metadata. Throws Error(kCorruptFile) naming the
  // key on missing or invalid data (token ids out of range, array lengths that
  // differ from tokenizer.ggml.tokens, unknown model type, bad merges).
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& file);
  // From a Hugging Face tokenizer.json (byte-level BPE, or BPE with
  // byte_fallback). bos/eos come from a tokenizer_config.json beside it when
  // present; whether BOS/EOS are added from the post-processor's
  // TemplateProcessing, else from the config's add_bos_token/add_eos_token.
  // Throws Error(kIo) when unreadable, Error(kCorruptFile) when malformed or
  // of an unsupported kind.
  static std::unique_ptr<Tokenizer> from_hf_json(const std::string& path);

  Tokenizer(std::unique_ptr<tok::Vocab> vocab, std::unique_ptr<tok::Model> model);
  virtual ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_special: prepend BOS (and append EOS) as the model's metadata says.
  // parse_special: control tokens written in the text map to their ids.
  // Invalid UTF-8 in `text` is tokenized as U+FFFD.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special = false) const;

  // The bytes one token stands for. Control tokens give "" unless
  // render_special. Throws Error(kOutOfRange) for an id outside the vocabulary.
  std::string token_to_piece(int32_t id, bool render_special = false) const;
  // Concatenated pieces, with SentencePiece's added leading space removed and
  // invalid UTF-8 replaced by U+FFFD; equal to feeding a StreamingDecoder.
  std::string decode(std::span<const int32_t> ids, bool render_special = false) const;

  int32_t n_vocab() const;
  int32_t bos_id() const;  // -1 when the model has none
  int32_t eos_id() const;
  int32_t eot_id() const;
  bool add_bos() const;
  bool add_eos() const;
  bool is_eog(int32_t id) const;  // end of generation: EOS, EOT, EOM and similar
  bool is_control(int32_t id) const;
  // An entry the vocabulary declares unused (GGUF token type 5: padding
  // rows such as "[PAD151670]", reserved slots): never generated.
  bool is_unused(int32_t id) const;
  const std::string& token_text(int32_t id) const;  // raw vocabulary entry
  std::optional<int32_t> find_token(std::string_view text) const;  // exact lookup

  // "spm", "bpe" or "wpm".
  std::string_view kind() const;

 private:
  friend class StreamingDecoder;
  // Appends the piece of `id` (checked) to `out`.
  void append_piece(int32_t id, bool render_special, std::string& out) const;
  // Whether decoding drops one leading space of the first piece (SentencePiece
  // and WordPiece mark word starts with a space the text did not have).
  bool strips_leading_space() const;

  std::unique_ptr<tok::Vocab> vocab_;
  std::unique_ptr<tok::Model> model_;
};

// The GGUF tokenizer.ggml.* metadata under which Tokenizer::from_gguf, and
// llama.cpp, tokenize as the tokenizer.json at `path` (with the
// tokenizer_config.json beside it) does: byte-level BPE as "gpt2" (tokens,
// token types, merges, and the tokenizer.ggml.pre name whose regex splits
// are the file's), BPE with byte_fallback as "llama" (tokens, types, and
// scores that reproduce the merge ranks, tokenizer_hf_gguf.cc), and for both
// the bos / eos / unk / padding ids, add_bos_token / add_eos_token. The
// tokens are padded to `n_vocab` (the model's embedding rows; 0: no padding)
// with unused "[PAD<id>]" entries, as llama.cpp's converter pads them.
// Non-special added tokens holding "▁" in a "llama" tokenizer (Gemma's
// whitespace runs) are written as normal tokens, so they decode to spaces.
// Throws Error(kCorruptFile) naming what a GGUF cannot express (a
// pre-tokenizer llama.cpp does not name, normalizers other than SentencePiece's
// space marks, ...): a file that would tokenize differently is refused.
std::vector<std::pair<std::string, gguf::Value>> hf_tokenizer_gguf_metadata(const std::string& path, int64_t n_vocab);

// Streaming-safe detokenization: push ids one at a time and get back only
// complete UTF-8 characters (a character split over byte-fallback tokens comes
// out when its last byte arrives). flush() returns what remains, invalid bytes
// as U+FFFD. The concatenation of every push() and the final flush() equals
// Tokenizer::decode() of the same ids.
//
// A completion's text is decode(prompt + output) minus decode(prompt): the
// output continues the prompt's text, so SentencePiece's word-start space of
// the first generated word is kept (" was", not "was"), as llama-server and
// vLLM return it. skip(prompt) feeds ids whose text the caller already has;
// pushes after it give that continuation. Copyable: parallel samples fork a
// primed decoder.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tok, bool render_special = false);
  std::string push(int32_t id);
  std::string flush();
  // Consumes ids as context (their text is dropped, their decoder state kept).
  void skip(std::span<const int32_t> ids);

 private:
  void feed(std::string_view bytes, std::string& out);

  const Tokenizer& tok_;
  bool render_special_;
  bool strip_pending_;  // the next non-BOS piece loses one leading space
  // UTF-8 decoder state (the WHATWG algorithm, so errors are counted the same
  // way whether bytes arrive at once or one by one).
  uint32_t code_point_ = 0;
  int bytes_needed_ = 0;
  int bytes_seen_ = 0;
  uint8_t lower_ = 0x80;
  uint8_t upper_ = 0xBF;
  std::string piece_;  // scratch
};

}  // namespace tessera
