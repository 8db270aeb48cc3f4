#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"

namespace tessera::grammar {

namespace {

using Json = nlohmann::ordered_json;

// ---------------------------------------------------------------- regexes

RegexPtr lit(std::string_view s) { return re::literal(s); }
RegexPtr cls(std::initializer_list<std::pair<uint32_t, uint32_t>> ranges) {
  CodepointSet s;
  for (const auto& [a, b] : ranges) s.add(a, b);
  return re::set(s);
}
RegexPtr digit() { return cls({{'0', '9'}}); }
RegexPtr hexdig() { return cls({{'0', '9'}, {'a', 'f'}, {'A', 'F'}}); }

}  // namespace

// Characters a JSON string holds as they are.
CodepointSet json_plain_chars() {
  CodepointSet bad = CodepointSet::range(0, 0x1F);
  bad.add('"', '"');
  bad.add('\\', '\\');
  return bad.complement();
}
// One character of a JSON string: plain, or an escape (no lone surrogates).
RegexPtr json_string_char() {
  const RegexPtr hex4 = re::alt({re::seq({cls({{'0', '9'}, {'a', 'c'}, {'A', 'C'}, {'e', 'f'}, {'E', 'F'}}),
                                          re::repeat(hexdig(), 3, 3)}),
                                 re::seq({cls({{'d', 'd'}, {'D', 'D'}}), cls({{'0', '7'}}), re::repeat(hexdig(), 2, 2)})});
  const RegexPtr escape = re::seq({lit("\\"), re::alt({cls({{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'},
                                                             {'f', 'f'}, {'n', 'n'}, {'r', 'r'}, {'t', 't'}}),
                                                        re::seq({lit("u"), hex4})})});
  return re::alt({re::set(json_plain_chars()), escape});
}

namespace {


RegexPtr quoted(RegexPtr content) { return re::seq({lit("\""), std::move(content), lit("\"")}); }

// Equal-width decimal strings lo..hi (leading zeros allowed).
RegexPtr fixed_width(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return re::empty();
  const size_t n = lo.size() - 1;
  if (lo[0] == hi[0]) return re::seq({lit(lo.substr(0, 1)), fixed_width(lo.substr(1), hi.substr(1))});
  const std::string zeros(n, '0'), nines(n, '9');
  if (lo.substr(1) == zeros && hi.substr(1) == nines) {
    return re::seq({cls({{static_cast<uint32_t>(lo[0]), static_cast<uint32_t>(hi[0])}}), re::repeat(digit(), static_cast<int32_t>(n), static_cast<int32_t>(n))});
  }
  std::vector<RegexPtr> alts;
  alts.push_back(re::seq({lit(lo.substr(0, 1)), fixed_width(lo.substr(1), nines)}));
  if (hi[0] - lo[0] > 1) {
    alts.push_back(re::seq({cls({{static_cast<uint32_t>(lo[0] + 1), static_cast<uint32_t>(hi[0] - 1)}}),
                            re::repeat(digit(), static_cast<int32_t>(n), static_cast<int32_t>(n))}));
  }
  alts.push_back(re::seq({lit(hi.substr(0, 1)), fixed_width(zeros, hi.substr(1))}));
  return re::alt(std::move(alts));
}

// Non-negative integers in [a, b] without leading zeros; b < 0: unbounded
// (in at most max_digits digits when that is >= 0).
RegexPtr natural_range(int64_t a, int64_t b, int32_t max_digits = -1) {
  const std::string as = std::to_string(a);
  std::vector<RegexPtr> alts;
  const size_t last = b < 0 ? as.size() : std::to_string(b).size();
  for (size_t d = as.size(); d <= last; ++d) {
    std::string lo = as;
    if (d != as.size()) {
      lo.assign(d, '0');
      lo[0] = '1';
    }
    const std::string hi = (b >= 0 && d == last) ? std::to_string(b) : std::string(d, '9');
    alts.push_back(fixed_width(lo, hi));
  }
  if (b < 0) {
    const auto from = static_cast<int32_t>(as.size());
    if (max_digits < 0 || max_digits > from) {
      alts.push_back(re::seq({cls({{'1', '9'}}), re::repeat(digit(), from, max_digits < 0 ? -1 : max_digits - 1)}));
    }
  }
  return re::alt(std::move(alts));
}

RegexPtr fraction() { return re::opt(re::seq({lit("."), re::plus(digit())})); }
RegexPtr zero_fraction() { return re::opt(re::seq({lit("."), re::plus(lit("0"))})); }

// Magnitudes in [a, b] (b < 0: unbounded) as decimals without exponent.
RegexPtr decimal_range(int64_t a, int64_t b) {
  if (b < 0) return re::seq({natural_range(a, -1, /*max_digits=*/16), fraction()});
  std::vector<RegexPtr> alts;
  if (b - 1 >= a) alts.push_back(re::seq({natural_range(a, b - 1), fraction()}));
  alts.push_back(re::seq({lit(std::to_string(b)), zero_fraction()}));
  return re::alt(std::move(alts));
}

// Values in [lo, hi] (bounds may be absent): non-negative magnitudes as
// they are, negative ones after "-" from least_negative on; magnitude(a, b)
// writes [a, b] (b < 0: unbounded).
template <class Magnitude>
RegexPtr signed_range(std::optional<int64_t> lo, std::optional<int64_t> hi, Magnitude magnitude, int64_t least_negative) {
  std::vector<RegexPtr> alts;
  if (!hi || *hi >= 0) alts.push_back(magnitude(lo ? std::max<int64_t>(*lo, 0) : 0, hi ? *hi : -1));
  if (!lo || *lo < 0) {
    const int64_t a = hi && *hi < 0 ? -*hi : least_negative;
    alts.push_back(re::seq({lit("-"), magnitude(a, lo ? -*lo : -1)}));
  }
  return re::alt(std::move(alts));
}

// ---------------------------------------------------------------- schema helpers

const std::set<std::string>& annotation_keywords() {
  static const std::set<std::string> k = {"$schema", "$id", "$comment", "title", "description", "default",
                                          "examples", "deprecated", "readOnly", "writeOnly", "$defs",
                                          "definitions"};
  return k;
}
const std::set<std::string>& known_keywords() {
  static const std::set<std::string> k = {
      "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "required",
      "additionalProperties", "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength",
      "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
  return k;
}

const std::vector<std::string> kAllTypes = {"null", "boolean", "object", "array", "number", "string"};

std::string json_type_of(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_object()) return "object";
  if (v.is_array()) return "array";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number_float()) return std::floor(v.get<double>()) == v.get<double>() ? "integer" : "number";
  return "string";
}

bool type_allows(const std::set<std::string>& types, const std::string& t) {
  if (types.count(t)) return true;
  return t == "integer" && types.count("number");
}

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, const JsonSchemaOptions& o) : root_(root), o_(o) {
    if (o.whitespace == JsonWhitespace::kFlexible) {
      ws_ = re::repeat(cls({{' ', ' '}, {'\t', '\t'}, {'\n', '\n'}, {'\r', '\r'}}), 0, 4);
    } else {
      ws_ = re::empty();
    }
    const bool spaced = o.whitespace == JsonWhitespace::kSpaced;
    item_sep_ = spaced ? ", " : ",";
    key_sep_ = spaced ? ": " : ":";
  }

  std::shared_ptr<const Constraint> run_sequence(const JsonSequence& q) {
    const int32_t value = compile(root_, "#", 0);
    std::vector<int32_t> item = b_.literal(q.item_prefix);
    item.push_back(value);
    for (const int32_t x : b_.literal(q.item_suffix)) item.push_back(x);
    const int32_t one = b_.seq("item", item);
    std::vector<int32_t> next = b_.literal(q.separator);
    next.push_back(one);
    const int32_t more = b_.nonterminal("more_items");  // up to max_items - 1 more
    if (q.max_items < 0) {
      b_.rule(more, {});
      std::vector<int32_t> loop{more};
      loop.insert(loop.end(), next.begin(), next.end());
      b_.rule(more, loop);
    } else {
      int32_t tail = b_.nonterminal("no_more_items");
      b_.rule(tail, {});
      for (int32_t i = 1; i < q.max_items; ++i) {
        const int32_t t = b_.nonterminal("more_items");
        b_.rule(t, {});
        std::vector<int32_t> r = next;
        r.push_back(tail);
        b_.rule(t, r);
        tail = t;
      }
      b_.rule(more, {tail});
    }
    std::vector<int32_t> rhs = b_.text(re::repeat(cls({{' ', ' '}, {'\t', '\t'}, {'\n', '\n'}, {'\r', '\r'}}), 0, 4));
    for (const int32_t x : b_.literal(q.open)) rhs.push_back(x);
    rhs.push_back(one);
    rhs.push_back(more);
    for (const int32_t x : b_.literal(q.close)) rhs.push_back(x);
    return make_constraint("json_sequence", b_.finish(b_.seq("root", rhs)));
  }

  std::shared_ptr<const Constraint> run(const std::string& kind) {
    const int32_t top = compile(root_, "#", 0);
    // A JSON text may open with whitespace; SentencePiece vocabularies
    // start words with a space, so the first token is often " {".
    std::vector<int32_t> rhs = b_.text(re::repeat(cls({{' ', ' '}, {'\t', '\t'}, {'\n', '\n'}, {'\r', '\r'}}), 0, 4));
    rhs.push_back(top);
    const int32_t start = b_.seq("root", rhs);
    return make_constraint(kind, b_.finish(start));
  }

  int32_t any_object() {
    if (any_value_ < 0) build_any();
    return any_object_;
  }

 private:
  [[noreturn]] void refuse(const std::string& where, const std::string& what) const {
    fail(ErrorCode::kInvalidArgument, "json_schema: {} at {}", what, where);
  }

  std::vector<int32_t> token(RegexPtr r) { return b_.text(re::seq({ws_, std::move(r)})); }
  std::vector<int32_t> punct(std::string_view s) { return token(lit(s)); }
  std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
    std::vector<int32_t> out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  }

  std::string dump(const Json& v) const {
    // The separators of the chosen whitespace, so literals read like the rest.
    if (v.is_object()) {
      std::string s = "{";
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        if (!first) s += item_sep_;
        first = false;
        s += Json(k).dump(-1, ' ', false, Json::error_handler_t::strict) + key_sep_ + dump(x);
      }
      return s + "}";
    }
    if (v.is_array()) {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? item_sep_ : "") + dump(v[i]);
      return s + "]";
    }
    return v.dump(-1, ' ', false, Json::error_handler_t::strict);
  }

  void build_any() {
    any_value_ = b_.nonterminal("any");
    const int32_t str = b_.seq("any_string", token(quoted(re::repeat(json_string_char(), 0, o_.max_string_length))));
    const int32_t num = b_.seq("any_number", token(number_regex()));
    const int32_t pair = b_.seq("any_pair", cat({{str}, punct(key_sep_), {any_value_}}));
    const int32_t members = b_.nonterminal("any_members");
    b_.rule(members, {pair});
    b_.rule(members, cat({{members}, punct(item_sep_), {pair}}));
    any_object_ = b_.alt("any_object", {cat({punct("{"), punct("}")}), cat({punct("{"), {members}, punct("}")})});
    const int32_t elems = b_.nonterminal("any_elements");
    b_.rule(elems, {any_value_});
    b_.rule(elems, cat({{elems}, punct(item_sep_), {any_value_}}));
    const int32_t arr = b_.alt("any_array", {cat({punct("["), punct("]")}), cat({punct("["), {elems}, punct("]")})});
    for (const int32_t x : {any_object_, arr, str, num}) b_.rule(any_value_, {x});
    for (const char* k : {"true", "false", "null"}) b_.rule(any_value_, punct(k));
  }

  // JSON numbers that parse to a finite double everywhere: at most 16
  // integer digits and a two-digit exponent (1e400 is valid JSON, but most
  // parsers turn it into infinity or refuse it).
  static RegexPtr number_regex() {
    const RegexPtr integer = re::seq({re::opt(lit("-")), re::alt({lit("0"), re::seq({cls({{'1', '9'}}), re::repeat(digit(), 0, 15)})})});
    const RegexPtr exp = re::opt(re::seq({cls({{'e', 'e'}, {'E', 'E'}}), re::opt(cls({{'+', '+'}, {'-', '-'}})), re::repeat(digit(), 1, 2)}));
    return re::seq({integer, fraction(), exp});
  }

  const Json& resolve(const std::string& ref, const std::string& where) const {
    if (ref.empty() || ref[0] != '#') refuse(where, "$ref \"" + ref + "\" (only local references \"#...\" are supported)");
    const Json* cur = &root_;
    size_t i = 1;
    if (i < ref.size() && ref[i] != '/') refuse(where, "$ref \"" + ref + "\" (anchors are not supported)");
    while (i < ref.size()) {
      const size_t j = ref.find('/', i + 1);
      std::string part = ref.substr(i + 1, j == std::string::npos ? std::string::npos : j - i - 1);
      std::string key;
      for (size_t k = 0; k < part.size(); ++k) {
        if (part[k] == '~' && k + 1 < part.size()) {
          key += part[k + 1] == '1' ? '/' : '~';
          ++k;
        } else if (part[k] == '%' && k + 2 < part.size()) {
          key += static_cast<char>(std::stoi(part.substr(k + 1, 2), nullptr, 16));
          k += 2;
        } else {
          key += part[k];
        }
      }
      if (cur->is_object() && cur->contains(key)) {
        cur = &(*cur)[key];
      } else if (cur->is_array() && !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit) &&
                 std::stoul(key) < cur->size()) {
        cur = &(*cur)[std::stoul(key)];
      } else {
        refuse(where, "$ref \"" + ref + "\" points at nothing");
      }
      i = j == std::string::npos ? ref.size() : j;
    }
    return *cur;
  }

  // Keywords that constrain (not annotations).
  static bool constraining(const Json& s) {
    if (!s.is_object()) return true;
    for (const auto& [k, v] : s.items()) {
      if (!annotation_keywords().count(k)) return true;
    }
    return false;
  }

  std::set<std::string> types_of(const Json& s, const std::string& where) const {
    if (!s.contains("type")) return {kAllTypes.begin(), kAllTypes.end()};
    const Json& t = s["type"];
    std::set<std::string> out;
    auto one = [&](const Json& x) {
      if (!x.is_string()) refuse(where + "/type", "type must be a string or an array of strings");
      const std::string v = x.get<std::string>();
      if (v != "integer" && std::find(kAllTypes.begin(), kAllTypes.end(), v) == kAllTypes.end()) {
        refuse(where + "/type", "unknown type \"" + v + "\"");
      }
      out.insert(v);
    };
    if (t.is_array()) {
      for (const auto& x : t) one(x);
    } else {
      one(t);
    }
    return out;
  }

  // allOf: one schema that holds exactly when both do, or a refusal.
  Json merge(const Json& a0, const Json& b0, const std::string& where, int depth) {
    if (depth > 32) refuse(where, "allOf nested too deeply");
    auto inline_ref = [&](const Json& x) -> Json {
      if (x.is_boolean()) return x.get<bool>() ? Json::object() : Json{{"not", {}}};
      if (!x.is_object()) refuse(where, "a schema must be an object or a boolean");
      if (!x.contains("$ref")) return x;
      Json target = resolve(x["$ref"].get<std::string>(), where);
      Json rest = x;
      rest.erase("$ref");
      return merge(target, rest, where, depth + 1);
    };
    Json a = inline_ref(a0);
    const Json b = inline_ref(b0);
    if (a.contains("allOf") || b.contains("allOf")) refuse(where, "allOf inside allOf");
    for (const auto& [k, v] : b.items()) {
      if (!a.contains(k)) {
        a[k] = v;
        continue;
      }
      Json& x = a[k];
      if (x == v || annotation_keywords().count(k)) continue;
      if (k == "type") {
        std::set<std::string> ta = types_of(a, where), tb = types_of(b, where);
        Json both = Json::array();
        for (const auto& t : ta) {
          if (type_allows(tb, t)) both.push_back(t);
          else if (t == "number" && tb.count("integer")) both.push_back("integer");
        }
        x = both;
      } else if (k == "properties") {
        for (const auto& [p, s] : v.items()) x[p] = x.contains(p) ? Json{{"allOf", Json::array({x[p], s})}} : s;
      } else if (k == "required") {
        for (const auto& r : v) if (std::find(x.begin(), x.end(), r) == x.end()) x.push_back(r);
      } else if (k == "enum" || k == "const") {
        Json va = k == "enum" ? x : Json::array({x}), vb = k == "enum" ? v : Json::array({v});
        Json both = Json::array();
        for (const auto& e : va) if (std::find(vb.begin(), vb.end(), e) != vb.end()) both.push_back(e);
        a.erase(k);
        a["enum"] = both;
      } else if (k == "minLength" || k == "minItems" || k == "minimum" || k == "exclusiveMinimum") {
        if (v > x) x = v;
      } else if (k == "maxLength" || k == "maxItems" || k == "maximum" || k == "exclusiveMaximum") {
        if (v < x) x = v;
      } else {
        refuse(where, "allOf whose branches both use \"" + k + "\" differently");
      }
    }
    return a;
  }

  bool provably_disjoint(const Json& a, const Json& b, const std::string& where) {
    if (!a.is_object() || !b.is_object()) return false;
    auto values = [](const Json& s) -> std::optional<Json> {
      if (s.contains("const")) return Json::array({s["const"]});
      if (s.contains("enum")) return s["enum"];
      return std::nullopt;
    };
    auto types = [&](const Json& s) {
      if (auto v = values(s)) {
        std::set<std::string> t;
        for (const auto& x : *v) t.insert(json_type_of(x));
        return t;
      }
      return types_of(s, where);
    };
    const auto ta = types(a), tb = types(b);
    bool overlap = false;
    for (const auto& t : ta) overlap = overlap || type_allows(tb, t) || (t == "number" && tb.count("integer"));
    if (!overlap) return true;
    if (auto va = values(a), vb = values(b); va && vb) {
      for (const auto& x : *va) if (std::find(vb->begin(), vb->end(), x) != vb->end()) return false;
      return true;
    }
    // Objects told apart by a property both require.
    if (a.contains("properties") && b.contains("properties") && a.contains("required") && b.contains("required")) {
      for (const auto& r : a["required"]) {
        if (std::find(b["required"].begin(), b["required"].end(), r) == b["required"].end()) continue;
        const std::string p = r.get<std::string>();
        if (a["properties"].contains(p) && b["properties"].contains(p) &&
            provably_disjoint(a["properties"][p], b["properties"][p], where)) {
          return true;
        }
      }
    }
    return false;
  }

  int32_t nothing() {
    // A nonterminal without rules: finish() drops every rule that uses it.
    return b_.nonterminal("nothing");
  }

  int32_t compile(const Json& s, const std::string& where, int depth) {
    if (depth > 200) refuse(where, "schema nested too deeply");
    if (s.is_boolean()) {
      if (s.get<bool>()) {
        if (any_value_ < 0) build_any();
        return any_value_;
      }
      return nothing();
    }
    if (!s.is_object()) refuse(where, "a schema must be an object or a boolean");
    for (const auto& [k, v] : s.items()) {
      if (!annotation_keywords().count(k) && !known_keywords().count(k)) {
        refuse(where, "unsupported keyword \"" + k + "\"");
      }
    }
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) refuse(where + "/$ref", "$ref must be a string");
      const std::string ref = s["$ref"].get<std::string>();
      Json rest = s;
      rest.erase("$ref");
      if (constraining(rest)) return compile(merge(resolve(ref, where), rest, where, 0), where, depth + 1);
      if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
      const int32_t n = b_.nonterminal("ref " + ref);
      refs_.emplace(ref, n);
      b_.rule(n, {compile(resolve(ref, where), ref, depth + 1)});
      return n;
    }
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].empty()) refuse(where + "/allOf", "allOf must be a non-empty array");
      Json merged = s;
      merged.erase("allOf");
      for (const auto& x : s["allOf"]) merged = merge(merged, x, where + "/allOf", 0);
      return compile(merged, where, depth + 1);
    }
    for (const char* kw : {"anyOf", "oneOf"}) {
      if (!s.contains(kw)) continue;
      const Json& branches = s[kw];
      if (!branches.is_array() || branches.empty()) refuse(where + "/" + kw, std::string(kw) + " must be a non-empty array");
      Json rest = s;
      rest.erase(kw);
      if (std::string(kw) == "anyOf" && rest.contains("oneOf")) refuse(where, "anyOf together with oneOf");
      std::vector<Json> bs;
      for (const auto& x : branches) bs.push_back(constraining(rest) ? merge(rest, x, where + "/" + kw, 0) : x);
      if (std::string(kw) == "oneOf") {
        for (size_t i = 0; i < bs.size(); ++i) {
          for (size_t j = i + 1; j < bs.size(); ++j) {
            if (!provably_disjoint(bs[i], bs[j], where)) {
              refuse(where + "/oneOf", "oneOf whose alternatives " + std::to_string(i) + " and " + std::to_string(j) +
                                           " may both match (only disjoint alternatives are supported; use anyOf)");
            }
          }
        }
      }
      std::vector<std::vector<int32_t>> opts;
      for (size_t i = 0; i < bs.size(); ++i) {
        opts.push_back({compile(bs[i], where + "/" + kw + "/" + std::to_string(i), depth + 1)});
      }
      return b_.alt(kw, opts);
    }
    const std::set<std::string> types = types_of(s, where);
    if (s.contains("enum") || s.contains("const")) {
      for (const auto& [k, v] : s.items()) {
        if (k != "enum" && k != "const" && k != "type" && !annotation_keywords().count(k)) {
          refuse(where, "enum/const together with \"" + k + "\"");
        }
      }
      Json values = s.contains("const") ? Json::array({s["const"]}) : s["enum"];
      if (!values.is_array()) refuse(where + "/enum", "enum must be an array");
      if (s.contains("const") && s.contains("enum")) {
        Json both = Json::array();
        for (const auto& e : s["enum"]) if (e == s["const"]) both.push_back(e);
        values = both;
      }
      std::vector<std::vector<int32_t>> opts;
      for (const auto& v : values) {
        if (type_allows(types, json_type_of(v))) opts.push_back(token(lit(dump(v))));
      }
      return b_.alt("enum", opts);
    }
    std::vector<std::vector<int32_t>> opts;
    for (const auto& t : types) {
      if (t == "null" || t == "boolean") {
        if (t == "null") opts.push_back(punct("null"));
        else opts.push_back({b_.alt("boolean", {punct("true"), punct("false")})});
      } else if (t == "object") {
        opts.push_back({object(s, where, depth)});
      } else if (t == "array") {
        opts.push_back({array(s, where, depth)});
      } else if (t == "string") {
        opts.push_back(token(string_regex(s, where)));
      } else {
        opts.push_back(token(number(s, where, t == "integer" && !types.count("number"))));
      }
    }
    return b_.alt("value", opts);
  }

  int64_t int_of(const Json& v, const std::string& where, const std::string& kw) const {
    if (!v.is_number()) refuse(where + "/" + kw, kw + " must be a number");
    const double d = v.get<double>();
    if (std::fabs(d) > 1e15) refuse(where + "/" + kw, kw + " beyond ±1e15");
    return static_cast<int64_t>(d);
  }

  RegexPtr number(const Json& s, const std::string& where, bool integer) {
    std::optional<int64_t> lo, hi;
    auto num = [&](const char* kw) -> std::optional<double> {
      if (!s.contains(kw)) return std::nullopt;
      if (!s[kw].is_number()) refuse(where + "/" + kw, std::string(kw) + " must be a number");
      const double d = s[kw].get<double>();
      if (std::fabs(d) > 1e15) refuse(where + "/" + kw, std::string(kw) + " beyond ±1e15");
      return d;
    };
    const auto mn = num("minimum"), mx = num("maximum"), emn = num("exclusiveMinimum"), emx = num("exclusiveMaximum");
    if (integer) {
      if (mn) lo = static_cast<int64_t>(std::ceil(*mn));
      if (emn) lo = std::max(lo.value_or(INT64_MIN), static_cast<int64_t>(std::floor(*emn)) + 1);
      if (mx) hi = static_cast<int64_t>(std::floor(*mx));
      if (emx) hi = std::min(hi.value_or(INT64_MAX), static_cast<int64_t>(std::ceil(*emx)) - 1);
      if (lo && hi && *lo > *hi) refuse(where, "no integer lies between the bounds");
      return integer_range_regex(lo, hi);
    }
    if (emn || emx) refuse(where, "exclusiveMinimum/exclusiveMaximum on a number (supported on integers)");
    if ((mn && std::floor(*mn) != *mn) || (mx && std::floor(*mx) != *mx)) {
      refuse(where, "a number bound that is not an integer");
    }
    if (!mn && !mx) return number_regex();
    if (mn) lo = static_cast<int64_t>(*mn);
    if (mx) hi = static_cast<int64_t>(*mx);
    if (lo && hi && *lo > *hi) refuse(where, "minimum > maximum");
    // "-0" and "-0.5" are numbers above -1: magnitudes from 0 on both sides.
    return signed_range(lo, hi, decimal_range, /*least_negative=*/0);
  }

  RegexPtr format_regex(const std::string& f, const std::string& where) const {
    const auto d2 = [] { return re::repeat(digit(), 2, 2); };
    const RegexPtr year = re::alt({re::seq({lit("000"), cls({{'1', '9'}})}), re::seq({lit("00"), cls({{'1', '9'}}), digit()}),
                                   re::seq({lit("0"), cls({{'1', '9'}}), re::repeat(digit(), 2, 2)}),
                                   re::seq({cls({{'1', '9'}}), re::repeat(digit(), 3, 3)})});
    const RegexPtr day31 = re::alt({re::seq({lit("0"), cls({{'1', '9'}})}), re::seq({cls({{'1', '2'}}), digit()}), lit("30"), lit("31")});
    const RegexPtr day30 = re::alt({re::seq({lit("0"), cls({{'1', '9'}})}), re::seq({cls({{'1', '2'}}), digit()}), lit("30")});
    const RegexPtr day28 = re::alt({re::seq({lit("0"), cls({{'1', '9'}})}), re::seq({lit("1"), digit()}), re::seq({lit("2"), cls({{'0', '8'}})})});
    const RegexPtr month_day = re::alt({
        re::seq({re::alt({re::seq({lit("0"), cls({{'1', '1'}, {'3', '3'}, {'5', '5'}, {'7', '8'}})}), lit("10"), lit("12")}), lit("-"), day31}),
        re::seq({re::alt({re::seq({lit("0"), cls({{'4', '4'}, {'6', '6'}, {'9', '9'}})}), lit("11")}), lit("-"), day30}),
        re::seq({lit("02-"), day28})});
    const RegexPtr date = re::seq({year, lit("-"), month_day});
    const RegexPtr hour = re::alt({re::seq({cls({{'0', '1'}}), digit()}), re::seq({lit("2"), cls({{'0', '3'}})})});
    const RegexPtr minute = re::seq({cls({{'0', '5'}}), digit()});
    const RegexPtr offset = re::alt({lit("Z"), re::seq({cls({{'+', '+'}, {'-', '-'}}), hour, lit(":"), minute})});
    const RegexPtr time = re::seq({hour, lit(":"), minute, lit(":"), minute, re::opt(re::seq({lit("."), re::plus(digit())})), offset});
    if (f == "date") return date;
    if (f == "time") return time;
    if (f == "date-time") return re::seq({date, lit("T"), time});
    if (f == "uuid") {
      return re::seq({re::repeat(hexdig(), 8, 8), lit("-"), re::repeat(hexdig(), 4, 4), lit("-"), re::repeat(hexdig(), 4, 4),
                      lit("-"), re::repeat(hexdig(), 4, 4), lit("-"), re::repeat(hexdig(), 12, 12)});
    }
    // Lengths within RFC 1035 / 5321: labels of at most 60 characters, at
    // most 4 of them; a local part of at most 64 as dot-separated atoms.
    const RegexPtr label = re::seq({cls({{'a', 'z'}, {'A', 'Z'}, {'0', '9'}}),
                                    re::opt(re::seq({re::repeat(cls({{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'-', '-'}}), 0, 58),
                                                     cls({{'a', 'z'}, {'A', 'Z'}, {'0', '9'}})}))});
    const RegexPtr hostname = re::seq({label, re::repeat(re::seq({lit("."), label}), 0, 3)});
    if (f == "hostname") return hostname;
    if (f == "email") {
      const RegexPtr atext = cls({{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'_', '_'}, {'%', '%'}, {'+', '+'}, {'-', '-'}});
      const RegexPtr local = re::seq({re::repeat(atext, 1, 32), re::repeat(re::seq({lit("."), re::repeat(atext, 1, 15)}), 0, 2)});
      return re::seq({local, lit("@"), label, re::repeat(re::seq({lit("."), label}), 1, 2)});
    }
    if (f == "ipv4") {
      const RegexPtr octet = re::alt({re::seq({lit("25"), cls({{'0', '5'}})}), re::seq({lit("2"), cls({{'0', '4'}}), digit()}),
                                      re::seq({lit("1"), d2()}), re::seq({cls({{'1', '9'}}), digit()}), digit()});
      return re::seq({octet, re::repeat(re::seq({lit("."), octet}), 3, 3)});
    }
    if (f == "uri") {
      return re::seq({re::alt({lit("http"), lit("https")}), lit("://"), hostname,
                      re::opt(re::seq({lit("/"), re::star(cls({{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'.', '.'}, {'_', '_'}, {'~', '~'}, {'-', '-'}, {'/', '/'}}))}))});
    }
    refuse(where + "/format", "unsupported format \"" + f + "\"");
  }

  RegexPtr string_regex(const Json& s, const std::string& where) {
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("format")) {
      if (has_len || s.contains("pattern")) refuse(where, "format together with pattern or a length bound");
      if (!s["format"].is_string()) refuse(where + "/format", "format must be a string");
      return quoted(format_regex(s["format"].get<std::string>(), where));
    }
    if (s.contains("pattern")) {
      if (has_len) refuse(where, "pattern together with minLength/maxLength");
      if (!s["pattern"].is_string()) refuse(where + "/pattern", "pattern must be a string");
      RegexOptions ro;
      ro.alphabet = json_plain_chars();
      ro.search = true;
      ro.search_pad_max = o_.max_string_length;
      try {
        RegexPtr content = parse_regex(s["pattern"].get<std::string>(), ro);
        if (o_.max_string_length >= 0) content = cap_repeats(content, o_.max_string_length);
        return quoted(content);
      } catch (const Error& e) {
        refuse(where + "/pattern", e.what());
      }
    }
    int64_t mn = 0, mx = -1;
    if (s.contains("minLength")) mn = int_of(s["minLength"], where, "minLength");
    if (s.contains("maxLength")) mx = int_of(s["maxLength"], where, "maxLength");
    if (mn < 0 || mx < -1 || (mx >= 0 && mx < mn)) refuse(where, "minLength/maxLength out of order");
    if (mn > o_.max_repeat || mx > o_.max_repeat) refuse(where, "a string length bound above " + std::to_string(o_.max_repeat));
    if (mx < 0 && o_.max_string_length >= 0) mx = std::max<int64_t>(mn, o_.max_string_length);
    return quoted(re::repeat(json_string_char(), static_cast<int32_t>(mn), static_cast<int32_t>(mx)));
  }

  int32_t object(const Json& s, const std::string& where, int depth) {
    const Json props = s.contains("properties") ? s["properties"] : Json::object();
    if (!props.is_object()) refuse(where + "/properties", "properties must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) refuse(where + "/required", "required must be an array");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) refuse(where + "/required", "required must list strings");
        required.insert(r.get<std::string>());
      }
    }
    // Extra keys: as additionalProperties says; absent, any (JSON Schema's
    // rule) unless strict and properties are listed (OpenAI's rule).
    int32_t extra = -1;
    Json extra_schema = true;
    if (s.contains("additionalProperties")) {
      extra_schema = s["additionalProperties"];
      if (!(extra_schema.is_boolean() && !extra_schema.get<bool>())) {
        extra = compile(extra_schema, where + "/additionalProperties", depth + 1);
      }
    } else if (props.empty() || !o_.strict) {
      extra = compile(Json(true), where, depth + 1);
    }
    // A required name without a schema of its own takes the extra keys' one.
    Json all = props;
    for (const auto& r : s.contains("required") ? s["required"] : Json::array()) {
      const std::string k = r.get<std::string>();
      if (all.contains(k)) continue;
      if (extra < 0) refuse(where + "/required", "required property \"" + k + "\" that additionalProperties forbids");
      all[k] = extra_schema;
    }
    std::vector<std::string> names;
    std::vector<int32_t> pairs;
    std::vector<bool> req;
    for (const auto& [k, v] : all.items()) {
      names.push_back(k);
      const int32_t value = compile(v, where + "/properties/" + k, depth + 1);
      pairs.push_back(b_.seq("property " + k, cat({token(lit(dump(Json(k)))), punct(key_sep_), {value}})));
      req.push_back(required.count(k) > 0);
    }
    const size_t n = pairs.size();
    // F[i]: nothing written yet, properties i.. to come; N[i]: something written.
    std::vector<int32_t> F(n + 1), N(n + 1);
    for (size_t i = 0; i <= n; ++i) {
      F[i] = b_.nonterminal("props_first");
      N[i] = b_.nonterminal("props_next");
    }
    if (extra >= 0) {
      // One key lexeme for every object (plain characters, so the text is
      // the key), each object's copy excluding its listed names.
      std::vector<std::string> listed;
      for (const auto& k : names) listed.push_back(dump(Json(k)));
      const int32_t key = b_.seq("extra_key", {b_.text_excluding(re::seq({ws_, quoted(re::repeat(re::set(json_plain_chars()), 0, o_.max_string_length))}), listed)});
      const int32_t pair = b_.seq("extra_pair", cat({{key}, punct(key_sep_), {extra}}));
      const int32_t more = b_.nonterminal("extra_more");  // (sep pair)*, left-recursive
      b_.rule(more, {});
      b_.rule(more, cat({{more}, punct(item_sep_), {pair}}));
      b_.rule(F[n], {});
      b_.rule(F[n], {pair, more});
      b_.rule(N[n], {more});
    } else {
      b_.rule(F[n], {});
      b_.rule(N[n], {});
    }
    for (size_t i = n; i-- > 0;) {
      b_.rule(F[i], {pairs[i], N[i + 1]});
      b_.rule(N[i], cat({punct(item_sep_), {pairs[i], N[i + 1]}}));
      if (!req[i]) {
        b_.rule(F[i], {F[i + 1]});
        b_.rule(N[i], {N[i + 1]});
      }
    }
    return b_.seq("object", cat({punct("{"), {F[0]}, punct("}")}));
  }

  int32_t array(const Json& s, const std::string& where, int depth) {
    std::vector<int32_t> prefix;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) refuse(where + "/prefixItems", "prefixItems must be an array");
      for (size_t i = 0; i < s["prefixItems"].size(); ++i) {
        prefix.push_back(compile(s["prefixItems"][i], where + "/prefixItems/" + std::to_string(i), depth + 1));
      }
    }
    int32_t rest = -1;  // -1: no items past the prefix
    if (s.contains("items")) {
      const Json& it = s["items"];
      if (it.is_array()) refuse(where + "/items", "items as an array (draft 2019 tuples; use prefixItems)");
      if (!(it.is_boolean() && !it.get<bool>())) rest = compile(it, where + "/items", depth + 1);
    } else {
      rest = compile(Json(true), where, depth + 1);
    }
    int64_t mn = s.contains("minItems") ? int_of(s["minItems"], where, "minItems") : 0;
    int64_t mx = s.contains("maxItems") ? int_of(s["maxItems"], where, "maxItems") : -1;
    if (rest < 0) mx = mx < 0 ? static_cast<int64_t>(prefix.size()) : std::min<int64_t>(mx, static_cast<int64_t>(prefix.size()));
    if (mn < 0 || (mx >= 0 && mx < mn)) refuse(where, "minItems/maxItems admit no length");
    if (mn > o_.max_repeat || mx > o_.max_repeat) refuse(where, "an array length bound above " + std::to_string(o_.max_repeat));
    auto elem = [&](int64_t i) { return i < static_cast<int64_t>(prefix.size()) ? prefix[static_cast<size_t>(i)] : rest; };
    // A[i]: i elements written. Past the prefix and the minimum, an
    // unbounded tail is one left-recursive loop.
    const int64_t fixed = std::max<int64_t>(mn, static_cast<int64_t>(prefix.size()));
    const int64_t last = mx >= 0 ? mx : std::max<int64_t>(fixed, 1);
    std::vector<int32_t> A(static_cast<size_t>(last) + 1);
    for (auto& a : A) a = b_.nonterminal("items");
    if (mx < 0) {
      const int32_t loop = A[static_cast<size_t>(last)];
      b_.rule(loop, {});
      b_.rule(loop, cat({{loop}, punct(item_sep_), {rest}}));
    } else {
      b_.rule(A[static_cast<size_t>(last)], {});
    }
    for (int64_t i = last - 1; i >= 1; --i) {
      b_.rule(A[static_cast<size_t>(i)], cat({punct(item_sep_), {elem(i), A[static_cast<size_t>(i) + 1]}}));
      if (i >= mn) b_.rule(A[static_cast<size_t>(i)], {});
    }
    const int32_t arr = b_.nonterminal("array");
    if (last == 0) {
      b_.rule(arr, cat({punct("["), punct("]")}));
    } else {
      b_.rule(arr, cat({punct("["), {elem(0), A[1]}, punct("]")}));
      if (mn == 0) b_.rule(arr, cat({punct("["), punct("]")}));
    }
    return arr;
  }

  const Json& root_;
  const JsonSchemaOptions& o_;
  GrammarBuilder b_;
  RegexPtr ws_;
  std::string item_sep_, key_sep_;
  std::map<std::string, int32_t> refs_;
  int32_t any_value_ = -1, any_object_ = -1;
};

}  // namespace

RegexPtr integer_range_regex(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  return signed_range(lo, hi, [](int64_t a, int64_t b) { return natural_range(a, b); }, /*least_negative=*/1);
}

std::shared_ptr<const Constraint> compile_json_schema(const nlohmann::ordered_json& schema,
                                                      const JsonSchemaOptions& opts) {
  SchemaCompiler c(schema, opts);
  return c.run("json_schema");
}

std::shared_ptr<const Constraint> compile_json_schema_text(std::string_view schema_text, const JsonSchemaOptions& opts) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(schema_text);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::kInvalidArgument, "json_schema: not valid JSON ({})", e.what());
  }
  return compile_json_schema(j, opts);
}

std::shared_ptr<const Constraint> compile_json_sequence(const nlohmann::ordered_json& item_schema,
                                                        const JsonSequence& seq, const JsonSchemaOptions& opts) {
  SchemaCompiler c(item_schema, opts);
  return c.run_sequence(seq);
}

std::shared_ptr<const Constraint> compile_json_object(const JsonSchemaOptions& opts) {
  const nlohmann::ordered_json schema = {{"type", "object"}};
  SchemaCompiler c(schema, opts);
  return c.run("json_object");
}

}  // namespace tessera::grammar
