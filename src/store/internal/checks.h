// Key ranges and input checks shared by the store backends, so every backend reads ranges the
// same way and rejects the same requests with the same messages: keys of 1 to kMaxKeyBytes bytes,
// values up to kMaxValueBytes, txns of at most kMaxTxnOps per part that write each key at most
// once per branch.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "store/store.h"

namespace tessera::store::internal {

// True if `key` is in [start, end) with etcd's meaning of `end` (see store.h).
bool inRange(std::string_view key, std::string_view start, std::string_view end);

// A key for messages: quoted, non-printable bytes as \xNN, long keys cut short.
std::string describeKey(std::string_view key);

core::Status checkKey(std::string_view key);
// A key with the range end of a range, delete or watch.
core::Status checkRange(std::string_view key, std::string_view range_end);
core::Status checkValue(std::string_view key, std::string_view value);
core::Status checkTxn(const Txn& txn);

}  // namespace tessera::store::internal
