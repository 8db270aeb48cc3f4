// A targeted reader of Hugging Face tokenizer.json files: model.vocab and
// model.merges (nearly all of a 9-33 MB file) are scanned straight into
// strings, without building a JSON DOM of hundreds of thousands of nodes;
// every other value is handed to nlohmann::json, as small documents.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::tok {

struct HfTokenizerFile {
  // model.vocab in file order, when it is a JSON object (BPE, WordPiece);
  // an entry's value that is not an integer is an error naming it.
  bool has_vocab_object = false;
  std::vector<std::pair<std::string, int64_t>> vocab;
  // model.merges, when it is an array of "a b" strings or ["a", "b"] pairs.
  bool has_merges_array = false;
  std::vector<std::pair<std::string, std::string>> merges;
  // The rest of the file: every other top-level value, and "model" with every
  // other key of it (vocab / merges too when they are of another shape).
  nlohmann::json rest = nlohmann::json::object();
};

// Throws Error(kIo) when unreadable, Error(kCorruptFile) naming the file and
// the byte offset when it is not valid JSON or the top level is no object.
HfTokenizerFile read_hf_tokenizer_file(const std::string& path);

}  // namespace tessera::tok
