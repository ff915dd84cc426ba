// A JSON value with its path in the document, so that every error says where:
// "scenario.json: workloads[3].gpu.count: value 9 is outside 0..8".
//
//   const std::string source = "scenario.json";
//   JsonNode root(doc, "", source);
//   TESSERA_RETURN_IF_ERROR(root.checkKeys({"cluster", "queues"}));
//   TESSERA_ASSIGN_OR_RETURN(int64_t n, root.child("cluster").child("count").integer(1, 100));
//
// A JsonNode refers to the json value and the source name it was made from: both must outlive
// it. Thread-compatible.
#pragma once

#include <cmath>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/status.h"

namespace tessera::core {

class JsonNode {
 public:
  JsonNode(const nlohmann::json& j, std::string path, const std::string& source)
      : j_(j), path_(std::move(path)), source_(source) {}
  // The source is kept by reference: a temporary (a string literal, say) would dangle.
  JsonNode(const nlohmann::json& j, std::string path, std::string&& source) = delete;

  const nlohmann::json& value() const { return j_; }
  const std::string& path() const { return path_; }

  Status error(const std::string& what) const {
    return invalidArgument(source_ + ": " + (path_.empty() ? "(top)" : path_) + ": " + what);
  }
  bool has(const char* key) const { return j_.is_object() && j_.contains(key); }
  JsonNode child(const char* key) const {
    return {j_.at(key), path_.empty() ? key : path_ + "." + key, source_};
  }
  JsonNode at(size_t i) const { return {j_.at(i), path_ + "[" + std::to_string(i) + "]", source_}; }

  // Every key of the object must be in `allowed` or start with `allowed_prefix` (if given).
  Status checkKeys(std::initializer_list<const char*> allowed,
                   std::string_view allowed_prefix = {}) const {
    if (!j_.is_object()) {
      return error("expected an object");
    }
    for (const auto& [k, v] : j_.items()) {
      bool ok = false;
      for (const char* a : allowed) {
        ok |= k == a;
      }
      if (!ok && (allowed_prefix.empty() || k.rfind(allowed_prefix, 0) != 0)) {
        std::string names;
        for (const char* a : allowed) {
          names += (names.empty() ? "" : ", ") + std::string(a);
        }
        return error("unknown field '" + k + "' (known: " + names + ")");
      }
    }
    return Status::ok();
  }

  Result<std::string> str() const {
    if (!j_.is_string() || j_.get<std::string>().empty()) {
      return error("expected a non-empty string");
    }
    return j_.get<std::string>();
  }
  Result<int64_t> integer(int64_t min, int64_t max) const {
    if (!j_.is_number_integer() &&
        !(j_.is_number_float() && std::floor(j_.get<double>()) == j_.get<double>())) {
      return error("expected an integer");
    }
    const auto v =
        j_.is_number_integer() ? j_.get<int64_t>() : static_cast<int64_t>(j_.get<double>());
    if (v < min || v > max) {
      return error("value " + std::to_string(v) + " is outside " + std::to_string(min) + ".." +
                   std::to_string(max));
    }
    return v;
  }
  // A non-negative number scaled to an integer unit (e.g. GPUs -> milli-GPU).
  Result<int64_t> scaled(int64_t scale) const {
    if (!j_.is_number()) {
      return error("expected a number");
    }
    const double v = j_.get<double>();
    if (!(v >= 0) || v * static_cast<double>(scale) > 9.0e15) {
      return error("expected a non-negative number");
    }
    return static_cast<int64_t>(std::llround(v * static_cast<double>(scale)));
  }
  Result<Duration> seconds() const {
    TESSERA_ASSIGN_OR_RETURN(int64_t ms, scaled(1000));
    return std::chrono::duration_cast<Duration>(std::chrono::milliseconds(ms));
  }
  Result<bool> boolean() const {
    if (!j_.is_boolean()) {
      return error("expected true or false");
    }
    return j_.get<bool>();
  }

 private:
  const nlohmann::json& j_;
  std::string path_;
  const std::string& source_;
};

}  // namespace tessera::core
