#include "core/hcl.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <utility>

namespace tessera::core {
namespace {

using nlohmann::json;

constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";
constexpr size_t kNone = std::string_view::npos;

bool isIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isIdentChar(char c) { return isIdentStart(c) || isDigit(c) || c == '-'; }
bool isUtf8Continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// The length of the valid UTF-8 sequence at s[i], or 0 when there is none (overlong forms,
// surrogates and code points past U+10FFFF are invalid, as nlohmann's dump() requires).
size_t utf8Length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    return 1;
  }
  size_t len = 0;
  uint32_t cp = 0;
  uint32_t min = 0;
  if ((c & 0xE0) == 0xC0) {
    len = 2, cp = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, cp = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() - i < len) {
    return 0;
  }
  for (size_t k = 1; k < len; ++k) {
    if (!isUtf8Continuation(s[i + k])) {
      return 0;
    }
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  return len;
}

// The offset of the first byte of `s` that is not valid UTF-8, or kNone.
size_t findInvalidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8Length(s, i);
    if (len == 0) {
      return i;
    }
    i += len;
  }
  return kNone;
}

// `s` made safe to show in a one-line message: control characters escaped, bytes that are not
// UTF-8 shown as \xNN (so the message itself can go into JSON), cut after `max_chars`.
std::string forMessage(std::string_view s, size_t max_chars = 60) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  size_t chars = 0;
  for (size_t i = 0; i < s.size(); ++chars) {
    if (chars == max_chars) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = utf8Length(s, i);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (len == 0 || c < 0x20 || c == 0x7F) {
      out += len == 0 ? "\\x" : "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    } else {
      out.append(s.substr(i, len));
      i += len;
      continue;
    }
    ++i;
  }
  return out;
}

void appendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// "line:column" of byte `offset` in `text`, both from 1; columns count code points. `offset`
// may be text.size() (the end of the file).
std::string lineColumn(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  size_t line = 1;
  size_t line_start = text.starts_with(kUtf8Bom) ? kUtf8Bom.size() : 0;
  for (size_t i = line_start; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  size_t column = 1;
  for (size_t i = line_start; i < offset; ++i) {
    if (!isUtf8Continuation(text[i])) {
      ++column;
    }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

std::string tooLarge(std::string_view filename, size_t size) {
  return std::string(filename) + ": file is " + std::to_string(size) + " bytes, more than the " +
         std::to_string(kConfigMaxBytes) + "-byte limit for config files";
}

// A hand-written recursive-descent parser. Recursion happens only when entering a block, list
// or object, each of which goes through enter(), so it is at most kConfigMaxDepth deep. Every
// loop consumes input or returns, and nothing is rescanned, so parsing is linear.
class HclParser {
 public:
  HclParser(std::string_view text, std::string_view filename) : text_(text), filename_(filename) {}

  Result<json> parse() {
    if (text_.size() > kConfigMaxBytes) {
      return invalidArgument(tooLarge(filename_, text_.size()));
    }
    if (text_.starts_with(kUtf8Bom)) {
      pos_ = kUtf8Bom.size();
    }
    if (size_t bad = findInvalidUtf8(text_); bad != kNone) {
      return errorAt(bad, "invalid UTF-8 (config files must be UTF-8 text)");
    }
    json body = json::object();
    TESSERA_RETURN_IF_ERROR(parseBody(body, kNone, ""));
    return body;
  }

 private:
  struct Definition {
    bool is_block;
    size_t offset;
  };
  using Definitions = std::map<std::string, Definition, std::less<>>;

  bool atEnd() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }

  Status errorAt(size_t offset, std::string_view message) const {
    return invalidArgument(std::string(filename_) + ":" + lineColumn(text_, offset) + ": " +
                           std::string(message));
  }

  // "3:7", for messages that point back at an earlier place.
  std::string where(size_t offset) const { return lineColumn(text_, offset); }

  // What the text at `offset` looks like, for "expected X, got Y" messages.
  std::string describeAt(size_t offset) const {
    if (offset >= text_.size()) {
      return "end of file";
    }
    const char c = text_[offset];
    if (isIdentStart(c)) {
      size_t end = offset;
      while (end < text_.size() && isIdentChar(text_[end])) {
        ++end;
      }
      constexpr size_t kMaxShown = 40;
      std::string_view word = text_.substr(offset, std::min(end - offset, kMaxShown));
      return "'" + std::string(word) + (end - offset > kMaxShown ? "...'" : "'");
    }
    if (c == '"') {
      return "a string";
    }
    if (isDigit(c) || (c == '-' && offset + 1 < text_.size() && isDigit(text_[offset + 1]))) {
      return "a number";
    }
    if (text_.substr(offset, 2) == "<<") {
      return "a heredoc";
    }
    if (c == '\n' || c == '\r') {
      return "end of line";
    }
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      return std::string("character U+00") + kHex[u >> 4] + kHex[u & 0xF];
    }
    size_t end = offset + 1;
    while (end < text_.size() && isUtf8Continuation(text_[end])) {
      ++end;
    }
    return "'" + std::string(text_.substr(offset, end - offset)) + "'";
  }

  // "'\\q'" for the backslash at `offset` and the character after it.
  std::string describeEscape(size_t offset) const {
    const size_t next = offset + 1;
    if (next >= text_.size()) {
      return "'\\' at the end of the file";
    }
    const auto u = static_cast<unsigned char>(text_[next]);
    if (u < 0x20 || u == 0x7F) {
      return "'\\' followed by " + describeAt(next);
    }
    size_t end = next + 1;
    while (end < text_.size() && isUtf8Continuation(text_[end])) {
      ++end;
    }
    return "'\\" + std::string(text_.substr(next, end - next)) + "'";
  }

  Status enter(size_t offset) {
    if (++depth_ > kConfigMaxDepth) {
      return errorAt(offset, "nesting is deeper than " + std::to_string(kConfigMaxDepth) +
                                 " levels of blocks, labels, lists and objects");
    }
    return Status::ok();
  }

  std::string_view readIdent() {
    const size_t start = pos_;
    while (!atEnd() && isIdentChar(text_[pos_])) {
      ++pos_;
    }
    return text_.substr(start, pos_ - start);
  }

  // Skips whitespace (newlines included) and comments.
  Status skipSpace() {
    while (!atEnd()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++pos_;
      } else if (c == '#' || (c == '/' && peek(1) == '/')) {
        const size_t eol = text_.find('\n', pos_);
        pos_ = eol == kNone ? text_.size() : eol;
      } else if (c == '/' && peek(1) == '*') {
        const size_t close = text_.find("*/", pos_ + 2);
        if (close == kNone) {
          return errorAt(pos_, "comment '/*' is not closed by '*/'");
        }
        pos_ = close + 2;
      } else {
        break;
      }
    }
    return Status::ok();
  }

  // body := (attribute | block)* ; ends at '}' (consumed) for a block, at the end for the file.
  Status parseBody(json& body, size_t open_offset, std::string_view block_name) {
    Definitions defs;
    for (;;) {
      TESSERA_RETURN_IF_ERROR(skipSpace());
      if (atEnd()) {
        if (open_offset == kNone) {
          return Status::ok();
        }
        return errorAt(pos_, "expected '}' to close block '" + forMessage(block_name) +
                                 "' opened at " + where(open_offset) + ", got end of file");
      }
      if (text_[pos_] == '}') {
        if (open_offset == kNone) {
          return errorAt(pos_, "unexpected '}': no block is open here");
        }
        ++pos_;
        return Status::ok();
      }
      TESSERA_RETURN_IF_ERROR(parseItem(body, defs));
    }
  }

  Status parseItem(json& body, Definitions& defs) {
    const size_t name_offset = pos_;
    if (!isIdentStart(text_[pos_])) {
      return errorAt(pos_, "expected an attribute name or a block type, got " + describeAt(pos_));
    }
    const std::string name(readIdent());
    const std::string shown = forMessage(name);
    TESSERA_RETURN_IF_ERROR(skipSpace());
    const auto previous = defs.find(name);

    if (peek() == '=') {
      if (previous != defs.end()) {
        return errorAt(name_offset, previous->second.is_block
                                        ? "'" + shown + "' is already a block at " +
                                              where(previous->second.offset) +
                                              "; it cannot also be an attribute"
                                        : "duplicate attribute '" + shown + "' (first set at " +
                                              where(previous->second.offset) + ")");
      }
      ++pos_;
      TESSERA_RETURN_IF_ERROR(skipSpace());
      json value;
      TESSERA_RETURN_IF_ERROR(parseValue(value, "a value for '" + shown + "'"));
      body[name] = std::move(value);
      defs.emplace(name, Definition{false, name_offset});
      return Status::ok();
    }

    std::vector<std::string> labels;
    std::string label_text;  // `"tcp" "x"`, for messages.
    while (peek() == '"') {
      // Each label nests the JSON one level deeper, so labels count towards the depth limit.
      TESSERA_RETURN_IF_ERROR(enter(pos_));
      std::string label;
      TESSERA_RETURN_IF_ERROR(parseString(label));
      label_text += " \"" + forMessage(label) + "\"";
      labels.push_back(std::move(label));
      TESSERA_RETURN_IF_ERROR(skipSpace());
    }
    if (peek() != '{') {
      if (labels.empty()) {
        return errorAt(
            pos_, "expected '=' or a block body after '" + shown + "', got " + describeAt(pos_));
      }
      return errorAt(
          pos_,
          "expected '{' or another label after '" + shown + label_text + "', got " +
              describeAt(pos_) +
              (labels.size() == 1 ? " (if '" + shown + "' is an attribute, it needs '=')" : ""));
    }
    if (previous != defs.end() && !previous->second.is_block) {
      return errorAt(name_offset, "'" + shown + "' is already an attribute at " +
                                      where(previous->second.offset) +
                                      "; it cannot also be a block");
    }
    const size_t open_offset = pos_;
    ++pos_;
    TESSERA_RETURN_IF_ERROR(enter(open_offset));
    json entry = json::object();
    TESSERA_RETURN_IF_ERROR(parseBody(entry, open_offset, name));
    depth_ -= static_cast<int>(labels.size()) + 1;
    for (size_t i = labels.size(); i-- > 0;) {
      json wrapped = json::object();
      json& level = wrapped[labels[i]];
      level = json::array();
      level.push_back(std::move(entry));
      entry = std::move(wrapped);
    }
    json& slot = body[name];
    if (slot.is_null()) {
      slot = json::array();
    }
    slot.push_back(std::move(entry));
    defs.emplace(name, Definition{true, name_offset});
    return Status::ok();
  }

  // `expected` says what was wanted here, e.g. "a value for 'address'".
  Status parseValue(json& out, std::string_view expected) {
    const size_t start = pos_;
    const char c = peek();
    if (c == '"') {
      std::string s;
      TESSERA_RETURN_IF_ERROR(parseString(s));
      out = std::move(s);
      return Status::ok();
    }
    if (c == '<' && peek(1) == '<') {
      std::string s;
      TESSERA_RETURN_IF_ERROR(parseHeredoc(s));
      out = std::move(s);
      return Status::ok();
    }
    if (c == '-' || isDigit(c)) {
      return parseNumber(out);
    }
    if (c == '[') {
      return parseList(out);
    }
    if (c == '{') {
      return parseObject(out);
    }
    if (!atEnd() && isIdentStart(c)) {
      const std::string_view word = readIdent();
      if (word == "true" || word == "false") {
        out = word == "true";
        return Status::ok();
      }
      if (word == "null") {
        out = nullptr;
        return Status::ok();
      }
      return errorAt(start, "expected " + std::string(expected) + ", got " + describeAt(start) +
                                " (variables and function calls are not supported; quote text)");
    }
    return errorAt(start, "expected " + std::string(expected) + ", got " + describeAt(start));
  }

  // A quoted string; pos_ is at its opening quote. Escapes are decoded in the outer string only;
  // `${...}`/`%{...}` and any strings inside them are copied verbatim.
  Status parseString(std::string& out) {
    struct Frame {
      bool template_expr;  // Inside `${`/`%{` rather than inside quotes.
      int braces;          // Open braces of a template_expr frame.
      size_t open;         // Where the frame began, for errors.
    };
    std::vector<Frame> frames{{false, 0, pos_}};
    int open_templates = 0;
    ++pos_;
    while (!atEnd()) {
      const char c = text_[pos_];
      Frame& top = frames.back();
      if (top.template_expr) {
        if (c == '{') {
          ++top.braces;
        } else if (c == '}' && --top.braces == 0) {
          frames.pop_back();
          --open_templates;
        } else if (c == '"') {
          frames.push_back({false, 0, pos_});
        }
        out.push_back(c);
        ++pos_;
        continue;
      }
      if (c == '"') {
        ++pos_;
        frames.pop_back();
        if (frames.empty()) {
          return Status::ok();
        }
        out.push_back(c);
        continue;
      }
      if (c == '\n') {
        return unclosedString(frames,
                              "string is not closed on its line (use \\n or a heredoc for "
                              "multi-line text)");
      }
      if (c == '\\') {
        if (frames.size() == 1) {
          TESSERA_RETURN_IF_ERROR(parseEscape(out));
        } else {
          out.push_back(c);
          ++pos_;
          if (!atEnd() && text_[pos_] != '\n') {
            out.push_back(text_[pos_]);
            ++pos_;
          }
        }
        continue;
      }
      if ((c == '$' || c == '%') && peek(1) == c && peek(2) == '{') {
        out.append(text_.substr(pos_, 3));
        pos_ += 3;
        continue;
      }
      if ((c == '$' || c == '%') && peek(1) == '{') {
        if (++open_templates > kConfigMaxDepth) {
          return errorAt(pos_, "template nesting is deeper than " +
                                   std::to_string(kConfigMaxDepth) + " levels");
        }
        frames.push_back({true, 1, pos_});
        out.append(text_.substr(pos_, 2));
        pos_ += 2;
        continue;
      }
      out.push_back(c);
      ++pos_;
    }
    return unclosedString(frames, "string is not closed before the end of the file");
  }

  // The error for a string that ends too early: when a `${`/`%{` is open, the likely mistake is
  // there (a missing '}' or an unbalanced '"' inside it), so the outermost one is named.
  template <typename Frames>
  Status unclosedString(const Frames& frames, std::string_view string_message) const {
    for (const auto& frame : frames) {
      if (frame.template_expr) {
        return errorAt(frame.open,
                       std::string("'") + text_[frame.open] + "{' is not closed by '}'");
      }
    }
    return errorAt(frames.front().open, string_message);
  }

  // A backslash escape of the outer string; pos_ is at the backslash.
  Status parseEscape(std::string& out) {
    const size_t start = pos_;
    const char e = peek(1);
    size_t hex_digits = 0;
    switch (e) {
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case '"':
        out.push_back('"');
        break;
      case '\\':
        out.push_back('\\');
        break;
      case 'u':
        hex_digits = 4;
        break;
      case 'U':
        hex_digits = 8;
        break;
      default:
        return errorAt(start, "invalid escape " + describeEscape(start) +
                                  " in string; use \\n \\r \\t \\\" \\\\ \\uNNNN or \\UNNNNNNNN");
    }
    pos_ += 2;
    if (hex_digits == 0) {
      return Status::ok();
    }
    uint32_t cp = 0;
    for (size_t i = 0; i < hex_digits; ++i) {
      const char h = peek(i);
      int v = 0;
      if (isDigit(h)) {
        v = h - '0';
      } else if (h >= 'a' && h <= 'f') {
        v = h - 'a' + 10;
      } else if (h >= 'A' && h <= 'F') {
        v = h - 'A' + 10;
      } else {
        return errorAt(start, std::string("'\\") + e + "' must be followed by " +
                                  std::to_string(hex_digits) + " hex digits");
      }
      cp = (cp << 4) | static_cast<uint32_t>(v);
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return errorAt(start, "'" + std::string(text_.substr(start, 2 + hex_digits)) +
                                "' is not a Unicode character");
    }
    pos_ += hex_digits;
    appendUtf8(out, cp);
    return Status::ok();
  }

  // `<<EOF` or `<<-EOF`, then lines up to one holding only `EOF` (indentation allowed).
  Status parseHeredoc(std::string& out) {
    const size_t open = pos_;
    pos_ += 2;
    const bool strip_indent = peek() == '-';
    if (strip_indent) {
      ++pos_;
    }
    if (atEnd() || !isIdentStart(text_[pos_])) {
      return errorAt(pos_, "expected a heredoc marker name after '" +
                               std::string(text_.substr(open, pos_ - open)) + "', got " +
                               describeAt(pos_));
    }
    const std::string_view marker = readIdent();
    const std::string opener(text_.substr(open, pos_ - open));  // "<<EOF" or "<<-EOF".
    if (peek() == '\r' && peek(1) == '\n') {
      ++pos_;
    }
    if (peek() != '\n') {
      return errorAt(pos_, "expected a new line after heredoc marker '" + forMessage(opener) +
                               "', got " + describeAt(pos_));
    }
    ++pos_;
    std::vector<std::string_view> lines;
    for (;;) {
      if (atEnd()) {
        return errorAt(open, "heredoc '" + forMessage(opener) + "' has no closing line '" +
                                 forMessage(marker) + "' before the end of the file");
      }
      const size_t eol = text_.find('\n', pos_);
      std::string_view line = text_.substr(pos_, eol == kNone ? kNone : eol - pos_);
      if (line.ends_with('\r')) {
        line.remove_suffix(1);
      }
      const size_t first = line.find_first_not_of(" \t");
      const size_t last = line.find_last_not_of(" \t");
      if (first != kNone && line.substr(first, last - first + 1) == marker) {
        pos_ += first + marker.size();
        break;
      }
      lines.push_back(line);
      pos_ = eol == kNone ? text_.size() : eol + 1;
    }
    size_t indent = 0;
    if (strip_indent) {
      indent = kNone;
      for (std::string_view line : lines) {
        const size_t first = line.find_first_not_of(" \t");
        if (first != kNone) {
          indent = std::min(indent, first);
        }
      }
    }
    for (std::string_view line : lines) {
      const size_t first = line.find_first_not_of(" \t");
      line.remove_prefix(std::min({indent, line.size(), first == kNone ? line.size() : first}));
      out.append(line);
      out.push_back('\n');
    }
    return Status::ok();
  }

  Status parseNumber(json& out) {
    const size_t start = pos_;
    auto digits = [&] {
      while (!atEnd() && isDigit(text_[pos_])) {
        ++pos_;
      }
    };
    if (peek() == '-') {
      ++pos_;
      if (!isDigit(peek())) {
        return errorAt(pos_, "expected a digit after '-', got " + describeAt(pos_));
      }
    }
    digits();
    bool is_float = false;
    if (peek() == '.' && isDigit(peek(1))) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (peek() == 'e' || peek() == 'E') {
      const size_t exp = pos_;
      ++pos_;
      if (peek() == '+' || peek() == '-') {
        ++pos_;
      }
      if (!isDigit(peek())) {
        return errorAt(exp, "expected digits in the exponent of the number at " + where(start));
      }
      is_float = true;
      digits();
    }
    if (!atEnd() && (isIdentChar(text_[pos_]) || text_[pos_] == '.')) {
      size_t end = pos_;
      while (end < text_.size() && (isIdentChar(text_[end]) || text_[end] == '.') &&
             end - start < 40) {
        ++end;
      }
      return errorAt(start,
                     "invalid number '" + std::string(text_.substr(start, end - start)) + "'");
    }
    const std::string_view number = text_.substr(start, pos_ - start);
    const char* first = number.data();
    const char* last = number.data() + number.size();
    if (!is_float) {
      int64_t v = 0;
      const auto [ptr, ec] = std::from_chars(first, last, v);
      if (ec != std::errc() || ptr != last) {
        return errorAt(start, "integer " + std::string(number) + " does not fit in 64 bits");
      }
      out = v;
      return Status::ok();
    }
    double v = 0;
    const auto [ptr, ec] = std::from_chars(first, last, v);
    if (ec != std::errc() || ptr != last) {
      return errorAt(start, "number " + std::string(number) + " is out of range");
    }
    out = v;
    return Status::ok();
  }

  Status parseList(json& out) {
    const size_t open = pos_;
    ++pos_;
    TESSERA_RETURN_IF_ERROR(enter(open));
    out = json::array();
    for (;;) {
      TESSERA_RETURN_IF_ERROR(skipSpace());
      if (peek() == ']') {
        ++pos_;
        break;
      }
      json element;
      TESSERA_RETURN_IF_ERROR(
          parseValue(element, "a list element or ']' to close the list opened at " + where(open)));
      out.push_back(std::move(element));
      TESSERA_RETURN_IF_ERROR(skipSpace());
      if (peek() == ',') {
        ++pos_;
      } else if (peek() == ']') {
        ++pos_;
        break;
      } else {
        return errorAt(pos_, "expected ',' or ']' after a list element (list opened at " +
                                 where(open) + "), got " + describeAt(pos_));
      }
    }
    --depth_;
    return Status::ok();
  }

  Status parseObject(json& out) {
    const size_t open = pos_;
    ++pos_;
    TESSERA_RETURN_IF_ERROR(enter(open));
    out = json::object();
    std::map<std::string, size_t, std::less<>> keys;  // Key -> offset, for duplicate errors.
    for (;;) {
      TESSERA_RETURN_IF_ERROR(skipSpace());
      if (peek() == '}') {
        ++pos_;
        break;
      }
      const size_t key_offset = pos_;
      std::string key;
      if (peek() == '"') {
        TESSERA_RETURN_IF_ERROR(parseString(key));
      } else if (!atEnd() && isIdentStart(text_[pos_])) {
        key = readIdent();
      } else {
        return errorAt(pos_, "expected an object key or '}' to close the object opened at " +
                                 where(open) + ", got " + describeAt(pos_));
      }
      TESSERA_RETURN_IF_ERROR(skipSpace());
      if (peek() != '=' && peek() != ':') {
        return errorAt(pos_, "expected '=' or ':' after object key '" + forMessage(key) +
                                 "', got " + describeAt(pos_));
      }
      if (const auto it = keys.find(key); it != keys.end()) {
        return errorAt(key_offset, "duplicate key '" + forMessage(key) +
                                       "' in object (first set at " + where(it->second) + ")");
      }
      ++pos_;
      TESSERA_RETURN_IF_ERROR(skipSpace());
      json value;
      TESSERA_RETURN_IF_ERROR(parseValue(value, "a value for key '" + forMessage(key) + "'"));
      out[key] = std::move(value);
      keys.emplace(std::move(key), key_offset);
      TESSERA_RETURN_IF_ERROR(skipSpace());
      if (peek() == ',') {
        ++pos_;
      }
    }
    --depth_;
    return Status::ok();
  }

  std::string_view text_;
  std::string_view filename_;
  size_t pos_ = 0;
  int depth_ = 0;
};

// Finds duplicate keys and excessive nesting while nlohmann parses, through its callback (which
// sees every key and the nesting of objects and arrays but not positions, so errors name the
// JSON path instead). Stopping at once keeps hostile input from building a huge deep document.
class JsonChecker {
 public:
  // Thrown by onEvent() to stop nlohmann at the first problem; caught in parseJsonConfig().
  struct Stop {};

  bool onEvent(int depth, json::parse_event_t event, const json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth > kConfigMaxJsonDepth) {
          error_ = "nesting is deeper than " + std::to_string(kConfigMaxJsonDepth) + " levels at " +
                   path();
        }
        frames_.push_back({event == json::parse_event_t::object_start, {}, {}, 0});
        break;
      case json::parse_event_t::key: {
        std::string key = parsed.get<std::string>();
        if (!frames_.back().keys.insert(key).second) {
          frames_.pop_back();  // So path() names the object holding the duplicate.
          error_ = "duplicate key '" + forMessage(key) + "' in the object at " + path();
          break;
        }
        frames_.back().key = std::move(key);
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        elementDone();
        break;
      case json::parse_event_t::value:
        elementDone();
        break;
    }
    if (!error_.empty()) {
      throw Stop{};
    }
    return true;
  }

  const std::string& error() const { return error_; }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;  // The member being parsed, in an object.
    size_t index;     // The element being parsed, in an array.
  };

  void elementDone() {
    if (!frames_.empty() && !frames_.back().object) {
      ++frames_.back().index;
    }
  }

  // The JSON pointer of the value being parsed ("" for the top level is shown as "/").
  std::string path() const {
    std::string p;
    for (const Frame& f : frames_) {
      p += '/';
      if (!f.object) {
        p += std::to_string(f.index);
        continue;
      }
      for (char c : f.key) {
        p += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
      }
    }
    return p.empty() ? "/" : forMessage(p, 300);
  }

  std::vector<Frame> frames_;
  std::string error_;
};

std::string jsonTypeName(const json& j) { return j.type_name(); }

// Appends "/<key>" to a JSON pointer, escaping as RFC 6901 says.
std::string childPath(const std::string& path, std::string_view key) {
  std::string p = path + "/";
  for (char c : key) {
    p += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  }
  return p;
}

Status collectBlocks(const json& value, std::vector<std::string>& labels, size_t labels_left,
                     const std::string& path, std::string_view source, std::vector<HclBlock>& out) {
  auto wrong_type = [&](const std::string& at, const json& v, std::string_view wanted) {
    return invalidArgument(std::string(source) + ": " + at + ": expected " + std::string(wanted) +
                           ", got " + jsonTypeName(v));
  };
  if (labels_left == 0) {
    if (value.is_object()) {
      out.push_back({labels, &value});
      return Status::ok();
    }
    if (!value.is_array()) {
      return wrong_type(path, value, "a block body (an object) or an array of them");
    }
    for (size_t i = 0; i < value.size(); ++i) {
      if (!value[i].is_object()) {
        return wrong_type(childPath(path, std::to_string(i)), value[i], "a block body (an object)");
      }
      out.push_back({labels, &value[i]});
    }
    return Status::ok();
  }
  auto by_label = [&](const json& object, const std::string& at) -> Status {
    for (const auto& [label, inner] : object.items()) {
      labels.push_back(label);
      TESSERA_RETURN_IF_ERROR(
          collectBlocks(inner, labels, labels_left - 1, childPath(at, label), source, out));
      labels.pop_back();
    }
    return Status::ok();
  };
  if (value.is_object()) {
    return by_label(value, path);
  }
  if (!value.is_array()) {
    return wrong_type(path, value, "an object keyed by block label or an array of them");
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string at = childPath(path, std::to_string(i));
    if (!value[i].is_object()) {
      return wrong_type(at, value[i], "an object keyed by block label");
    }
    TESSERA_RETURN_IF_ERROR(by_label(value[i], at));
  }
  return Status::ok();
}

}  // namespace

Result<json> parseHcl(std::string_view text, std::string_view filename) {
  return HclParser(text, filename).parse();
}

Result<json> parseJsonConfig(std::string_view text, std::string_view filename) {
  if (text.size() > kConfigMaxBytes) {
    return invalidArgument(tooLarge(filename, text.size()));
  }
  JsonChecker checker;
  json result;
  try {
    result = json::parse(
        text.begin(), text.end(),
        [&checker](int depth, json::parse_event_t event, json& parsed) {
          return checker.onEvent(depth, event, parsed);
        },
        /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const JsonChecker::Stop&) {
    return invalidArgument(std::string(filename) + ": " + checker.error());
  } catch (const json::parse_error& e) {
    // e.byte counts the characters read, up to and including the offending one.
    const size_t offset = e.byte == 0 ? 0 : e.byte - 1;
    std::string message = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 2: ".
    if (const size_t at = message.find("parse error at line "); at != std::string::npos) {
      if (const size_t colon = message.find(": ", at); colon != std::string::npos) {
        message.erase(0, colon + 2);
      }
    }
    return invalidArgument(std::string(filename) + ":" + lineColumn(text, offset) + ": " +
                           forMessage(message, 300));
  } catch (const json::exception& e) {
    return invalidArgument(std::string(filename) + ": " + forMessage(e.what(), 300));
  }
  if (!result.is_object()) {
    return invalidArgument(std::string(filename) +
                           ": expected a JSON object at the top level, got " +
                           jsonTypeName(result));
  }
  return result;
}

Result<json> parseConfigFile(const std::string& path) {
  const std::string extension = std::filesystem::path(path).extension().string();
  if (extension != ".hcl" && extension != ".json") {
    return invalidArgument(path + ": unknown config file type '" + extension +
                           "' (expected a .hcl or .json file)");
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return invalidArgument(path + ": is a directory, expected a config file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return notFound(path + ": cannot open file");
  }
  // Read at most one byte past the limit, so a huge file is refused without reading it all.
  std::string text(kConfigMaxBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) {
    return Status(StatusCode::kUnavailable, path + ": read error");
  }
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kConfigMaxBytes) {
    return invalidArgument(path + ": file is more than the " + std::to_string(kConfigMaxBytes) +
                           "-byte limit for config files");
  }
  return extension == ".hcl" ? parseHcl(text, path) : parseJsonConfig(text, path);
}

Result<std::vector<HclBlock>> hclBlocks(const json& body, std::string_view type, size_t label_count,
                                        std::string_view source) {
  std::vector<HclBlock> blocks;
  if (!body.is_object()) {
    return invalidArgument(std::string(source) + ": expected a block body (an object), got " +
                           jsonTypeName(body));
  }
  const auto it = body.find(type);
  if (it == body.end()) {
    return blocks;
  }
  std::vector<std::string> labels;
  TESSERA_RETURN_IF_ERROR(
      collectBlocks(*it, labels, label_count, childPath("", type), source, blocks));
  return blocks;
}

}  // namespace tessera::core
