#include "tokenizer/hf_scan.h"

#include <charconv>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "core/mmap_file.h"
#include "tokenizer/unicode.h"

namespace tessera::tok {
namespace {

// A cursor over JSON text that parses the few shapes the reader wants and
// skips (returning the raw text of) any other value.
class JsonScanner {
 public:
  JsonScanner(std::string_view text, const std::string& path) : s_(text), path_(path) {}

  [[noreturn]] void error(std::string_view what) const {
    fail(ErrorCode::kCorruptFile, "{}: not valid JSON: {} at byte {}", path_, what, pos_);
  }

  void ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  // The next non-space character, 0 at the end.
  char peek() {
    ws();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }
  void expect(char c) {
    if (peek() != c) error(fmt::format("expected '{}'", c));
    ++pos_;
  }
  // After an element: true when another follows (a ','), false at `close`.
  bool next(char close) {
    const char c = peek();
    ++pos_;
    if (c == ',') return true;
    if (c != close) error(fmt::format("expected ',' or '{}'", close));
    return false;
  }
  bool at_end() { return peek() == '\0'; }

  std::string string() {
    std::string out;
    string_into(out);
    return out;
  }

  void string_into(std::string& out) {
    expect('"');
    out.clear();
    const size_t start = pos_;
    // The common case: no escapes, copied in one go.
    while (pos_ < s_.size() && s_[pos_] != '"' && s_[pos_] != '\\') {
      if (static_cast<uint8_t>(s_[pos_]) < 0x20) error("control character in a string");
      ++pos_;
    }
    out.assign(s_.substr(start, pos_ - start));
    while (true) {
      if (pos_ >= s_.size()) error("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return;
      if (c != '\\') {
        if (static_cast<uint8_t>(c) < 0x20) error("control character in a string");
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) error("unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.substr(pos_, 2) != "\\u") error("lone high surrogate");
            pos_ += 2;
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) error("bad low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            error("lone low surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default: error("bad escape");
      }
    }
  }

  // An integer, or nullopt (position unchanged) when the value is not one.
  std::optional<int64_t> integer() {
    ws();
    int64_t v = 0;
    const char* begin = s_.data() + pos_;
    const char* end = s_.data() + s_.size();
    const auto [p, ec] = std::from_chars(begin, end, v);
    if (ec == std::errc::result_out_of_range) return INT64_MAX;  // out of any id range
    if (ec != std::errc() || (p < end && (*p == '.' || *p == 'e' || *p == 'E'))) return std::nullopt;
    pos_ += static_cast<size_t>(p - begin);
    return v;
  }

  // Skips one value of any kind; returns its text.
  std::string_view skip_value() {
    ws();
    const size_t start = pos_;
    int depth = 0;
    do {
      const char c = peek();
      if (c == '"') {
        skip_string();
      } else if (c == '{' || c == '[') {
        ++depth;
        ++pos_;
      } else if (c == '}' || c == ']') {
        if (depth == 0) error("unexpected bracket");
        --depth;
        ++pos_;
      } else if (c == ',' || c == ':') {
        if (depth == 0) error("unexpected separator");
        ++pos_;
      } else if (c == '\0') {
        error("unexpected end");
      } else {
        // A number or literal: up to the next structural character.
        while (pos_ < s_.size() && std::string_view(",:]}\" \t\r\n").find(s_[pos_]) == std::string_view::npos) {
          ++pos_;
        }
      }
    } while (depth > 0);
    return s_.substr(start, pos_ - start);
  }

  nlohmann::json parse_value() {
    const std::string_view raw = skip_value();
    try {
      return nlohmann::json::parse(raw);
    } catch (const nlohmann::json::exception& e) {
      fail(ErrorCode::kCorruptFile, "{}: not valid JSON: {}", path_, e.what());
    }
  }

 private:
  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) error("short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else error("bad \\u escape");
    }
    return v;
  }
  void skip_string() {
    ++pos_;  // the opening quote
    while (pos_ < s_.size() && s_[pos_] != '"') pos_ += s_[pos_] == '\\' ? 2 : 1;
    if (pos_ >= s_.size()) error("unterminated string");
    ++pos_;
  }

  std::string_view s_;
  const std::string& path_;
  size_t pos_ = 0;
};

void scan_vocab(JsonScanner& in, const std::string& path, HfTokenizerFile& out) {
  out.has_vocab_object = true;
  in.expect('{');
  if (in.peek() == '}') {
    in.expect('}');
    return;
  }
  do {
    std::string key = in.string();
    in.expect(':');
    const std::optional<int64_t> id = in.integer();
    TESSERA_CHECK(id.has_value(), kCorruptFile, "{}: model.vocab['{}'] is not an integer", path, key);
    out.vocab.emplace_back(std::move(key), *id);
  } while (in.next('}'));
}

void scan_merges(JsonScanner& in, const std::string& path, HfTokenizerFile& out) {
  out.has_merges_array = true;
  in.expect('[');
  if (in.peek() == ']') {
    in.expect(']');
    return;
  }
  std::string s;
  size_t i = 0;
  do {
    auto& m = out.merges.emplace_back();
    if (in.peek() == '"') {
      in.string_into(s);
      const size_t sp = s.size() > 1 ? s.find(' ', 1) : std::string::npos;
      TESSERA_CHECK(sp != std::string::npos && sp + 1 < s.size(), kCorruptFile,
                    "{}: model.merges[{}] = '{}' is not two tokens separated by a space", path, i, s);
      m.first.assign(s, 0, sp);
      m.second.assign(s, sp + 1);
    } else {
      const auto bad = [&] {
        fail(ErrorCode::kCorruptFile, "{}: model.merges[{}] is neither \"a b\" nor [\"a\", \"b\"]", path, i);
      };
      if (in.peek() != '[') bad();
      in.expect('[');
      if (in.peek() != '"') bad();
      in.string_into(m.first);
      if (!in.next(']') || in.peek() != '"') bad();
      in.string_into(m.second);
      if (in.next(']')) bad();
    }
    ++i;
  } while (in.next(']'));
}

}  // namespace

HfTokenizerFile read_hf_tokenizer_file(const std::string& path) {
  const MappedFile file(path);
  const std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
  JsonScanner in(text, path);
  HfTokenizerFile out;
  if (in.peek() != '{') {
    in.parse_value();  // a syntax error is reported as such
    fail(ErrorCode::kCorruptFile, "{}: no \"model\" object (the top level is not an object)", path);
  }
  in.expect('{');
  if (in.peek() != '}') {
    do {
      std::string key = in.string();
      in.expect(':');
      if (key != "model" || in.peek() != '{') {
        out.rest[key] = in.parse_value();
        continue;
      }
      nlohmann::json model = nlohmann::json::object();
      in.expect('{');
      if (in.peek() != '}') {
        do {
          std::string mkey = in.string();
          in.expect(':');
          if (mkey == "vocab" && in.peek() == '{') scan_vocab(in, path, out);
          else if (mkey == "merges" && in.peek() == '[') scan_merges(in, path, out);
          else model[mkey] = in.parse_value();
        } while (in.next('}'));
      } else {
        in.expect('}');
      }
      out.rest["model"] = std::move(model);
    } while (in.next('}'));
  } else {
    in.expect('}');
  }
  if (!in.at_end()) in.error("text after the top-level object");
  return out;
}

}  // namespace tessera::tok
