#include "store/store.h"

#include <utility>

namespace tessera::store {

std::string prefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

Compare Compare::version(std::string key, Relation relation, int64_t version) {
  return {std::move(key), Target::kVersion, relation, version, {}};
}

Compare Compare::createRevision(std::string key, Relation relation, int64_t revision) {
  return {std::move(key), Target::kCreateRevision, relation, revision, {}};
}

Compare Compare::modRevision(std::string key, Relation relation, int64_t revision) {
  return {std::move(key), Target::kModRevision, relation, revision, {}};
}

Compare Compare::value(std::string key, Relation relation, std::string value) {
  return {std::move(key), Target::kValue, relation, 0, std::move(value)};
}

Op Op::put(std::string key, std::string value, LeaseId lease) {
  return {Kind::kPut, std::move(key), {}, std::move(value), lease, 0};
}

Op Op::del(std::string key, std::string range_end) {
  return {Kind::kDelete, std::move(key), std::move(range_end), {}, {}, 0};
}

Op Op::get(std::string key, std::string range_end, int64_t limit) {
  return {Kind::kRange, std::move(key), std::move(range_end), {}, {}, limit};
}

core::Result<std::optional<KeyValue>> Store::get(std::string_view key) {
  TESSERA_ASSIGN_OR_RETURN(RangeResult r, range(key));
  if (r.kvs.empty()) {
    return std::optional<KeyValue>();
  }
  return std::optional<KeyValue>(std::move(r.kvs.front()));
}

}  // namespace tessera::store
