// The Jinja subset: expressions, filters, tests, methods, statements,
// whitespace control and the safety limits. Expected strings are what Jinja2
// (as Hugging Face configures it: trim_blocks, lstrip_blocks, loopcontrols)
// renders, written out by hand.
#include <chrono>
#include <regex>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "template/jinja.h"

namespace tessera::server::jinja {
namespace {

using Json = nlohmann::ordered_json;

const Json& sample_vars() {
  static const Json vars = Json::parse(R"({
    "x": {"a": 1, "l": [10, 20, 30], "s": "str"},
    "d": {"b": 2, "a": 1, "C": 3},
    "words": ["b", "A", "c", "a", "B"],
    "people": [{"name": "x", "age": 3}, {"name": "Y", "age": 1}, {"name": "z", "age": 2, "flag": true}],
    "n": null
  })");
  return vars;
}

std::string render(std::string_view source, const Json& vars = sample_vars(), const RenderLimits& limits = {}) {
  std::vector<std::pair<std::string, Value>> v;
  for (const auto& [k, val] : vars.items()) v.emplace_back(k, from_json(val));
  return Template::parse(source).render(std::move(v), limits);
}

// The message of the TemplateError that rendering `source` throws.
std::string render_error(std::string_view source, const Json& vars = sample_vars(), const RenderLimits& limits = {}) {
  try {
    render(source, vars, limits);
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "no error from: " << source;
  return "";
}

struct Case {
  const char* expr;
  const char* expected;
};

void expect_cases(const std::vector<Case>& cases) {
  for (const auto& c : cases) {
    const std::string src = std::string("{{ ") + c.expr + " }}";
    try {
      EXPECT_EQ(render(src), c.expected) << src;
    } catch (const std::exception& e) {
      ADD_FAILURE() << src << " threw: " << e.what();
    }
  }
}

TEST(JinjaExpr, ArithmeticFollowsPython) {
  expect_cases({
      {"1 + 2", "3"},          {"7 // 2", "3"},        {"-7 // 2", "-4"},       {"-7 % 3", "2"},
      {"7 % -3", "-2"},        {"2 ** 10", "1024"},    {"2 ** -1", "0.5"},      {"2 ** 3 ** 2", "64"},
      {"10 / 4", "2.5"},       {"10 / 5", "2.0"},      {"7.0 // 2", "3.0"},     {"1.5 * 2", "3.0"},
      {"3 - 5.5", "-2.5"},     {"0.1 + 0.2", "0.30000000000000004"},            {"1e16", "1e+16"},
      {"1.5e-7", "1.5e-07"},   {"123456789.125", "123456789.125"},              {"1/3", "0.3333333333333333"},
      {"-0.0", "-0.0"},        {"1_000", "1000"},      {"true + true", "2"},    {"- 2 ** 2", "4"},
      {"-x.a|abs", "1"},       {"1 + 2 * 3 - 4 / 2", "5.0"},                    {"x.l[0] + x.l[1] * 2", "50"},
  });
}

TEST(JinjaExpr, StringsListsAndLiterals) {
  expect_cases({
      {"'a' ~ 1 ~ none", "a1None"},
      {"'ab' * 3", "ababab"},
      {"'x' * 0", ""},
      {"[1] * 3", "[1, 1, 1]"},
      {"[1, 2] + [3]", "[1, 2, 3]"},
      {"(1, 2) + (3,)", "(1, 2, 3)"},
      {"(1,)", "(1,)"},
      {"()", "()"},
      {"{'a': [1, {'b': none}], 'c': true}", "{'a': [1, {'b': None}], 'c': True}"},
      {"[none, true, 1.0, 'x', \"it's\"]", "[None, True, 1.0, 'x', \"it's\"]"},
      {"'a\\nb\\t\\'\"\\\\'", "a\nb\t'\"\\"},
      {"\"x\\x41\\u00e9\\U0001F600\"", "xA\xC3\xA9\xF0\x9F\x98\x80"},
      {"'a' 'b'", "ab"},
      {"'%s-%d' % ('a', 3)", "a-3"},
      {"'%05.2f|%-4s|%x' % (3.14159, 'ab', 255)", "03.14|ab  |ff"},
      {"'%(a)s!' % {'a': 1}", "1!"},
      {"'%s' % [1, 2]", "[1, 2]"},
  });
}

TEST(JinjaExpr, ComparisonsAndLogic) {
  expect_cases({
      {"1 == 1.0", "True"},        {"true == 1", "True"},           {"[1, 2] == [1, 2]", "True"},
      {"[1] == (1,)", "False"},    {"{'a': 1} == {'a': 1}", "True"}, {"1 < 2 < 3", "True"},
      {"3 > 2 > 4", "False"},      {"'abc' < 'abd'", "True"},       {"[1, 2] < [1, 3]", "True"},
      {"'b' in 'abc'", "True"},    {"2 in [1, 2]", "True"},         {"'a' in {'a': 1}", "True"},
      {"3 not in [1]", "True"},    {"not 1", "False"},              {"1 and 2", "2"},
      {"0 or 'x'", "x"},           {"none or false", "False"},      {"1 if true else 2", "1"},
      {"1 if false else 2", "2"},  {"(1 if false)", ""},            {"not 1 == 2", "True"},
      {"nothing == nothing", "True"}, {"nothing == none", "False"},  {"'x' in nothing", "False"},
  });
}

TEST(JinjaExpr, UndefinedBehavesLikeJinjaDefault) {
  expect_cases({
      {"nothing", ""},
      {"nothing ~ 'x'", "x"},
      {"nothing is defined", "False"},
      {"nothing | length", "0"},
      {"nothing | default('dflt')", "dflt"},
      {"x.missing", ""},
      {"x.missing is defined", "False"},
      {"x['missing'] is undefined", "True"},
      {"x.l[5] is defined", "False"},
      {"n is none", "True"},
      {"n is defined", "True"},
  });
  EXPECT_EQ(render("{% for i in nothing %}x{% endfor %}"), "");
  EXPECT_EQ(render_error("{{ nothing.attr }}"), "error at 1:11: 'nothing' is undefined");
  EXPECT_EQ(render_error("{{ x.y.z }}"), "error at 1:7: 'dict object' has no attribute 'y'");
  EXPECT_NE(render_error("{{ nothing + 1 }}").find("'nothing' is undefined"), std::string::npos);
  EXPECT_NE(render_error("{{ nothing() }}").find("'nothing' is undefined"), std::string::npos);
}

TEST(JinjaExpr, AttributesSubscriptsAndSlices) {
  expect_cases({
      {"x.a", "1"},
      {"x['a']", "1"},
      {"x.l[1]", "20"},
      {"x.l.1", "20"},
      {"x.l[-1]", "30"},
      {"x.l[1:]", "[20, 30]"},
      {"x.l[::-1]", "[30, 20, 10]"},
      {"x.l[:-1]", "[10, 20]"},
      {"x.l[10:]", "[]"},
      {"[0, 1, 2, 3, 4, 5][5:0:-2]", "[5, 3, 1]"},
      {"[1, 2, 3, 4, 5][1:4:2]", "[2, 4]"},
      {"'hello'[::-2]", "olh"},
      {"'abc'[-1]", "c"},
      {"'abc'[5] is defined", "False"},
      // strings are indexed by code point, as in Python
      {"'h\xC3\xA9llo'[1]", "\xC3\xA9"},
      {"'h\xC3\xA9llo'[1:3]", "\xC3\xA9l"},
      {"'h\xC3\xA9llo' | length", "5"},
      {"[1, 2, 3][::-9223372036854775807]", "[3]"},
      {"x.items() | list", "[('a', 1), ('l', [10, 20, 30]), ('s', 'str')]"},
      {"x.s.upper()", "STR"},
  });
  EXPECT_NE(render_error("{{ [1][0:1:0] }}").find("slice step cannot be zero"), std::string::npos);
}

TEST(JinjaExpr, ErrorsFromOperators) {
  EXPECT_EQ(render_error("{{ 1 // 0 }}"), "error at 1:6: integer division or modulo by zero");
  EXPECT_EQ(render_error("{{ 1 / 0 }}"), "error at 1:6: division by zero");
  EXPECT_EQ(render_error("{{ 'a' - 1 }}"), "error at 1:8: unsupported operand type(s) for -: 'str' and 'int'");
  EXPECT_EQ(render_error("{{ 9223372036854775807 + 1 }}"), "error at 1:24: integer overflow");
  EXPECT_EQ(render_error("{{ '%d' % 'x' }}"), "error at 1:9: %d format: a real number is required, not str");
  EXPECT_EQ(render_error("{{ 'x' is nosuchtest }}"), "error at 1:8: no test named 'nosuchtest'");
  EXPECT_EQ(render_error("{{ 'x' | nosuchfilter }}"), "error at 1:10: no filter named 'nosuchfilter'");
  // an unknown filter in a branch never taken is not an error (Jinja 3)
  EXPECT_EQ(render("{% if false %}{{ 1 | nosuchfilter }}{% endif %}ok"), "ok");
}

TEST(JinjaFilters, Strings) {
  expect_cases({
      {"x.s | upper", "STR"},
      {"'Hello World' | lower", "hello world"},
      {"'hello woRLD-x(y' | title", "Hello World-X(Y"},
      {"'hELLO world' | capitalize", "Hello world"},
      {"'  x  ' | trim", "x"},
      {"'xxaxx' | trim('x')", "a"},
      {"'aXbX' | replace('X', '-')", "a-b-"},
      {"'aaa' | replace('a', 'b', 2)", "bba"},
      {"'abc' | replace('', '-')", "-a-b-c-"},
      {"'abc' | reverse", "cba"},
      {"'a\nb\n\nc' | indent", "a\n    b\n\n    c"},
      {"'a\nb\n\nc' | indent(2, true, true)", "  a\n  b\n  \n  c"},
      {"'a\nb' | indent('> ')", "a\n> b"},
      {"'<a&b>' | e", "&lt;a&amp;b&gt;"},
      {"'%s=%s' | format('a', 1)", "a=1"},
      {"'ab' | center(6)", "  ab  "},
      {"'a b  c' | wordcount", "3"},
      {"'3' | int", "3"},
      {"'3.7' | int", "3"},
      {"'x' | int", "0"},
      {"'x' | int(7)", "7"},
      {"3.9 | int", "3"},
      {"'0x1A' | int(0, 16)", "26"},
      {"'2.5' | float", "2.5"},
      {"'x' | float", "0.0"},
      {"3 | float", "3.0"},
      {"none | string", "None"},
      {"true | string", "True"},
      {"x.s | safe", "str"},
  });
}

TEST(JinjaFilters, Sequences) {
  expect_cases({
      {"x.l | length", "3"},
      {"x.s | count", "3"},
      {"d | length", "3"},
      {"x.l | first", "10"},
      {"x.l | last", "30"},
      {"[] | first is defined", "False"},
      {"x.l | join('-')", "10-20-30"},
      {"words | join", "bAcaB"},
      {"people | join(', ', attribute='name')", "x, Y, z"},
      {"x.l | list", "[10, 20, 30]"},
      {"'abc' | list", "['a', 'b', 'c']"},
      {"d | list", "['b', 'a', 'C']"},
      {"d | items | list", "[('b', 2), ('a', 1), ('C', 3)]"},
      {"words | unique | list", "['b', 'A', 'c']"},
      {"words | unique(true) | list", "['b', 'A', 'c', 'a', 'B']"},
      {"x.l | reverse | list", "[30, 20, 10]"},
      {"words | sort", "['A', 'a', 'b', 'B', 'c']"},
      {"words | sort(case_sensitive=true)", "['A', 'B', 'a', 'b', 'c']"},
      {"words | sort(reverse=true)", "['c', 'b', 'B', 'A', 'a']"},
      {"people | sort(attribute='age') | map(attribute='name') | join", "Yzx"},
      {"people | map(attribute='missing', default='?') | list", "['?', '?', '?']"},
      {"x.l | map('string') | list", "['10', '20', '30']"},
      {"words | map('upper') | join", "BACAB"},
      {"[1, 2, 3, 4] | select('even') | list", "[2, 4]"},
      {"[1, 2, 3, 4] | reject('even') | list", "[1, 3]"},
      {"[0, 1, '', 'a', none] | select | list", "[1, 'a']"},
      {"people | selectattr('flag') | map(attribute='name') | list", "['z']"},
      {"people | selectattr('age', 'gt', 1) | map(attribute='name') | list", "['x', 'z']"},
      {"people | rejectattr('age', 'equalto', 1) | map(attribute='name') | list", "['x', 'z']"},
      {"words | max", "c"},
      {"words | min", "A"},
      {"people | max(attribute='age') | attr('get')('name')", "x"},
      {"d | dictsort", "[('a', 1), ('b', 2), ('C', 3)]"},
      {"d | dictsort(true)", "[('C', 3), ('a', 1), ('b', 2)]"},
      {"d | dictsort(by='value', reverse=true)", "[('C', 3), ('b', 2), ('a', 1)]"},
      {"[1, 2, 3] | sum", "6"},
      {"people | sum(attribute='age')", "6"},
      {"x.l | batch(2) | list", "[[10, 20], [30]]"},
      {"[1, '1', 1.0] | unique | list", "[1, '1']"},
      {"-3 | abs", "3"},
      {"2.5 | round", "2.0"},
      {"3.5 | round", "4.0"},
      {"2.675 | round(2)", "2.67"},
      {"2.1 | round(0, 'ceil')", "3.0"},
      {"7 | round", "7"},
      {"nothing | d('z')", "z"},
      {"'' | default('d', true)", "d"},
  });
}

TEST(JinjaFilters, ToJsonIsHuggingFaces) {
  expect_cases({
      {"d | tojson", "{\"b\": 2, \"a\": 1, \"C\": 3}"},
      {"'\xC3\xA9\"<>\n' | tojson", "\"\xC3\xA9\\\"<>\\n\""},
      {"{'a': none, 'b': 1.5, 'c': [true], 'e': {}} | tojson", "{\"a\": null, \"b\": 1.5, \"c\": [true], \"e\": {}}"},
      {"d | tojson(sort_keys=true)", "{\"C\": 3, \"a\": 1, \"b\": 2}"},
      {"{'k': [1, 2]} | tojson(separators=(',', ':'))", "{\"k\":[1,2]}"},
      {"'\xC3\xBC' | tojson(ensure_ascii=true)", "\"\\u00fc\""},
      {"'\xF0\x9F\x98\x80' | tojson(true)", "\"\\ud83d\\ude00\""},
      {"[1e20, 1e-7, 0.5, 1.0] | tojson", "[1e+20, 1e-07, 0.5, 1.0]"},
      {"people[0] | tojson(indent=2)", "{\n  \"name\": \"x\",\n  \"age\": 3\n}"},
      {"{'a': [], 'b': [1]} | tojson(indent=1)", "{\n \"a\": [],\n \"b\": [\n  1\n ]\n}"},
  });
  EXPECT_NE(render_error("{{ nothing | tojson }}").find("not JSON serializable"), std::string::npos);
}

TEST(JinjaTests, AllTests) {
  expect_cases({
      {"x.a is number", "True"},       {"true is number", "True"},        {"1 is integer", "True"},
      {"true is integer", "False"},    {"1.0 is float", "True"},          {"true is boolean", "True"},
      {"false is false", "True"},      {"1 is true", "False"},            {"'s' is string", "True"},
      {"x is mapping", "True"},        {"x.l is iterable", "True"},       {"1 is iterable", "False"},
      {"x.l is sequence", "True"},     {"3 is odd", "True"},              {"4 is even", "True"},
      {"9 is divisibleby 3", "True"},  {"9 is divisibleby(4)", "False"},  {"3 is eq 3", "True"},
      {"3 is lt 4", "True"},           {"3 is ge 4", "False"},            {"x.l is sameas x.l", "True"},
      {"[1] is sameas [1]", "False"},  {"1 is in [1, 2]", "True"},        {"'A' is upper", "True"},
      {"'a' is lower", "True"},        {"x.a is not none", "True"},       {"range is callable", "True"},
      {"nothing is undefined", "True"}, {"not x is defined", "False"},    {"'upper' is filter", "True"},
  });
}

TEST(JinjaMethods, StrListDict) {
  expect_cases({
      {"' x '.strip()", "x"},
      {"'xxhixx'.strip('x')", "hi"},
      {"'\n\nhi\n'.lstrip('\n')", "hi\n"},
      {"'hi  '.rstrip()", "hi"},
      {"'\xE3\x80\x80x\xE3\x80\x80'.strip()", "x"},
      {"'abc'.startswith('ab')", "True"},
      {"'abc'.startswith(('x', 'a'))", "True"},
      {"'abc'.endswith('bc')", "True"},
      {"'a,b,,c'.split(',')", "['a', 'b', '', 'c']"},
      {"' a  b c '.split()", "['a', 'b', 'c']"},
      {"'a b c d'.split(' ', 1)", "['a', 'b c d']"},
      {"'  a b  c  '.split(None, 1)", "['a', 'b  c  ']"},
      {"'a,b,c'.rsplit(',', 1)", "['a,b', 'c']"},
      {"'  a b  c  '.rsplit(None, 1)", "['  a b', 'c']"},
      {"'x</think>y'.split('</think>')[-1]", "y"},
      {"'a\nb\r\nc'.splitlines()", "['a', 'b', 'c']"},
      {"'hello world'.title()", "Hello World"},
      {"\"they're\".title()", "They'Re"},
      {"'hELLO'.capitalize()", "Hello"},
      {"'aaa'.replace('a', 'b', 1)", "baa"},
      {"'{} and {}'.format(1, 'x')", "1 and x"},
      {"'{0}{1}{0}'.format('a', 'b')", "aba"},
      {"'{name}!'.format(name='n')", "n!"},
      {"'{{}} {}'.format(3)", "{} 3"},
      {"'h\xC3\xA9llo'.find('l')", "2"},
      {"'abc'.find('z')", "-1"},
      {"'banana'.rfind('a')", "5"},
      {"'banana'.count('a')", "3"},
      {"', '.join(['a', 'b'])", "a, b"},
      {"'-'.join('abc')", "a-b-c"},
      {"'123'.isdigit()", "True"},
      {"d.keys() | list", "['b', 'a', 'C']"},
      {"d.values() | list", "[2, 1, 3]"},
      {"d.get('a')", "1"},
      {"d.get('zz')", "None"},
      {"d.get('zz', 5)", "5"},
      {"x.l.index(20)", "1"},
      {"x.l.count(10)", "1"},
      {"'abc'.nosuch is defined", "False"},
  });
  EXPECT_NE(render_error("{{ ', '.join([1, 2]) }}").find("expected str instance, int found"), std::string::npos);
  EXPECT_EQ(render("{% set l = [1] %}{{ l.append(2) }}{{ l }}"), "None[1, 2]");
}

TEST(JinjaGlobals, RangeNamespaceDictStrftime) {
  expect_cases({
      {"range(3) | list", "[0, 1, 2]"},
      {"range(1, 10, 3) | list", "[1, 4, 7]"},
      {"range(5, 0, -2) | list", "[5, 3, 1]"},
      {"namespace(a=1).a", "1"},
      {"dict(a=1, b=2)", "{'a': 1, 'b': 2}"},
      {"dict(x, z=3) | length", "4"},
  });
  // Jinja's sandbox (which HF uses) refuses ranges over 100000 items
  EXPECT_NE(render_error("{{ range(200000) }}").find("range too big"), std::string::npos);
  const std::string date = render("{{ strftime_now('%Y-%m-%d') }}");
  EXPECT_TRUE(std::regex_match(date, std::regex(R"(20[2-9][0-9]-[01][0-9]-[0-3][0-9])"))) << date;
}

TEST(JinjaStatements, ForLoops) {
  EXPECT_EQ(render("{% for i in x.l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}"),
            "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|");
  EXPECT_EQ(render("{% for i in x.l %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}"), "-20|10-30|20-|");
  EXPECT_EQ(render("{% for i in x.l if i > 10 %}{{ loop.index }}:{{ i }} {% endfor %}"), "1:20 2:30 ");
  EXPECT_EQ(render("{% for i in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"), "b=2;a=1;C=3;");
  EXPECT_EQ(render("{% for k in d %}{{ k }}{% endfor %}"), "baC");
  EXPECT_EQ(render("{% for c in 'h\xC3\xA9!' %}{{ c }}.{% endfor %}"), "h.\xC3\xA9.!.");
  EXPECT_EQ(render("{% for i in x.l %}{% if i == 20 %}{% break %}{% endif %}{{ i }}{% endfor %}"), "10");
  EXPECT_EQ(render("{% for i in x.l %}{% if i == 20 %}{% continue %}{% endif %}{{ i }}{% endfor %}"), "1030");
  EXPECT_EQ(render("{% for i in [1, 2] %}{% for j in 'ab' %}{{ loop.index }}{{ j }}{% endfor %}{{ loop.index }};"
                   "{% endfor %}"),
            "1a2b1;1a2b2;");
  EXPECT_EQ(render("{% for i in x.l %}{{ loop.cycle('a', 'b') }}{% endfor %}"), "aba");
  EXPECT_EQ(render("{% for m in messages[::-1] %}{{ (messages | length - 1) - loop.index0 }}{% endfor %}",
                   Json::parse(R"({"messages": [1, 2, 3]})")),
            "210");
}

TEST(JinjaStatements, ScopingAndNamespace) {
  // a set inside a loop is gone after the iteration; inside an if it stays
  EXPECT_EQ(render("{% set t = 0 %}{% for i in x.l %}{% set t = t + i %}{{ t }} {% endfor %}{{ t }}"), "10 20 30 0");
  EXPECT_EQ(render("{% for i in [1, 2] %}{% if i == 1 %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}"), "[5][]");
  EXPECT_EQ(render("{% if true %}{% set z = 3 %}{% endif %}{{ z }}"), "3");
  EXPECT_EQ(render("{% set ns = namespace(t=0) %}{% for i in x.l %}{% set ns.t = ns.t + i %}{% endfor %}{{ ns.t }}"),
            "60");
  EXPECT_EQ(render("{% set ns = namespace(a=1, b='x') %}{{ ns.a }}{{ ns.b }}{{ ns.c is defined }}"), "1xFalse");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}"), "12");
  EXPECT_EQ(render("{% set t = 1, 2 %}{{ t }}"), "(1, 2)");
  EXPECT_EQ(render("{% set v %}inner {{ x.a }}{% endset %}[{{ v }}]"), "[inner 1]");
  EXPECT_EQ(render("{% set v | upper %}inner{% endset %}{{ v }}"), "INNER");
  EXPECT_EQ(render("{% with q = 5 %}{{ q }}{% endwith %}{{ q is defined }}"), "5False");
  EXPECT_EQ(render("{% filter upper %}hello {{ x.s }}{% endfilter %}"), "HELLO STR");
  EXPECT_EQ(render("{% generation %}gen{% endgeneration %}"), "gen");
  EXPECT_NE(render_error("{% set q = 1 %}{% set q.a = 2 %}").find("not a namespace"), std::string::npos);
}

TEST(JinjaStatements, Macros) {
  EXPECT_EQ(render("{% macro m(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }}|{{ m(1, 3) }}|{{ m(b=5, a=4) }}|"
                   "{{ m() }}"),
            "1-2|1-3|4-5|-2");
  EXPECT_EQ(render("{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}"),
            "1(2, 3){'k': 4}");
  EXPECT_EQ(render("{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}body {{ x.a }}{% endcall %}"),
            "[body 1]");
  EXPECT_EQ(render("{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}"
                   "{% call(v) each(x.l) %}<{{ v }}>{% endcall %}"),
            "<10><20><30>");
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}"), "54321");
  // a macro sees the variables of the scope it was defined in
  EXPECT_EQ(render("{% macro m() %}{{ later }}{% endmacro %}{% set later = 7 %}{{ m() }}"), "7");
}

TEST(JinjaWhitespace, TrimAndLstripBlocks) {
  EXPECT_EQ(render("a\n  {% if true %}\n    b\n  {% endif %}\nc"), "a\n    b\nc");
  EXPECT_EQ(render("a\n  {%- if true %}\n    b\n  {%+ endif %}\nc"), "a    b\n  c");
  EXPECT_EQ(render("  {{ 1 }}  \n  {% if true %}x{% endif %}  \ny"), "  1  \nx  \ny");
  EXPECT_EQ(render("{% for i in x.l %}\n  {{ i }}\n{% endfor %}\n"), "  10\n  20\n  30\n");
  EXPECT_EQ(render("{% for i in x.l -%}\n  {{ i }}\n{%- endfor %}"), "102030");
  EXPECT_EQ(render("{# comment #}\nA\n  {# c2 #}\nB {#- c3 -#}   C"), "A\nBC");
  EXPECT_EQ(render("x {{- ' y ' -}} z"), "x y z");
  EXPECT_EQ(render("x\n{%- raw %} {{ not }} {% endraw -%}\ny"), "x {{ not }} y");
  EXPECT_EQ(render("{% raw %}\n{{ a }}\n{% endraw %}\nz"), "\n{{ a }}\nz");
  EXPECT_EQ(render("a\r\nb\rc\n"), "a\nb\nc");  // newlines normalised, one trailing newline dropped
  EXPECT_EQ(render("a\n\n"), "a\n");
  EXPECT_EQ(render("  {%+ if true %}k{% endif %}"), "  k");
  EXPECT_EQ(render("{% if true +%}\nx{% endif %}"), "\nx");
  EXPECT_EQ(render("\t{% if true %}tab{% endif %}"), "tab");
  EXPECT_EQ(render("{{ 'x' }}   {% if true %}t{% endif %}"), "x   t");
  EXPECT_EQ(render("line1\n    {%- if true -%}\n    inner\n    {%- endif -%}\n    line2"), "line1innerline2");
  EXPECT_EQ(render("{{ {'a': {'b': 1}} }}"), "{'a': {'b': 1}}");
}

TEST(JinjaErrors, SyntaxErrorsCarryLineAndColumn) {
  auto syntax = [](std::string_view src) -> std::string {
    try {
      Template::parse(src);
    } catch (const TemplateError& e) {
      EXPECT_EQ(e.kind(), TemplateError::Kind::kSyntax);
      return e.what();
    }
    ADD_FAILURE() << "parsed: " << src;
    return "";
  };
  EXPECT_EQ(syntax("line one\n{% if x %}\n  {{ 1 + }}\n{% endif %}"), "syntax error at 3:10: expected an expression, got '}}'");
  EXPECT_EQ(syntax("{{ 'abc }}"), "syntax error at 1:4: unterminated string");
  EXPECT_EQ(syntax("ok\n{% if x %}"),
            "syntax error at 2:11: unexpected end of template, expected 'elif' or 'else' or 'endif' to close the block "
            "opened at 2:4");
  EXPECT_EQ(syntax("{# abc"), "syntax error at 1:1: missing end of comment tag");
  EXPECT_EQ(syntax("{{ x $ y }}"), "syntax error at 1:6: unexpected char '$'");
  EXPECT_EQ(syntax("{{ (1 }}"), "syntax error at 1:7: unexpected '}', expected ')'");
  EXPECT_EQ(syntax("{% endif %}"), "syntax error at 1:4: unexpected 'endif': no open block to close");
  EXPECT_EQ(syntax("{% include 'x' %}"), "syntax error at 1:4: unknown or unsupported tag 'include'");
  EXPECT_EQ(syntax("{% break %}"), "syntax error at 1:4: 'break' outside of a loop");
}

TEST(JinjaErrors, RenderErrorsAndRaiseException) {
  EXPECT_EQ(render_error("a\nb\n{{ x.l + 1 }}"), "error at 3:8: unsupported operand type(s) for +: 'list' and 'int'");
  try {
    render("{% if true %}{{ raise_exception('Roles must alternate') }}{% endif %}");
    ADD_FAILURE() << "no error";
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.kind(), TemplateError::Kind::kRaised);
    EXPECT_STREQ(e.what(), "Roles must alternate");
  }
}

// ---- safety: templates come from model files, data from users --------------

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(JinjaSafety, BillionIterationsStopAtTheStepLimit) {
  const std::string src =
      "{% for i in range(100000) %}{% for j in range(100000) %}{% for k in range(100) %}{% endfor %}{% endfor %}"
      "{% endfor %}";
  const auto t0 = std::chrono::steady_clock::now();
  RenderLimits limits;
  limits.max_steps = 200000;
  EXPECT_NE(render_error(src, {}, limits).find("limit of 200000 steps"), std::string::npos);
  EXPECT_LT(seconds_since(t0), 5.0);
  // the default limits stop it too
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_NE(render_error(src, {}).find("limit of 2000000 steps"), std::string::npos);
  EXPECT_LT(seconds_since(t1), 20.0);
}

TEST(JinjaSafety, RecursionIsBounded) {
  EXPECT_NE(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("macro calls nested deeper"),
            std::string::npos);
  EXPECT_NE(render_error("{% macro f() %}{{ g() }}{% endmacro %}{% macro g() %}{{ f() }}{% endmacro %}{{ f() }}")
                .find("macro calls nested deeper"),
            std::string::npos);
  // a caller() passed down recursively is bounded the same way
  EXPECT_NE(render_error("{% macro f() %}{% call f() %}x{% endcall %}{% endmacro %}{{ f() }}").find("nested deeper"),
            std::string::npos);
}

TEST(JinjaSafety, DeepSyntaxIsASyntaxErrorNotACrash) {
  auto parse_fails = [](const std::string& src, const char* what) {
    try {
      Template::parse(src);
      ADD_FAILURE() << "parsed";
    } catch (const TemplateError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  parse_fails("{{ " + std::string(10000, '(') + "1" + std::string(10000, ')') + " }}", "nested deeper than 100");
  parse_fails("{{ " + std::string(10000, '[') + std::string(10000, ']') + " }}", "nested deeper than 100");
  std::string nots;
  for (int i = 0; i < 10000; ++i) nots += "not ";
  parse_fails("{{ " + nots + "1 }}", "nested deeper than 100");
  std::string sum = "1";
  for (int i = 0; i < 100000; ++i) sum += " + 1";
  parse_fails("{{ " + sum + " }}", "expression nested deeper than 256");
  std::string filters = "1";
  for (int i = 0; i < 10000; ++i) filters += "|abs";
  parse_fails("{{ " + filters + " }}", "expression nested deeper than 256");
  std::string ifs;
  for (int i = 0; i < 10000; ++i) ifs += "{% if 1 %}";
  parse_fails(ifs, "nested deeper than 100");
}

TEST(JinjaSafety, HugeStringsListsAndOutputAreRefused) {
  RenderLimits limits;
  limits.max_output_bytes = 1 << 16;
  EXPECT_NE(render_error("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
                         "{% endfor %}",
                         {}, limits)
                .find("over the limit of 65536"),
            std::string::npos);
  EXPECT_NE(render_error("{{ ('a' * 1000000000) | length }}", {}, limits).find("over the limit"), std::string::npos);
  EXPECT_NE(render_error("{{ ([1] * 1000000000) | length }}", {}, limits).find("steps"), std::string::npos);
  EXPECT_NE(render_error("{% for i in range(100000) %}0123456789{% endfor %}", {}, limits).find("template output exceeds"),
            std::string::npos);
  // a list of lists shared 60 times over prints as 2^60 elements
  EXPECT_NE(render_error("{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}"
                         "{% endfor %}{{ ns.l | tojson }}",
                         {}, limits)
                .find("over the limit"),
            std::string::npos);
}

TEST(JinjaSafety, DeepAndCyclicValues) {
  // 100000 nested lists are built and freed without a deep C++ stack;
  // printing one stops at the depth bound.
  const std::string build = "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}";
  EXPECT_EQ(render(build + "done"), "done");
  EXPECT_NE(render_error(build + "{{ ns.l }}").find("nested deeper than 256"), std::string::npos);
  EXPECT_NE(render_error(build + "{{ ns.l | tojson }}").find("nested deeper than 256"), std::string::npos);
  // cycles: printing fails at the depth bound, and the render frees them (LeakSanitizer checks)
  EXPECT_NE(render_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}").find("nested deeper"),
            std::string::npos);
  EXPECT_NE(render_error("{% set l = [] %}{{ l.append(l) }}{{ l }}").find("nested deeper"), std::string::npos);
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.l = [ns] %}{% for i in [1] %}{% set ns.loop = loop %}"
                   "{% endfor %}ok"),
            "ok");
  // user data nested past the bound is refused when converted
  const Json deep = Json::parse(std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_THROW(from_json(deep), Error);
}

}  // namespace
}  // namespace tessera::server::jinja
