#include "core/csv.h"

#include <charconv>
#include <fstream>
#include <sstream>

namespace tessera::core {
namespace {

// Splits one logical record starting at `pos`. Advances `pos` past the record and its line
// ending and `line` by the number of line breaks consumed.
Status splitRecord(std::string_view text, size_t& pos, size_t& line, const std::string& source,
                   std::vector<std::string>& out) {
  out.clear();
  std::string field;
  bool in_quotes = false;
  bool was_quoted = false;
  const size_t start_line = line;
  while (pos < text.size()) {
    char c = text[pos];
    if (in_quotes) {
      if (c == '"') {
        if (pos + 1 < text.size() && text[pos + 1] == '"') {
          field.push_back('"');
          pos += 2;
          continue;
        }
        in_quotes = false;
        ++pos;
        continue;
      }
      if (c == '\n') {
        ++line;
      }
      field.push_back(c);
      ++pos;
      continue;
    }
    if (c == '"' && field.empty() && !was_quoted) {
      in_quotes = true;
      was_quoted = true;
      ++pos;
      continue;
    }
    if (c == ',') {
      out.push_back(std::move(field));
      field.clear();
      was_quoted = false;
      ++pos;
      continue;
    }
    if (c == '\r' && pos + 1 < text.size() && text[pos + 1] == '\n') {
      ++pos;
      continue;
    }
    if (c == '\n') {
      ++pos;
      ++line;
      out.push_back(std::move(field));
      return Status::ok();
    }
    field.push_back(c);
    ++pos;
  }
  if (in_quotes) {
    return invalidArgument(source + ":" + std::to_string(start_line) +
                           ": unterminated quoted field");
  }
  out.push_back(std::move(field));
  return Status::ok();
}

bool isBlank(const std::vector<std::string>& fields) {
  return fields.size() == 1 && fields[0].find_first_not_of(" \t") == std::string::npos;
}

}  // namespace

Result<CsvTable> CsvTable::parse(std::string_view text, std::string source) {
  CsvTable table;
  table.source_ = std::move(source);
  size_t pos = 0;
  size_t line = 1;
  std::vector<std::string> fields;
  // Header: the first non-blank record.
  while (pos < text.size()) {
    size_t this_line = line;
    TESSERA_RETURN_IF_ERROR(splitRecord(text, pos, line, table.source_, fields));
    if (!isBlank(fields)) {
      table.header_ = fields;
      for (std::string& h : table.header_) {
        while (!h.empty() && (h.back() == ' ' || h.back() == '\t')) {
          h.pop_back();
        }
      }
      (void)this_line;
      break;
    }
  }
  if (table.header_.empty()) {
    return invalidArgument(table.source_ + ":1: file is empty (expected a header line)");
  }
  while (pos < text.size()) {
    size_t this_line = line;
    TESSERA_RETURN_IF_ERROR(splitRecord(text, pos, line, table.source_, fields));
    if (isBlank(fields)) {
      continue;
    }
    if (fields.size() != table.header_.size()) {
      return invalidArgument(table.source_ + ":" + std::to_string(this_line) + ": expected " +
                             std::to_string(table.header_.size()) +
                             " fields as in the header, got " + std::to_string(fields.size()));
    }
    table.rows_.push_back(Row{this_line, fields});
  }
  return table;
}

Result<CsvTable> CsvTable::readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return notFound(path + ": cannot open file");
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) {
    return Status(StatusCode::kUnavailable, path + ": read error");
  }
  return parse(buffer.str(), path);
}

int CsvTable::findColumn(std::string_view name) const {
  for (size_t i = 0; i < header_.size(); ++i) {
    if (header_[i] == name) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

Result<size_t> CsvTable::requireColumn(std::string_view name) const {
  int i = findColumn(name);
  if (i < 0) {
    return invalidArgument(source_ + ":1: missing column '" + std::string(name) + "'");
  }
  return static_cast<size_t>(i);
}

std::string CsvTable::where(size_t row) const {
  return source_ + ":" + std::to_string(rows_[row].line);
}

Result<int64_t> CsvTable::getInt(size_t row, size_t column, int64_t min, int64_t max) const {
  std::string_view s = cell(row, column);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  const std::string& name = header_[column];
  if (s.empty()) {
    return invalidArgument(where(row) + ": column '" + name + "' is empty, expected an integer");
  }
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range) {
    return invalidArgument(where(row) + ": column '" + name + "' value '" + std::string(s) +
                           "' is out of range");
  }
  if (ec != std::errc() || ptr != s.data() + s.size()) {
    return invalidArgument(where(row) + ": column '" + name + "' value '" + std::string(s) +
                           "' is not an integer");
  }
  if (v < min) {
    return invalidArgument(
        where(row) + ": column '" + name + "' value " + std::to_string(v) +
        (min == 0 ? " is negative" : " is below the minimum " + std::to_string(min)));
  }
  if (v > max) {
    return invalidArgument(where(row) + ": column '" + name + "' value " + std::to_string(v) +
                           " is above the maximum " + std::to_string(max));
  }
  return v;
}

}  // namespace tessera::core
