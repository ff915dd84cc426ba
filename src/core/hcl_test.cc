#include "core/hcl.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

namespace tessera::core {
namespace {

using nlohmann::json;

struct OkCase {
  const char* name;
  std::string hcl;
  const char* json;  // The expected result, as JSON text.
};

TEST(HclTest, ParsesEveryConstructIntoJson) {
  const OkCase cases[] = {
      // Bodies, comments and separators.
      {"empty", "", "{}"},
      {"only space", " \n\t\r\n ", "{}"},
      {"comments", "# a\n// b\n/* c\n d */ x = 1 # e\ny = 2 // f\n", R"({"x": 1, "y": 2})"},
      {"comment markers inside strings", R"(a = "# not // a /* comment")",
       R"({"a": "# not // a /* comment"})"},
      {"several attributes on one line", "a = 1 b = \"x\" c = true", R"({"a":1,"b":"x","c":true})"},
      {"newline after =", "a =\n  1", R"({"a": 1})"},
      {"CRLF line endings", "a = 1\r\nb = 2\r\n", R"({"a": 1, "b": 2})"},
      {"UTF-8 byte order mark",
       "\xEF\xBB\xBF"
       "a = 1",
       R"({"a": 1})"},
      {"names with digits, dashes, underscores", "_a-b_9 = 1", R"({"_a-b_9": 1})"},
      {"keywords as names", "null = 1\ntrue = 2", R"({"null": 1, "true": 2})"},
      // Strings.
      {"string", R"(a = "hello world")", R"({"a": "hello world"})"},
      {"empty string", R"(a = "")", R"({"a": ""})"},
      {"escapes", R"(a = "q\"b\\s\n\t\r")", R"({"a": "q\"b\\s\n\t\r"})"},
      {"unicode escapes", R"(a = "\u00e9\u20AC\U0001F600\u0000")",
       R"({"a": "\u00e9\u20ac\ud83d\ude00\u0000"})"},
      {"raw UTF-8", "a = \"h\xC3\xA9 \xF0\x9F\x98\x80\"", R"({"a": "h\u00e9 \ud83d\ude00"})"},
      {"templates kept verbatim", R"(a = "${var.x}-%{ if y }z%{ endif }")",
       R"({"a": "${var.x}-%{ if y }z%{ endif }"})"},
      {"template escapes kept verbatim", R"(a = "$${x} %%{y} $ % {")",
       R"({"a": "$${x} %%{y} $ % {"})"},
      {"quotes and braces inside a template", R"(a = "${f("}", {b = "\""})}!")",
       R"({"a": "${f(\"}\", {b = \"\\\"\"})}!"})"},
      {"nested templates", R"(a = "${x("${y}")}")", R"({"a": "${x(\"${y}\")}"})"},
      {"newline inside a template", "a = \"${x +\n y}\"", R"({"a": "${x +\n y}"})"},
      // Numbers.
      {"integers", "a = 42\nb = -7\nc = 0\nd = 007", R"({"a": 42, "b": -7, "c": 0, "d": 7})"},
      {"int64 limits", "a = 9223372036854775807\nb = -9223372036854775808",
       R"({"a": 9223372036854775807, "b": -9223372036854775808})"},
      {"floats", "a = 1.5\nb = -0.25\nc = 1e3\nd = 2.5E-3\ne = 1e+2\nf = -1.5e-1",
       R"({"a": 1.5, "b": -0.25, "c": 1000.0, "d": 0.0025, "e": 100.0, "f": -0.15})"},
      // Keywords.
      {"bools and null", "a = true\nb = false\nc = null", R"({"a": true, "b": false, "c": null})"},
      // Lists.
      {"list", R"(a = [1, "two", true, null, 2.5])", R"({"a": [1, "two", true, null, 2.5]})"},
      {"empty lists", "a = []\nb = [ \n ]", R"({"a": [], "b": []})"},
      {"trailing comma", "a = [1, 2,]", R"({"a": [1, 2]})"},
      {"multiline list with comments", "a = [\n  \"x\", # first\n  \"y\",\n  // last\n]\n",
       R"({"a": ["x", "y"]})"},
      {"nested lists", "a = [[1], [[]], [{b = 1}]]", R"({"a": [[1], [[]], [{"b": 1}]]})"},
      // Objects.
      {"object", R"(a = { k = 1, "k2" = "v" })", R"({"a": {"k": 1, "k2": "v"}})"},
      {"colon separators", R"(a = { "k": 1, j: 2 })", R"({"a": {"k": 1, "j": 2}})"},
      {"commas optional", "a = {\n  k = 1\n  j = 2\n}\nb = { x = 1 y = 2 }",
       R"({"a": {"k": 1, "j": 2}, "b": {"x": 1, "y": 2}})"},
      {"trailing comma in object", "a = { k = 1, }", R"({"a": {"k": 1}})"},
      {"empty object", "a = {}", R"({"a": {}})"},
      {"nested objects", "a = { b = { c = [1, { d = null }] } }",
       R"({"a": {"b": {"c": [1, {"d": null}]}}})"},
      {"odd object keys", R"(a = { "with space" = 1, "" = 2, "a.b" = 3 })",
       R"({"a": {"with space": 1, "": 2, "a.b": 3}})"},
      // Heredocs.
      {"heredoc", "a = <<EOF\nline1\n  line2\nEOF\nb = 1", R"({"a": "line1\n  line2\n", "b": 1})"},
      {"indented heredoc", "a = <<-EOT\n    x\n      y\n\n    z\n    EOT\n",
       R"({"a": "x\n  y\n\nz\n"})"},
      {"indented heredoc with tabs", "a = <<-EOT\n\t\tx\n\t\t\ty\n\tEOT\n", R"({"a": "x\n\ty\n"})"},
      {"empty heredoc", "a = <<EOF\nEOF\n", R"({"a": ""})"},
      {"heredoc text is verbatim", "a = <<EOF\n\\n \"${x}\" # no comment\nEOF",
       R"({"a": "\\n \"${x}\" # no comment\n"})"},
      {"heredoc marker as a word inside a line", "a = <<EOF\nnot EOF here\nEOF",
       R"({"a": "not EOF here\n"})"},
      {"heredoc with CRLF", "a = <<EOF\r\nx\r\nEOF\r\nb = 1", R"({"a": "x\n", "b": 1})"},
      {"heredoc in a list", "a = [<<EOF\nx\nEOF\n, 2]", R"({"a": ["x\n", 2]})"},
      // Blocks.
      {"block without labels", "telemetry { enabled = true }",
       R"({"telemetry": [{"enabled": true}]})"},
      {"block with a label", "listener \"tcp\" { a = 1 }",
       R"({"listener": [{"tcp": [{"a": 1}]}]})"},
      {"block with two labels", "resource \"gpu\" \"h200\" { n = 8 }",
       R"({"resource": [{"gpu": [{"h200": [{"n": 8}]}]}]})"},
      {"empty block", "x {}\ny \"l\" {\n}", R"({"x": [{}], "y": [{"l": [{}]}]})"},
      {"empty label", "x \"\" { a = 1 }", R"({"x": [{"": [{"a": 1}]}]})"},
      {"repeated blocks keep each one in order",
       "listener \"tcp\" { a = 1 }\nlistener \"unix\" { a = 2 }\nlistener \"tcp\" { a = 3 }",
       R"({"listener": [{"tcp": [{"a": 1}]}, {"unix": [{"a": 2}]}, {"tcp": [{"a": 3}]}]})"},
      {"repeated blocks without labels", "t { a = 1 }\nt { a = 2 }",
       R"({"t": [{"a": 1}, {"a": 2}]})"},
      {"nested blocks", "job \"j\" {\n  group \"g\" {\n    task \"t\" { n = 1 }\n  }\n}",
       R"({"job": [{"j": [{"group": [{"g": [{"task": [{"t": [{"n": 1}]}]}]}]}]}]})"},
      {"same name in different blocks", "a = 1\nb { a = 2 }\nb { a = 3 }",
       R"({"a": 1, "b": [{"a": 2}, {"a": 3}]})"},
      {"brace and labels on later lines", "x\n\"l\"\n{\na = 1\n}", R"({"x": [{"l": [{"a": 1}]}]})"},
      {"single-line block with several attributes",
       R"(listener "tcp" { address = "0.0.0.0:8200" tls_cert_file = "c" tls_key_file = "k" })",
       R"({"listener": [{"tcp": [{"address": "0.0.0.0:8200", "tls_cert_file": "c",
                                  "tls_key_file": "k"}]}]})"},
      {"labels with escapes", R"(x "a\"b" {})", R"({"x": [{"a\"b": [{}]}]})"},
  };
  for (const OkCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto got = parseHcl(c.hcl, "t.hcl");
    ASSERT_TRUE(got.isOk()) << got.status().toString();
    EXPECT_EQ(*got, json::parse(c.json)) << got->dump();
  }
}

TEST(HclTest, IntegersStayIntegersAndOthersAreDoubles) {
  auto got = parseHcl("i = 9007199254740993\nn = -3\nf = 1.0\ne = 1e2\nz = -0.0", "t.hcl");
  ASSERT_TRUE(got.isOk()) << got.status().toString();
  EXPECT_TRUE(got->at("i").is_number_integer());
  EXPECT_EQ(got->at("i").get<int64_t>(), 9007199254740993);  // Not representable as a double.
  EXPECT_TRUE(got->at("n").is_number_integer());
  EXPECT_TRUE(got->at("f").is_number_float());
  EXPECT_TRUE(got->at("e").is_number_float());
  EXPECT_TRUE(got->at("z").is_number_float());
  EXPECT_TRUE(std::signbit(got->at("z").get<double>()));
}

struct ErrorCase {
  const char* name;
  std::string hcl;
  std::string message;
};

TEST(HclTest, ErrorsNameTheLineColumnAndWhatWasExpected) {
  const ErrorCase cases[] = {
      // Bodies and attributes.
      {"value without '='",
       "storage \"sqlite\" { path = \"/db\" }\nlistener \"tcp\" {\n  address"
       "       127.0.0.1:8300\n}",
       "t.hcl:3:17: expected '=' or a block body after 'address', got a number"},
      {"name at end of file", "a = 1\nb",
       "t.hcl:2:2: expected '=' or a block body after 'b', "
       "got end of file"},
      {"missing value", "a =", "t.hcl:1:4: expected a value for 'a', got end of file"},
      {"missing value before next line", "a =\nb = 2",
       "t.hcl:2:1: expected a value for 'a', got 'b' (variables and function calls are not "
       "supported; quote text)"},
      {"bare word value", "a = foo",
       "t.hcl:1:5: expected a value for 'a', got 'foo' (variables and function calls are not "
       "supported; quote text)"},
      {"function call", "a = file(\"x\")",
       "t.hcl:1:5: expected a value for 'a', got 'file' (variables and function calls are not "
       "supported; quote text)"},
      {"duplicate attribute", "a = 1\nb = 2\na = 3",
       "t.hcl:3:1: duplicate attribute 'a' (first set at 1:1)"},
      {"duplicate attribute in a block", "x {\n  a = 1\n  a = 2\n}",
       "t.hcl:3:3: duplicate attribute 'a' (first set at 2:3)"},
      {"attribute then block", "a = 1\na {}",
       "t.hcl:2:1: 'a' is already an attribute at 1:1; it cannot also be a block"},
      {"block then attribute", "a {}\na = 1",
       "t.hcl:2:1: 'a' is already a block at 1:1; it cannot also be an attribute"},
      {"quoted attribute name", "\"a\" = 1",
       "t.hcl:1:1: expected an attribute name or a block type, got a string"},
      {"number as name", "1 = 2",
       "t.hcl:1:1: expected an attribute name or a block type, got a number"},
      {"comma between attributes", "a = 1, b = 2",
       "t.hcl:1:6: expected an attribute name or a block type, got ','"},
      {"two values", "a = \"x\" \"y\"",
       "t.hcl:1:9: expected an attribute name or a block type, got a string"},
      {"control character", "a = \x01",
       "t.hcl:1:5: expected a value for 'a', got character U+0001"},
      {"columns count characters, not bytes", "a = \"\xC3\xA9\" b",
       "t.hcl:1:10: expected '=' or a block body after 'b', got end of file"},
      {"invalid UTF-8", "a = 1\nb = \"x\xFFy\"",
       "t.hcl:2:7: invalid UTF-8 (config files must be UTF-8 text)"},
      {"overlong UTF-8", "a = \"\xC0\xAF\"",
       "t.hcl:1:6: invalid UTF-8 (config files must be UTF-8 text)"},
      {"UTF-8 surrogate", "a = \"\xED\xA0\x80\"",
       "t.hcl:1:6: invalid UTF-8 (config files must be UTF-8 text)"},
      {"truncated UTF-8", "a = \"\xE2\x82",
       "t.hcl:1:6: invalid UTF-8 (config files must be UTF-8 text)"},
      // Blocks.
      {"unclosed block", "listener \"tcp\" {\n  a = 1\n",
       "t.hcl:3:1: expected '}' to close block 'listener' opened at 1:16, got end of file"},
      {"stray closing brace", "a = 1\n}", "t.hcl:2:1: unexpected '}': no block is open here"},
      {"labels without a body", "listener \"tcp\"\n  port = 1",
       "t.hcl:2:3: expected '{' or another label after 'listener \"tcp\"', got 'port' (if "
       "'listener' is an attribute, it needs '=')"},
      {"two labels without a body", "x \"a\" \"b\" = 1",
       "t.hcl:1:11: expected '{' or another label after 'x \"a\" \"b\"', got '='"},
      {"unquoted label", "listener tcp {}",
       "t.hcl:1:10: expected '=' or a block body after 'listener', got 'tcp'"},
      // Strings.
      {"unterminated string", "a = \"abc",
       "t.hcl:1:5: string is not closed before the end of "
       "the file"},
      {"newline in a string", "a = \"abc\nb = 1\"",
       "t.hcl:1:5: string is not closed on its line (use \\n or a heredoc for multi-line text)"},
      {"unterminated label", "x \"abc {}",
       "t.hcl:1:3: string is not closed before the end of "
       "the file"},
      {"invalid escape", R"(a = "x\q")",
       R"(t.hcl:1:7: invalid escape '\q' in string; use \n \r \t \" \\ \uNNNN or \UNNNNNNNN)"},
      {"escaped newline", "a = \"x\\\n\"",
       "t.hcl:1:7: invalid escape '\\' followed by end of line in string; use \\n \\r \\t \\\" "
       "\\\\ \\uNNNN or \\UNNNNNNNN"},
      {"backslash at end of file", "a = \"x\\",
       "t.hcl:1:7: invalid escape '\\' at the end of the file in string; use \\n \\r \\t \\\" "
       "\\\\ \\uNNNN or \\UNNNNNNNN"},
      {"short unicode escape", R"(a = "\u12G4")",
       R"(t.hcl:1:6: '\u' must be followed by 4 hex digits)"},
      {"short long unicode escape", R"(a = "\U0001F60")",
       R"(t.hcl:1:6: '\U' must be followed by 8 hex digits)"},
      {"surrogate escape", R"(a = "\uD800")", R"(t.hcl:1:6: '\uD800' is not a Unicode character)"},
      {"escape past U+10FFFF", R"(a = "\U00110000")",
       R"(t.hcl:1:6: '\U00110000' is not a Unicode character)"},
      {"unclosed template", "a = \"${x\"", "t.hcl:1:6: '${' is not closed by '}'"},
      {"unclosed template directive", "a = \"x %{ if y \"", "t.hcl:1:8: '%{' is not closed by '}'"},
      {"newline in a string inside a template", "a = \"${f(\"x\n\")}\"",
       "t.hcl:1:6: '${' is not closed by '}'"},
      // Comments.
      {"unclosed block comment", "a = 1 /* x", "t.hcl:1:7: comment '/*' is not closed by '*/'"},
      {"single slash", "a = 1 / 2",
       "t.hcl:1:7: expected an attribute name or a block type, "
       "got '/'"},
      // Lists.
      {"list without commas", "a = [1 2]",
       "t.hcl:1:8: expected ',' or ']' after a list element (list opened at 1:5), got a number"},
      {"unclosed list", "a = [1,",
       "t.hcl:1:8: expected a list element or ']' to close the list opened at 1:5, got end of "
       "file"},
      {"unclosed list after element", "a = [\n  1\n",
       "t.hcl:3:1: expected ',' or ']' after a list element (list opened at 1:5), got end of file"},
      {"empty element", "a = [,]",
       "t.hcl:1:6: expected a list element or ']' to close the list opened at 1:5, got ','"},
      {"double comma", "a = [1,,2]",
       "t.hcl:1:8: expected a list element or ']' to close the list opened at 1:5, got ','"},
      // Objects.
      {"object key without '='", "a = { k 1 }",
       "t.hcl:1:9: expected '=' or ':' after object key 'k', got a number"},
      {"duplicate object key", "a = { k = 1, k = 2 }",
       "t.hcl:1:14: duplicate key 'k' in object (first set at 1:7)"},
      {"duplicate quoted object key", "a = {\n  k = 1\n  \"k\" = 2\n}",
       "t.hcl:3:3: duplicate key 'k' in object (first set at 2:3)"},
      {"number as object key", "a = { 1 = 2 }",
       "t.hcl:1:7: expected an object key or '}' to close the object opened at 1:5, got a number"},
      {"unclosed object", "a = {\n  k = 1\n",
       "t.hcl:3:1: expected an object key or '}' to close the object opened at 1:5, got end of "
       "file"},
      {"object key without value", "a = { k = }",
       "t.hcl:1:11: expected a value for key 'k', got '}'"},
      // Numbers.
      {"two decimal points", "a = 1.2.3", "t.hcl:1:5: invalid number '1.2.3'"},
      {"letters after digits", "a = 12abc", "t.hcl:1:5: invalid number '12abc'"},
      {"trailing decimal point", "a = 1.", "t.hcl:1:5: invalid number '1.'"},
      {"leading decimal point", "a = .5", "t.hcl:1:5: expected a value for 'a', got '.'"},
      {"plus sign", "a = +5", "t.hcl:1:5: expected a value for 'a', got '+'"},
      {"lone minus", "a = -", "t.hcl:1:6: expected a digit after '-', got end of file"},
      {"minus space", "a = - 5", "t.hcl:1:6: expected a digit after '-', got ' '"},
      {"empty exponent", "a = 1e",
       "t.hcl:1:6: expected digits in the exponent of the number at 1:5"},
      {"signed empty exponent", "a = 2.5e+ 1",
       "t.hcl:1:8: expected digits in the exponent of the number at 1:5"},
      {"integer too large", "a = 9223372036854775808",
       "t.hcl:1:5: integer 9223372036854775808 does not fit in 64 bits"},
      {"integer too small", "a = -9223372036854775809",
       "t.hcl:1:5: integer -9223372036854775809 does not fit in 64 bits"},
      {"float too large", "a = 1e999", "t.hcl:1:5: number 1e999 is out of range"},
      // Heredocs.
      {"unclosed heredoc", "a = <<EOF\nx\n",
       "t.hcl:1:5: heredoc '<<EOF' has no closing line 'EOF' before the end of the file"},
      {"unclosed heredoc at end of file", "a = <<-EOF\n",
       "t.hcl:1:5: heredoc '<<-EOF' has no closing line 'EOF' before the end of the file"},
      {"heredoc without marker", "a = <<\nx",
       "t.hcl:1:7: expected a heredoc marker name after '<<', got end of line"},
      {"heredoc with text after the marker", "a = <<EOF x\nEOF",
       "t.hcl:1:10: expected a new line after heredoc marker '<<EOF', got ' '"},
      {"heredoc marker at end of file", "a = <<EOF",
       "t.hcl:1:10: expected a new line after heredoc marker '<<EOF', got end of file"},
      {"single angle bracket", "a = <EOF", "t.hcl:1:5: expected a value for 'a', got '<'"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto got = parseHcl(c.hcl, "t.hcl");
    ASSERT_FALSE(got.isOk()) << got->dump();
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(got.status().message(), c.message);
  }
}

std::string nested(int levels, std::string_view open, std::string_view inner,
                   std::string_view close) {
  std::string s;
  for (int i = 0; i < levels; ++i) {
    s += open;
  }
  s += inner;
  for (int i = 0; i < levels; ++i) {
    s += close;
  }
  return s;
}

TEST(HclTest, NestingIsLimited) {
  // 64 levels of lists, objects and blocks are fine; one more is an error naming where.
  EXPECT_TRUE(parseHcl("a = " + nested(kConfigMaxDepth, "[", "1", "]"), "t.hcl").isOk());
  EXPECT_TRUE(parseHcl("a = " + nested(kConfigMaxDepth, "{b = ", "1", "}"), "t.hcl").isOk());
  EXPECT_TRUE(parseHcl(nested(kConfigMaxDepth, "b {", "", "}"), "t.hcl").isOk());
  EXPECT_TRUE(
      parseHcl("a = \"" + nested(kConfigMaxDepth, "${f(\"", "", "\")}") + "\"", "t.hcl").isOk());

  const std::string depth_error =
      "nesting is deeper than 64 levels of blocks, labels, lists and objects";
  auto lists = parseHcl("a = " + nested(kConfigMaxDepth + 1, "[", "1", "]"), "t.hcl");
  ASSERT_FALSE(lists.isOk());
  EXPECT_EQ(lists.status().message(), "t.hcl:1:69: " + depth_error);
  auto blocks = parseHcl("x = 1\n" + nested(kConfigMaxDepth + 1, "b {", "", "}"), "t.hcl");
  ASSERT_FALSE(blocks.isOk());
  EXPECT_EQ(blocks.status().message(), "t.hcl:2:195: " + depth_error);
  auto labels = parseHcl("x" + nested(kConfigMaxDepth + 1, " \"l\"", " {}", ""), "t.hcl");
  ASSERT_FALSE(labels.isOk());
  EXPECT_EQ(labels.status().message(),
            "t.hcl:1:" + std::to_string(3 + 4 * kConfigMaxDepth) + ": " + depth_error);
  EXPECT_TRUE(parseHcl("x" + nested(kConfigMaxDepth - 1, " \"l\"", " {}", ""), "t.hcl").isOk());
  auto mixed = parseHcl(nested(40, "b {", "", "}") + "\n" +
                            nested(20, "b {", "a = " + nested(45, "[{c = ", "1", "}]"), "}"),
                        "t.hcl");
  ASSERT_FALSE(mixed.isOk());
  EXPECT_THAT(mixed.status().message(), testing::StartsWith("t.hcl:2:"));
  auto templates =
      parseHcl("a = \"" + nested(kConfigMaxDepth + 1, "${f(\"", "", "\")}") + "\"", "t.hcl");
  ASSERT_FALSE(templates.isOk());
  EXPECT_EQ(templates.status().message(), "t.hcl:1:" + std::to_string(6 + 5 * kConfigMaxDepth) +
                                              ": template nesting is deeper than 64 levels");
}

TEST(HclTest, TheJsonFormOfTheDeepestHclIsAcceptedToo) {
  // Each labelled block is two HCL levels and four JSON levels.
  auto hcl = parseHcl(nested(kConfigMaxDepth / 2, "b \"l\" {", "", "}"), "t.hcl");
  ASSERT_TRUE(hcl.isOk()) << hcl.status().toString();
  auto json_form = parseJsonConfig(hcl->dump(), "t.json");
  ASSERT_TRUE(json_form.isOk()) << json_form.status().toString();
  EXPECT_EQ(*json_form, *hcl);
  EXPECT_FALSE(parseHcl(nested(kConfigMaxDepth / 2 + 1, "b \"l\" {", "", "}"), "t.hcl").isOk());
}

TEST(HclTest, HostileInputFailsQuicklyWithoutCrashing) {
  const size_t n = 1 << 20;
  const std::string inputs[] = {
      "a = " + std::string(n, '['),          "a = " + std::string(n, '{'),
      nested(n / 3, "b{", "", ""),           "a = \"" + nested(n / 5, "${f(\"", "", ""),
      "a = \"" + std::string(n, '$'),        "a = " + std::string(n, '/'),
      nested(n / 3, "/*", "", ""),           "a = <<EOF\n" + std::string(n, '\n'),
      "a = " + std::string(n, '9'),          "a = " + std::string(n, '-'),
      "a = [" + nested(n / 2, "1,", "", ""), std::string(n, '\xFF'),
  };
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& input : inputs) {
    auto got = parseHcl(input, "t.hcl");
    EXPECT_FALSE(got.isOk()) << input.substr(0, 20);
  }
  // Linear parsing handles 12 MiB well within this even in a sanitizer build.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(HclTest, InputSizeIsLimited) {
  std::string big = "a = \"" + std::string(kConfigMaxBytes - 6, 'x') + "\"";
  EXPECT_TRUE(parseHcl(big, "t.hcl").isOk());
  big += " ";
  auto got = parseHcl(big, "big.hcl");
  ASSERT_FALSE(got.isOk());
  EXPECT_EQ(got.status().message(),
            "big.hcl: file is 4194305 bytes, more than the 4194304-byte limit for config files");
  auto json_got = parseJsonConfig(big, "big.json");
  ASSERT_FALSE(json_got.isOk());
  EXPECT_EQ(json_got.status().message(),
            "big.json: file is 4194305 bytes, more than the 4194304-byte limit for config files");
}

constexpr const char* kServerHcl = R"(# Tessera server config.
storage "sqlite" { path = "/var/lib/tessera/tessera.db" }
listener "tcp" {
  address          = "127.0.0.1:8300"
  chroot_tenant    = "team-1"
  tls_cert_file    = "/etc/tessera/team-1.pem"
  tls_key_file     = "/etc/tessera/team-1-key.pem"
  tls_client_ca_file = "/etc/tessera/clients-ca.pem"   # optional mTLS
}
listener "tcp" { address = "0.0.0.0:8200" tls_cert_file = "..." tls_key_file = "..." }
audit "file" { path = "/var/log/tessera/audit.log" }
)";

// The same config in the JSON shape parseHcl documents.
constexpr const char* kServerJson = R"({
  "storage": [{"sqlite": [{"path": "/var/lib/tessera/tessera.db"}]}],
  "listener": [
    {"tcp": [{
      "address": "127.0.0.1:8300",
      "chroot_tenant": "team-1",
      "tls_cert_file": "/etc/tessera/team-1.pem",
      "tls_key_file": "/etc/tessera/team-1-key.pem",
      "tls_client_ca_file": "/etc/tessera/clients-ca.pem"
    }]},
    {"tcp": [{"address": "0.0.0.0:8200", "tls_cert_file": "...", "tls_key_file": "..."}]}
  ],
  "audit": [{"file": [{"path": "/var/log/tessera/audit.log"}]}]
})";

// The same config as people write it for Vault: objects where there is one block.
constexpr const char* kServerVaultStyleJson = R"({
  "storage": {"sqlite": {"path": "/var/lib/tessera/tessera.db"}},
  "listener": [
    {"tcp": {
      "address": "127.0.0.1:8300",
      "chroot_tenant": "team-1",
      "tls_cert_file": "/etc/tessera/team-1.pem",
      "tls_key_file": "/etc/tessera/team-1-key.pem",
      "tls_client_ca_file": "/etc/tessera/clients-ca.pem"
    }},
    {"tcp": {"address": "0.0.0.0:8200", "tls_cert_file": "...", "tls_key_file": "..."}}
  ],
  "audit": {"file": {"path": "/var/log/tessera/audit.log"}}
})";

TEST(HclTest, RealisticServerConfig) {
  auto config = parseHcl(kServerHcl, "server.hcl");
  ASSERT_TRUE(config.isOk()) << config.status().toString();
  auto listeners = hclBlocks(*config, "listener", 1, "server.hcl");
  ASSERT_TRUE(listeners.isOk()) << listeners.status().toString();
  ASSERT_EQ(listeners->size(), 2U);
  EXPECT_EQ((*listeners)[0].labels, std::vector<std::string>{"tcp"});
  EXPECT_EQ((*listeners)[0].body->at("address"), "127.0.0.1:8300");
  EXPECT_EQ((*listeners)[0].body->at("tls_client_ca_file"), "/etc/tessera/clients-ca.pem");
  EXPECT_EQ((*listeners)[1].labels, std::vector<std::string>{"tcp"});
  EXPECT_EQ((*listeners)[1].body->at("address"), "0.0.0.0:8200");
  EXPECT_FALSE((*listeners)[1].body->contains("tls_client_ca_file"));
  auto storage = hclBlocks(*config, "storage", 1, "server.hcl");
  ASSERT_TRUE(storage.isOk());
  ASSERT_EQ(storage->size(), 1U);
  EXPECT_EQ((*storage)[0].labels, std::vector<std::string>{"sqlite"});
  EXPECT_EQ((*storage)[0].body->at("path"), "/var/lib/tessera/tessera.db");
}

TEST(HclTest, HclAndJsonFormsParseToEqualJson) {
  auto from_hcl = parseHcl(kServerHcl, "server.hcl");
  auto from_json = parseJsonConfig(kServerJson, "server.json");
  ASSERT_TRUE(from_hcl.isOk()) << from_hcl.status().toString();
  ASSERT_TRUE(from_json.isOk()) << from_json.status().toString();
  EXPECT_EQ(*from_hcl, *from_json);

  // Vault-style JSON differs in shape, but hclBlocks reads the same blocks from it.
  auto vault = parseJsonConfig(kServerVaultStyleJson, "server.json");
  ASSERT_TRUE(vault.isOk()) << vault.status().toString();
  for (const char* type : {"storage", "listener", "audit"}) {
    SCOPED_TRACE(type);
    auto a = hclBlocks(*from_hcl, type, 1, "server.hcl");
    auto b = hclBlocks(*vault, type, 1, "server.json");
    ASSERT_TRUE(a.isOk() && b.isOk());
    ASSERT_EQ(a->size(), b->size());
    for (size_t i = 0; i < a->size(); ++i) {
      EXPECT_EQ((*a)[i].labels, (*b)[i].labels);
      EXPECT_EQ(*(*a)[i].body, *(*b)[i].body);
    }
  }
}

struct BlocksCase {
  const char* name;
  const char* json;
  const char* type;
  size_t label_count;
  // Each block as "label/label:body-json".
  std::vector<std::string> blocks;
};

TEST(HclTest, HclBlocksReadsEveryJsonForm) {
  const BlocksCase cases[] = {
      {"absent", R"({"x": 1})", "listener", 1, {}},
      {"canonical",
       R"({"l": [{"tcp": [{"a": 1}]}, {"unix": [{"a": 2}]}]})",
       "l",
       1,
       {"tcp:{\"a\":1}", "unix:{\"a\":2}"}},
      {"object for the type", R"({"l": {"tcp": {"a": 1}}})", "l", 1, {"tcp:{\"a\":1}"}},
      {"several labels in one object",
       R"({"l": {"tcp": {"a": 1}, "unix": [{"a": 2}, {"a": 3}]}})",
       "l",
       1,
       {"tcp:{\"a\":1}", "unix:{\"a\":2}", "unix:{\"a\":3}"}},
      {"no labels, object", R"({"t": {"a": 1}})", "t", 0, {":{\"a\":1}"}},
      {"no labels, array", R"({"t": [{"a": 1}, {}]})", "t", 0, {":{\"a\":1}", ":{}"}},
      {"two labels",
       R"({"r": [{"gpu": [{"h200": [{"n": 8}]}]}, {"gpu": {"a100": {}}}]})",
       "r",
       2,
       {"gpu/h200:{\"n\":8}", "gpu/a100:{}"}},
  };
  for (const BlocksCase& c : cases) {
    SCOPED_TRACE(c.name);
    const json config = json::parse(c.json);
    auto got = hclBlocks(config, c.type, c.label_count, "s.json");
    ASSERT_TRUE(got.isOk()) << got.status().toString();
    std::vector<std::string> described;
    for (const HclBlock& b : *got) {
      std::string labels;
      for (const std::string& l : b.labels) {
        labels += (labels.empty() ? "" : "/") + l;
      }
      described.push_back(labels + ":" + b.body->dump());
    }
    EXPECT_EQ(described, c.blocks);
  }
}

TEST(HclTest, HclBlocksNamesTheJsonPathThatDoesNotFit) {
  const struct {
    const char* json;
    size_t label_count;
    const char* message;
  } cases[] = {
      {R"({"l": 5})", 1,
       "s.json: /l: expected an object keyed by block label or an array of them, got number"},
      {R"({"l": ["tcp"]})", 1, "s.json: /l/0: expected an object keyed by block label, got string"},
      {R"({"l": [{"tcp": [1]}]})", 1,
       "s.json: /l/0/tcp/0: expected a block body (an object), got number"},
      {R"({"l": {"a/b~": "x"}})", 1,
       "s.json: /l/a~1b~0: expected a block body (an object) or an array of them, got string"},
      {R"({"l": [{"a": 1}]})", 2,
       "s.json: /l/0/a: expected an object keyed by block label or an array of them, got number"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.json);
    const json config = json::parse(c.json);
    auto got = hclBlocks(config, "l", c.label_count, "s.json");
    ASSERT_FALSE(got.isOk());
    EXPECT_EQ(got.status().message(), c.message);
  }
  const json array = json::array();
  auto not_object = hclBlocks(array, "l", 1, "s.json");
  ASSERT_FALSE(not_object.isOk());
  EXPECT_EQ(not_object.status().message(), "s.json: expected a block body (an object), got array");
}

TEST(JsonConfigTest, ErrorsNameTheLineAndColumn) {
  const ErrorCase cases[] = {
      {"missing colon", "{\n  \"a\": 1,\n  \"b\" 2\n}",
       "t.json:3:7: syntax error while parsing object separator - unexpected number literal; "
       "expected ':'"},
      {"trailing comma", "{\"a\": [1, 2,]}",
       "t.json:1:13: syntax error while parsing value - unexpected ']'; expected '[', '{', or a "
       "literal"},
      {"unclosed object", "{\"a\": 1",
       "t.json:1:8: syntax error while parsing object - unexpected end of input; expected '}'"},
      {"empty", "",
       "t.json:1:1: syntax error while parsing value - unexpected end of input; expected '[', "
       "'{', or a literal"},
      {"invalid UTF-8", "{\"a\": \"\xFF\"}",
       "t.json:1:8: syntax error while parsing value - invalid string: ill-formed UTF-8 byte; "
       "last read: '\"\\xFF'"},
      {"comments are not JSON", "{\"a\": 1 // no\n}",
       "t.json:1:9: syntax error while parsing object - invalid literal; last read: '1 /'; "
       "expected '}'"},
      {"not an object", "[1, 2]", "t.json: expected a JSON object at the top level, got array"},
      {"duplicate key", R"({"l": [{"tcp": [{"a": 1, "b": [], "a": 2}]}]})",
       "t.json: duplicate key 'a' in the object at /l/0/tcp/0"},
      {"duplicate top-level key", R"({"a": {"x": 1}, "a": 2})",
       "t.json: duplicate key 'a' in the object at /"},
      {"duplicate key after arrays", R"({"l": [[], {}, [1, {"k": 1, "k": 1}]]})",
       "t.json: duplicate key 'k' in the object at /l/2/1"},
      {"too deep", "{\"a\": " + nested(kConfigMaxJsonDepth + 1, "[", "", "]") + "}",
       "t.json: nesting is deeper than 128 levels at /a" +
           nested(kConfigMaxJsonDepth, "/0", "", "")},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto got = parseJsonConfig(c.hcl, "t.json");
    ASSERT_FALSE(got.isOk()) << got->dump();
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(got.status().message(), c.message);
  }
  EXPECT_TRUE(
      parseJsonConfig("{\"a\": " + nested(kConfigMaxJsonDepth, "[", "", "]") + "}", "t.json")
          .isOk());
  EXPECT_FALSE(parseJsonConfig(nested(100000, "[", "", "]"), "t.json").isOk());
}

class ConfigFileTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(testing::TempDir()) /
           ("hcl_test_" + std::to_string(::getpid()) + "_" +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, std::string_view text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  std::filesystem::path dir_;
};

TEST_F(ConfigFileTest, ReadsHclAndJsonByExtension) {
  auto hcl = parseConfigFile(write("server.hcl", kServerHcl));
  auto json_config = parseConfigFile(write("server.json", kServerJson));
  ASSERT_TRUE(hcl.isOk()) << hcl.status().toString();
  ASSERT_TRUE(json_config.isOk()) << json_config.status().toString();
  EXPECT_EQ(*hcl, *json_config);
}

TEST_F(ConfigFileTest, ErrorsNameTheFile) {
  const std::string bad_hcl = write("bad.hcl", "a = 1\nb = [1 2]\n");
  const std::string bad_json = write("bad.json", "{\n  \"a\": tru\n}");
  const std::string yaml = write("server.yaml", "a: 1\n");
  const std::string no_extension = write("server", "a = 1\n");
  const std::string missing = (dir_ / "missing.hcl").string();
  std::filesystem::create_directories(dir_ / "dir.hcl");
  const std::string directory = (dir_ / "dir.hcl").string();
  const std::string huge = write("huge.json", std::string(kConfigMaxBytes + 10, ' '));

  const struct {
    std::string path;
    StatusCode code;
    std::string message;
  } cases[] = {
      {bad_hcl, StatusCode::kInvalidArgument,
       bad_hcl + ":2:8: expected ',' or ']' after a list element (list opened at 2:5), got a "
                 "number"},
      {bad_json, StatusCode::kInvalidArgument,
       bad_json + ":2:11: syntax error while parsing value - invalid literal; last read: "
                  "'\"a\": tru<U+000A>'"},
      {yaml, StatusCode::kInvalidArgument,
       yaml + ": unknown config file type '.yaml' (expected a .hcl or .json file)"},
      {no_extension, StatusCode::kInvalidArgument,
       no_extension + ": unknown config file type '' (expected a .hcl or .json file)"},
      {missing, StatusCode::kNotFound, missing + ": cannot open file"},
      {directory, StatusCode::kInvalidArgument,
       directory + ": is a directory, expected a config file"},
      {huge, StatusCode::kInvalidArgument,
       huge + ": file is more than the 4194304-byte limit for config files"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.path);
    auto got = parseConfigFile(c.path);
    ASSERT_FALSE(got.isOk());
    EXPECT_EQ(got.status().code(), c.code);
    EXPECT_EQ(got.status().message(), c.message);
  }
}

}  // namespace
}  // namespace tessera::core
