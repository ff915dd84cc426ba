#include "store/internal/checks.h"

#include <set>
#include <vector>

namespace tessera::store::internal {
namespace {

constexpr size_t kDescribedKeyBytes = 80;

core::Status checkBranch(const std::vector<Op>& ops, std::string_view branch) {
  if (ops.size() > kMaxTxnOps) {
    return core::invalidArgument("txn has " + std::to_string(ops.size()) + " " +
                                 std::string(branch) + " ops; the limit is " +
                                 std::to_string(kMaxTxnOps));
  }
  std::set<std::string_view> puts;
  for (const Op& op : ops) {
    switch (op.kind) {
      case Op::Kind::kPut:
        TESSERA_RETURN_IF_ERROR(checkKey(op.key));
        TESSERA_RETURN_IF_ERROR(checkValue(op.key, op.value));
        if (!puts.insert(op.key).second) {
          return core::invalidArgument("txn " + std::string(branch) + " ops put key " +
                                       describeKey(op.key) + " twice");
        }
        break;
      case Op::Kind::kDelete:
      case Op::Kind::kRange:
        TESSERA_RETURN_IF_ERROR(checkRange(op.key, op.range_end));
        if (op.limit < 0) {
          return core::invalidArgument("negative range limit " + std::to_string(op.limit));
        }
        break;
    }
  }
  for (const Op& op : ops) {
    if (op.kind != Op::Kind::kDelete) {
      continue;
    }
    for (std::string_view key : puts) {
      if (inRange(key, op.key, op.range_end)) {
        return core::invalidArgument("txn " + std::string(branch) +
                                     " ops both put and delete key " + describeKey(key));
      }
    }
  }
  return core::Status::ok();
}

}  // namespace

bool inRange(std::string_view key, std::string_view start, std::string_view end) {
  if (end.empty()) {
    return key == start;
  }
  if (end == std::string_view("\0", 1)) {
    return key >= start;
  }
  return key >= start && key < end;
}

std::string describeKey(std::string_view key) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < key.size() && i < kDescribedKeyBytes; ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  out += "'";
  if (key.size() > kDescribedKeyBytes) {
    out += "... (" + std::to_string(key.size()) + " bytes)";
  }
  return out;
}

core::Status checkKey(std::string_view key) {
  if (key.empty()) {
    return core::invalidArgument("empty key: a key is 1 to " + std::to_string(kMaxKeyBytes) +
                                 " bytes");
  }
  if (key.size() > kMaxKeyBytes) {
    return core::invalidArgument("key " + describeKey(key) +
                                 " is too long: " + std::to_string(key.size()) +
                                 " bytes, the limit is " + std::to_string(kMaxKeyBytes));
  }
  return core::Status::ok();
}

core::Status checkRange(std::string_view key, std::string_view range_end) {
  TESSERA_RETURN_IF_ERROR(checkKey(key));
  if (range_end.size() > kMaxKeyBytes) {
    return core::invalidArgument("range end " + describeKey(range_end) +
                                 " is too long: " + std::to_string(range_end.size()) +
                                 " bytes, the limit is " + std::to_string(kMaxKeyBytes));
  }
  return core::Status::ok();
}

core::Status checkValue(std::string_view key, std::string_view value) {
  if (value.size() > kMaxValueBytes) {
    return core::invalidArgument(
        "value of key " + describeKey(key) + " is too large: " + std::to_string(value.size()) +
        " bytes, the limit is " + std::to_string(kMaxValueBytes) + " (1.5 MiB)");
  }
  return core::Status::ok();
}

core::Status checkTxn(const Txn& txn) {
  if (txn.compares.size() + txn.guard.size() > kMaxTxnOps) {
    return core::invalidArgument(
        "txn has " + std::to_string(txn.compares.size() + txn.guard.size()) +
        " compares (guard included); the limit is " + std::to_string(kMaxTxnOps));
  }
  for (const Compare& c : txn.compares) {
    TESSERA_RETURN_IF_ERROR(checkKey(c.key));
  }
  for (const Compare& c : txn.guard) {
    TESSERA_RETURN_IF_ERROR(checkKey(c.key));
  }
  TESSERA_RETURN_IF_ERROR(checkBranch(txn.success, "success"));
  return checkBranch(txn.failure, "failure");
}

}  // namespace tessera::store::internal
