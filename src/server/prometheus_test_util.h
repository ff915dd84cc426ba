// A strict parser of the Prometheus text exposition format (version 0.0.4), for tests: written to
// the format's description (prometheus.io/docs/instrumenting/exposition_formats), independently
// of the writer in server/metrics.h, and stricter than Prometheus itself where the writer
// promises more (HELP and TYPE for every family).
//
//   PromText p = parsePrometheusText(body);
//   EXPECT_THAT(p.errors, IsEmpty());
//   double ready = p.sum("tessera_nodes", {{"state", "ready"}});
//
// What it checks, each failure an entry in `errors` naming the line:
//   - every line is a comment, blank, or a sample `name{l="v",...} value [timestamp]`, label
//     values escaped (\\, \", \n and nothing else), names valid;
//   - HELP and TYPE at most once per family, both there for every family with samples, TYPE
//     before its samples, and a family's samples together (not interleaved with another's);
//   - a counter or gauge's samples are named as the family; a histogram's are _bucket (with an
//     `le`), _sum and _count;
//   - no two samples with the same name and labels;
//   - each histogram series: le values increasing, the last +Inf, counts cumulative (never
//     decreasing), _sum and _count there, _count equal to the +Inf bucket;
//   - counters and bucket counts are not negative.
#pragma once

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::server::testing {

struct PromSample {
  std::string name;  // As written (a histogram's with its suffix).
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct PromFamily {
  std::string type;  // counter, gauge, histogram, summary, untyped.
  std::string help;
  bool has_help = false;
  std::vector<PromSample> samples;
};

struct PromText {
  std::map<std::string, PromFamily> families;
  std::vector<std::string> errors;

  // The sum of the values of `name`'s samples (a sample name, e.g. "x_bucket") whose labels
  // include every one of `labels`; -1 if none matches.
  double sum(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    double total = 0;
    bool any = false;
    for (const auto& [fname, f] : families) {
      for (const PromSample& s : f.samples) {
        if (s.name != name) {
          continue;
        }
        bool match = true;
        for (const auto& [k, v] : labels) {
          auto it = s.labels.find(k);
          match = match && it != s.labels.end() && it->second == v;
        }
        if (match) {
          total += s.value;
          any = true;
        }
      }
    }
    return any ? total : -1;
  }
  // Every sample name, and every family name.
  std::set<std::string> names() const {
    std::set<std::string> out;
    for (const auto& [fname, f] : families) {
      out.insert(fname);
      for (const PromSample& s : f.samples) {
        out.insert(s.name);
      }
    }
    return out;
  }
};

namespace internal {

inline bool promNameChar(char c, bool first, bool colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':') ||
         (!first && c >= '0' && c <= '9');
}

// Reads a name at `pos` (metric names allow ':', label names do not).
inline std::string promName(std::string_view line, size_t& pos, bool colon) {
  const size_t start = pos;
  while (pos < line.size() && promNameChar(line[pos], pos == start, colon)) {
    ++pos;
  }
  return std::string(line.substr(start, pos - start));
}

// A float as Go's strconv.ParseFloat reads it (what Prometheus uses): also +Inf, -Inf, NaN.
inline bool promFloat(std::string_view text, double& out) {
  if (text == "+Inf" || text == "Inf") {
    out = INFINITY;
    return true;
  }
  if (text == "-Inf") {
    out = -INFINITY;
    return true;
  }
  if (text == "NaN") {
    out = NAN;
    return true;
  }
  if (text.empty()) {
    return false;
  }
  const std::string s(text);
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && s.find_first_of("xXpP") == std::string::npos;
}

}  // namespace internal

inline PromText parsePrometheusText(std::string_view text) {
  PromText out;
  std::set<std::string> closed;  // Families whose samples have ended (another's began).
  std::string current;           // The family of the last line about one.
  std::set<std::string> series;  // "name{sorted labels}" seen.
  auto err = [&](size_t line_no, const std::string& what) {
    out.errors.push_back("line " + std::to_string(line_no) + ": " + what);
  };
  // The family a line is about; checks the not-interleaved rule.
  auto enter = [&](size_t line_no, const std::string& family) {
    if (family != current) {
      if (closed.contains(family)) {
        err(line_no, "family " + family + " again after another family's lines");
      }
      if (!current.empty()) {
        closed.insert(current);
      }
      current = family;
    }
  };
  size_t line_no = 0;
  size_t start = 0;
  if (!text.empty() && text.back() != '\n') {
    out.errors.push_back("the text does not end with a newline");
  }
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) {
      end = text.size();
    }
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.empty()) {
      continue;
    }
    if (line[0] == '#') {
      std::istringstream in{std::string(line.substr(1))};
      std::string keyword;
      std::string name;
      in >> keyword >> name;
      if (keyword != "HELP" && keyword != "TYPE") {
        continue;  // A plain comment.
      }
      size_t pos = 0;
      if (internal::promName(name, pos, true) != name || name.empty()) {
        err(line_no, "invalid metric name '" + name + "' in " + keyword);
        continue;
      }
      enter(line_no, name);
      PromFamily& f = out.families[name];
      // The rest after "# KEYWORD name ".
      const size_t rest_at = line.find(name, 2 + keyword.size()) + name.size();
      std::string rest(rest_at < line.size() ? line.substr(rest_at + 1) : "");
      if (keyword == "HELP") {
        if (f.has_help) {
          err(line_no, "second HELP for " + name);
        }
        std::string help;
        for (size_t i = 0; i < rest.size(); ++i) {
          if (rest[i] == '\\' && i + 1 < rest.size() &&
              (rest[i + 1] == '\\' || rest[i + 1] == 'n')) {
            help += rest[i + 1] == 'n' ? '\n' : '\\';
            ++i;
          } else if (rest[i] == '\\') {
            err(line_no, "bad escape in HELP of " + name);
          } else {
            help += rest[i];
          }
        }
        f.help = help;
        f.has_help = true;
      } else {
        if (!f.type.empty()) {
          err(line_no, "second TYPE for " + name);
        }
        if (!f.samples.empty()) {
          err(line_no, "TYPE for " + name + " after its samples");
        }
        static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary",
                                                     "untyped"};
        if (!kTypes.contains(rest)) {
          err(line_no, "unknown type '" + rest + "' for " + name);
        }
        f.type = rest;
      }
      continue;
    }
    // A sample.
    size_t pos = 0;
    PromSample s;
    s.name = internal::promName(line, pos, true);
    if (s.name.empty()) {
      err(line_no, "not a sample: '" + std::string(line) + "'");
      continue;
    }
    bool bad = false;
    if (pos < line.size() && line[pos] == '{') {
      ++pos;
      while (!bad && pos < line.size() && line[pos] != '}') {
        const std::string label = internal::promName(line, pos, false);
        if (label.empty() || pos + 1 >= line.size() || line[pos] != '=' || line[pos + 1] != '"') {
          err(line_no, "bad label in '" + std::string(line) + "'");
          bad = true;
          break;
        }
        pos += 2;
        std::string value;
        while (pos < line.size() && line[pos] != '"') {
          if (line[pos] == '\\') {
            const char next = pos + 1 < line.size() ? line[pos + 1] : '\0';
            if (next != '\\' && next != '"' && next != 'n') {
              err(line_no, "bad escape in a label value");
              bad = true;
              break;
            }
            value += next == 'n' ? '\n' : next;
            pos += 2;
          } else {
            value += line[pos++];
          }
        }
        if (bad || pos >= line.size()) {
          err(line_no, "unterminated label value");
          bad = true;
          break;
        }
        ++pos;  // The closing quote.
        if (s.labels.contains(label)) {
          err(line_no, "label " + label + " twice");
        }
        s.labels[label] = value;
        if (pos < line.size() && line[pos] == ',') {
          ++pos;
        }
      }
      if (bad) {
        continue;
      }
      if (pos >= line.size()) {
        err(line_no, "unterminated labels");
        continue;
      }
      ++pos;  // '}'
    }
    if (pos >= line.size() || line[pos] != ' ') {
      err(line_no, "no value after '" + s.name + "'");
      continue;
    }
    std::istringstream rest{std::string(line.substr(pos + 1))};
    std::string value;
    std::string timestamp;
    std::string extra;
    rest >> value >> timestamp >> extra;
    if (!internal::promFloat(value, s.value)) {
      err(line_no, "bad value '" + value + "'");
      continue;
    }
    if (!extra.empty() ||
        (!timestamp.empty() && timestamp.find_first_not_of("-0123456789") != std::string::npos)) {
      err(line_no, "bad timestamp or trailing text");
    }
    // Its family: the name, or for a histogram's samples the name without the suffix.
    std::string family = s.name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string sfx = suffix;
      if (!out.families.contains(s.name) && s.name.size() > sfx.size() && s.name.ends_with(sfx)) {
        const std::string base = s.name.substr(0, s.name.size() - sfx.size());
        if (out.families.contains(base) && out.families[base].type == "histogram") {
          family = base;
        }
      }
    }
    if (!out.families.contains(family) || out.families[family].type.empty()) {
      err(line_no, "sample " + s.name + " before (or without) its family's TYPE");
      continue;
    }
    enter(line_no, family);
    PromFamily& f = out.families[family];
    if (f.type == "histogram") {
      if (s.name == family) {
        err(line_no, "histogram " + family + " has a sample without _bucket/_sum/_count");
      }
      if (s.name.ends_with("_bucket") != s.labels.contains("le")) {
        err(line_no, "le belongs on a histogram's _bucket samples and only there");
      }
    }
    if ((f.type == "counter" || s.name.ends_with("_bucket") || s.name.ends_with("_count")) &&
        !(s.value >= 0)) {
      err(line_no, "negative or NaN count in " + s.name);
    }
    std::string key = s.name + "{";
    for (const auto& [k, v] : s.labels) {
      key += k + "=" + v + "\x01";
    }
    if (!series.insert(key).second) {
      err(line_no, "duplicate series " + std::string(line.substr(0, line.rfind(' '))));
    }
    f.samples.push_back(std::move(s));
  }
  for (const auto& [name, f] : out.families) {
    if (!f.samples.empty() && !f.has_help) {
      out.errors.push_back("family " + name + " has no HELP");
    }
    if (!f.samples.empty() && f.type.empty()) {
      out.errors.push_back("family " + name + " has no TYPE");
    }
    if (f.type != "histogram") {
      continue;
    }
    // Per series (labels without le): its buckets in order, its sum and count.
    struct Series {
      std::vector<std::pair<double, double>> buckets;  // (le, count) as written.
      bool has_sum = false;
      double count = -1;
    };
    std::map<std::map<std::string, std::string>, Series> by_labels;
    for (const PromSample& s : f.samples) {
      std::map<std::string, std::string> labels = s.labels;
      if (s.name == name + "_bucket") {
        double le = 0;
        if (!internal::promFloat(labels["le"], le) || std::isnan(le)) {
          out.errors.push_back(name + ": bad le '" + labels["le"] + "'");
          continue;
        }
        labels.erase("le");
        by_labels[labels].buckets.emplace_back(le, s.value);
      } else if (s.name == name + "_sum") {
        by_labels[labels].has_sum = true;
      } else if (s.name == name + "_count") {
        by_labels[labels].count = s.value;
      }
    }
    for (const auto& [labels, series_of] : by_labels) {
      std::string which = name + "{";
      for (const auto& [k, v] : labels) {
        which += k + "=\"" + v + "\",";
      }
      which += "}";
      const auto& b = series_of.buckets;
      if (b.empty()) {
        out.errors.push_back(which + ": no buckets");
        continue;
      }
      for (size_t i = 1; i < b.size(); ++i) {
        if (!(b[i].first > b[i - 1].first)) {
          out.errors.push_back(which + ": le not increasing");
        }
        if (b[i].second < b[i - 1].second) {
          out.errors.push_back(which + ": bucket counts not cumulative");
        }
      }
      if (!std::isinf(b.back().first) || b.back().first < 0) {
        out.errors.push_back(which + ": the last bucket is not le=\"+Inf\"");
      }
      if (!series_of.has_sum) {
        out.errors.push_back(which + ": no _sum");
      }
      if (series_of.count < 0) {
        out.errors.push_back(which + ": no _count");
      } else if (series_of.count != b.back().second) {
        out.errors.push_back(which + ": _count differs from the +Inf bucket");
      }
    }
  }
  return out;
}

}  // namespace tessera::server::testing
