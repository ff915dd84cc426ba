// Fuzzes parseJsonConfig and hclBlocks on what it returns: any input gives either a JSON object
// that survives dump() and whose blocks all have the asked number of labels and an object body,
// or an InvalidArgument error that names the file and is valid UTF-8; nlohmann's exceptions never
// escape. Never a crash, hang or leak.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/hcl.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tessera::core::StatusCode;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = tessera::core::parseJsonConfig(text, "fuzz.json");
  if (!parsed.isOk()) {
    const std::string& message = parsed.status().message();
    FUZZ_CHECK(parsed.status().code() == StatusCode::kInvalidArgument);
    FUZZ_CHECK(message.starts_with("fuzz.json"));
    (void)nlohmann::json(message).dump();  // Throws (and so crashes) on invalid UTF-8.
    return 0;
  }
  FUZZ_CHECK(parsed->is_object());
  (void)parsed->dump();
  // Read every top-level name as blocks with 0 to 3 labels, as a config reader would.
  for (const auto& [name, value] : parsed->items()) {
    for (size_t label_count = 0; label_count <= 3; ++label_count) {
      auto blocks = tessera::core::hclBlocks(*parsed, name, label_count, "fuzz.json");
      if (!blocks.isOk()) {
        FUZZ_CHECK(blocks.status().message().starts_with("fuzz.json: /"));
        (void)nlohmann::json(blocks.status().message()).dump();
        continue;
      }
      for (const tessera::core::HclBlock& block : *blocks) {
        FUZZ_CHECK(block.labels.size() == label_count);
        FUZZ_CHECK(block.body->is_object());
      }
    }
  }
  return 0;
}
