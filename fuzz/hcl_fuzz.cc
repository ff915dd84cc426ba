// Fuzzes parseHcl: any input gives either a JSON object that survives dump() and reads back
// equal through parseJsonConfig (the HCL/JSON equivalence), or an InvalidArgument error that
// names the file and is valid UTF-8. Never a crash, hang or leak.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/hcl.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tessera::core::StatusCode;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = tessera::core::parseHcl(text, "fuzz.hcl");
  if (!parsed.isOk()) {
    const std::string& message = parsed.status().message();
    FUZZ_CHECK(parsed.status().code() == StatusCode::kInvalidArgument);
    FUZZ_CHECK(message.starts_with("fuzz.hcl:"));
    (void)nlohmann::json(message).dump();  // Throws (and so crashes) on invalid UTF-8.
    return 0;
  }
  FUZZ_CHECK(parsed->is_object());
  const std::string dumped = parsed->dump();
  auto again = tessera::core::parseJsonConfig(dumped, "fuzz.json");
  FUZZ_CHECK(again.isOk());
  FUZZ_CHECK(*again == *parsed);
  return 0;
}
