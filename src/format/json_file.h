// Reading a whole JSON file (Hugging Face config.json, tokenizer.json, ...)
// with one error naming the file.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tessera {

// Throws Error(kIo) when unreadable, Error(kCorruptFile) when not JSON.
nlohmann::json read_json_file(const std::string& path);

}  // namespace tessera
