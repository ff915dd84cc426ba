#include "audit/record.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "audit/crypto.h"

namespace tessera::audit {
namespace {

using core::Result;
using nlohmann::json;

constexpr std::string_view kChainFields[] = {"/seq", "/time", "/type", "/prev_hash", "/hash"};

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

bool isAlwaysSensitiveKey(std::string_view key) {
  return std::any_of(std::begin(kAlwaysSensitiveKeys), std::end(kAlwaysSensitiveKeys),
                     [&](std::string_view k) { return equalsIgnoreCase(k, key); });
}

std::string hmacOf(const json& value, std::string_view salt) {
  if (value.is_string()) {
    return hmacValue(salt, value.get_ref<const std::string&>());
  }
  return hmacValue(salt, canonicalJson(value));
}

// Whether a key's value, or part of it, is HMAC'd by the key-name rules: any value under an
// always-sensitive key; a string, or the strings of a list, under a key that looks secret.
bool hidesByName(std::string_view key, const json& item) {
  if (isAlwaysSensitiveKey(key)) {
    return true;
  }
  if (!looksSecret(key)) {
    return false;
  }
  return item.is_string() ||
         (item.is_array() &&
          std::any_of(item.begin(), item.end(), [](const json& v) { return v.is_string(); }));
}

// HMACs, in place, every value under an always-sensitive key anywhere inside `value` (found at
// `where`), and every string under a key that looks secret, and records where it did so in
// `done`.
void hmacSensitiveKeys(json& value, const json::json_pointer& where, std::string_view salt,
                       std::vector<std::string>* done) {
  if (value.is_object()) {
    for (auto& [key, item] : value.items()) {
      if (isAlwaysSensitiveKey(key) || (looksSecret(key) && item.is_string())) {
        item = hmacOf(item, salt);
        done->push_back((where / key).to_string());
      } else if (looksSecret(key) && item.is_array()) {
        for (size_t i = 0; i < item.size(); ++i) {
          if (item[i].is_string()) {
            item[i] = hmacOf(item[i], salt);
            done->push_back((where / key / i).to_string());
          } else {
            hmacSensitiveKeys(item[i], where / key / i, salt, done);
          }
        }
      } else {
        hmacSensitiveKeys(item, where / key, salt, done);
      }
    }
  } else if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      hmacSensitiveKeys(value[i], where / i, salt, done);
    }
  }
}

bool hasSensitiveKey(const json& value) {
  if (value.is_object()) {
    for (const auto& [key, item] : value.items()) {
      if (hidesByName(key, item) || hasSensitiveKey(item)) {
        return true;
      }
    }
  } else if (value.is_array()) {
    return std::any_of(value.begin(), value.end(),
                       [](const json& v) { return hasSensitiveKey(v); });
  }
  return false;
}

bool isLowerHex(const std::string& s, size_t size) {
  return s.size() == size && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// The string field `name` of `record`, or an error naming it.
Result<std::string> stringField(const json& record, const char* name) {
  auto it = record.find(name);
  if (it == record.end() || !it->is_string()) {
    return core::invalidArgument(fmt::format("field '{}' is missing or not a string", name));
  }
  return it->get<std::string>();
}

}  // namespace

bool looksSecret(std::string_view key) {
  // Every key of every audited body comes here: no allocation.
  auto lower = [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  auto contains = [&](std::string_view word) {
    if (key.size() < word.size()) {
      return false;
    }
    for (size_t i = 0; i + word.size() <= key.size(); ++i) {
      size_t k = 0;
      while (k < word.size() && lower(key[i + k]) == word[k]) {
        ++k;
      }
      if (k == word.size()) {
        return true;
      }
    }
    return false;
  };
  if (contains("token") || contains("passw") || contains("secret") || contains("credential")) {
    return true;
  }
  return key.size() >= 3 && lower(key[key.size() - 3]) == 'k' &&
         lower(key[key.size() - 2]) == 'e' && lower(key[key.size() - 1]) == 'y';
}

std::string canonicalJson(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool responseIsSensitive(const AuditEvent& event) {
  return std::any_of(event.sensitive.begin(), event.sensitive.end(),
                     [](const std::string& p) { return p.rfind("/response/", 0) == 0; }) ||
         hasSensitiveKey(event.response.body);
}

Result<json> redactedEventJson(const AuditEvent& event, const RedactionOptions& options) {
  if (options.salt.empty()) {
    return core::invalidArgument("the audit sink has an empty HMAC salt");
  }
  json request = {{"method", event.request.method},
                  {"path", event.request.path},
                  {"remote_address", event.request.remote_address},
                  {"body", event.request.body}};
  if (!event.request.client.empty()) {
    request["client"] = event.request.client;
  }
  std::vector<std::string> done;  // Pointers to values already HMAC'd by the key-name rule.
  hmacSensitiveKeys(request["body"], json::json_pointer("/request/body"), options.salt, &done);
  json record = {
      {"type", event.type == AuditType::kRequest ? "request" : "response"},
      {"request_id", event.request_id},
      {"tenant", event.tenant},
      {"auth",
       {{"accessor", options.hmac_accessor && !event.auth.accessor.empty()
                         ? hmacValue(options.salt, event.auth.accessor)
                         : event.auth.accessor},
        {"display_name", event.auth.display_name},
        {"policies", event.auth.policies}}},
      {"request", std::move(request)},
      {"error", event.error},
  };
  if (!event.auth.token.empty()) {
    record["auth"]["token"] = hmacValue(options.salt, event.auth.token);
  }
  if (event.type == AuditType::kResponse) {
    json response = {{"status", event.response.status}, {"body", event.response.body}};
    hmacSensitiveKeys(response["body"], json::json_pointer("/response/body"), options.salt, &done);
    record["response"] = std::move(response);
  }
  for (const std::string& pointer_text : event.sensitive) {
    if (std::any_of(std::begin(kChainFields), std::end(kChainFields),
                    [&](std::string_view f) { return pointer_text == f; })) {
      return core::invalidArgument("sensitive pointer '" + pointer_text +
                                   "' names a field of the hash chain");
    }
    try {
      const json::json_pointer pointer(pointer_text);
      if (pointer.empty()) {
        return core::invalidArgument("sensitive pointer '' would hide the whole record");
      }
      // A value the key-name rule already HMAC'd is not HMAC'd twice.
      if (record.contains(pointer) &&
          std::find(done.begin(), done.end(), pointer.to_string()) == done.end()) {
        json& value = record.at(pointer);
        value = hmacOf(value, options.salt);
        done.push_back(pointer.to_string());
      }
    } catch (const json::exception& e) {
      return core::invalidArgument("sensitive pointer '" + pointer_text +
                                   "' is not a JSON pointer: " + e.what());
    }
  }
  return record;
}

std::string checkpointSigningMessage(const json& checkpoint_record) {
  json copy = checkpoint_record;
  copy.erase("hash");
  if (auto it = copy.find("checkpoint"); it != copy.end() && it->is_object()) {
    it->erase("signature");
  }
  return "tessera-audit-checkpoint-v1\n" + canonicalJson(copy);
}

Result<AuditRecord> parseRecordLine(std::string_view line) {
  AuditRecord rec;
  try {
    rec.json = json::parse(line);
  } catch (const json::exception& e) {
    // nlohmann's message starts "[json.exception.parse_error.101] parse error at ...".
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos) {
      what = what.substr(pos + 2);
    }
    return core::invalidArgument("not valid JSON (" + what + ")");
  }
  const json& j = rec.json;
  if (!j.is_object()) {
    return core::invalidArgument("not a JSON object");
  }
  auto seq = j.find("seq");
  if (seq == j.end() || !seq->is_number_unsigned() || seq->get<uint64_t>() == 0) {
    return core::invalidArgument("field 'seq' is missing or not a positive integer");
  }
  rec.seq = seq->get<uint64_t>();
  TESSERA_ASSIGN_OR_RETURN(rec.type, stringField(j, "type"));
  TESSERA_ASSIGN_OR_RETURN(rec.prev_hash, stringField(j, "prev_hash"));
  TESSERA_ASSIGN_OR_RETURN(rec.hash, stringField(j, "hash"));
  TESSERA_ASSIGN_OR_RETURN(std::string time, stringField(j, "time"));
  if (time.size() != 24 || time[10] != 'T' || time.back() != 'Z') {
    return core::invalidArgument("field 'time' is not RFC 3339 UTC with milliseconds");
  }
  if (!isLowerHex(rec.prev_hash, 64) || !isLowerHex(rec.hash, 64)) {
    return core::invalidArgument("'prev_hash' and 'hash' must be 64 lowercase hex digits");
  }
  if (rec.type == "checkpoint") {
    auto cp = j.find("checkpoint");
    if (cp == j.end() || !cp->is_object() || !cp->contains("key_id") ||
        !(*cp)["key_id"].is_string() || !cp->contains("signature") ||
        !(*cp)["signature"].is_string()) {
      return core::invalidArgument(
          "checkpoint record without a 'checkpoint' object holding 'key_id' and 'signature'");
    }
  } else if (rec.type == "request" || rec.type == "response") {
    TESSERA_ASSIGN_OR_RETURN(rec.tenant, stringField(j, "tenant"));
  } else {
    return core::invalidArgument("unknown record type '" + rec.type + "'");
  }
  if (canonicalJson(j) != line) {
    return core::invalidArgument(
        "not in canonical form (bytes were changed, added or removed after it was written)");
  }
  json without_hash = j;
  without_hash.erase("hash");
  if (sha256Hex(canonicalJson(without_hash)) != rec.hash) {
    return core::invalidArgument("hash does not match the record's contents");
  }
  return rec;
}

}  // namespace tessera::audit
