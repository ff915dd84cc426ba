// Reads configuration files written in HCL (the subset Vault and Nomad configs use) or JSON into
// one nlohmann::json shape, so `tessera server -config=server.hcl` and scenario files can be
// written either way and are read by the same code.
//
//   TESSERA_ASSIGN_OR_RETURN(nlohmann::json config, parseConfigFile("server.hcl"));
//   TESSERA_ASSIGN_OR_RETURN(std::vector<HclBlock> listeners,
//                            hclBlocks(config, "listener", /*label_count=*/1, "server.hcl"));
//   for (const HclBlock& l : listeners) {  // l.labels == {"tcp"}, l.body->at("address") ...
//   }
//
// The HCL accepted:
//   - attributes `name = value`; names are identifiers (letters, digits, `_`, `-`).
//   - values: "strings" with the escapes \n \r \t \" \\ \uNNNN \UNNNNNNNN; numbers (`42`, `-7`,
//     `1.5`, `2e-3`; integers stay int64, anything with `.` or an exponent is a double, and a
//     number that fits neither is an error);
//     `true`, `false`, `null`; lists `[1, 2,]` (commas between elements, a trailing one allowed);
//     objects `{ a = 1, "b": 2 }` (keys are identifiers or strings, `=` or `:`, commas
//     optional); heredocs `<<EOF` ... `EOF` and `<<-EOF`, which strips the common leading
//     whitespace of its lines (in both, the closing marker may be indented).
//   - templates are NOT evaluated: `${...}` and `%{...}` are kept verbatim in the string, and so
//     are their escapes `$${` and `%%{`. Inside `${...}` only braces and quoted strings are
//     tracked, so `"${f("}")}"` is one string. Heredoc text is verbatim too (no escapes), with
//     CRLF line endings turned into LF.
//   - blocks `type "label"... { body }` with zero or more quoted labels.
//   - comments `#`, `//` and `/* */`. Newlines are not significant: attributes and blocks may
//     follow each other on one line (`listener "tcp" { a = 1 b = 2 }`).
//   - not accepted: variables, function calls, operators, `for` expressions, unquoted labels.
//
// The JSON shape. Attributes map to their values. Blocks use an array at every level, which is
// valid HCL JSON syntax and never changes shape when a block is repeated:
//   - a block type maps to an array with one element per block, in source order;
//   - each label wraps the level below in an object `{"<label>": [ ... ]}`;
//   - the innermost array holds the block body, an object.
//
//   storage "sqlite" { path = "/db" }      {"storage":  [{"sqlite": [{"path": "/db"}]}],
//   listener "tcp" { address = ":1" }  =>   "listener": [{"tcp": [{"address": ":1"}]},
//   listener "tcp" { address = ":2" }                    {"tcp": [{"address": ":2"}]}],
//   telemetry { enabled = true }            "telemetry": [{"enabled": true}]}
//
// As in every HCL JSON form, an attribute holding a list of objects looks like a block in JSON;
// the reader's schema (which names are blocks, with how many labels) tells them apart.
//
// Read blocks through hclBlocks() rather than by hand: it also accepts the other spellings HCL's
// JSON syntax allows (`"listener": {"tcp": {...}}`), which people write in .json configs.
//
// Errors are kInvalidArgument (kNotFound for a missing file) with a message that names the place:
// "server.hcl:3:17: expected '=' or a block body after 'address', got a string". Columns count
// Unicode characters from 1. A name set twice in one body or one object is an error.
//
// Hostile input is safe: input over kConfigMaxBytes, nesting deeper than kConfigMaxDepth and
// invalid UTF-8 are errors; parsing is linear in the input and its recursion is bounded by
// kConfigMaxDepth. All functions are thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera::core {

// The largest config text accepted, in bytes.
inline constexpr size_t kConfigMaxBytes = size_t{4} * 1024 * 1024;
// The deepest nesting accepted. Blocks, block labels, lists and objects each count as a level
// (so the JSON is at most twice as deep); `${` inside strings is limited separately.
inline constexpr int kConfigMaxDepth = 64;
// The deepest nesting of JSON arrays and objects parseJsonConfig accepts, below the top-level
// object: enough for the JSON form of anything parseHcl accepts.
inline constexpr int kConfigMaxJsonDepth = 2 * kConfigMaxDepth;

// Parses HCL `text` into a JSON object as described above. `filename` only names the text in
// error messages.
Result<nlohmann::json> parseHcl(std::string_view text, std::string_view filename);

// Parses JSON `text`, which must hold an object, with the same kind of limits and of
// "file:line:column: ..." errors as parseHcl. Duplicate keys are an error (named by their JSON
// path, as nlohmann does not report where keys are).
Result<nlohmann::json> parseJsonConfig(std::string_view text, std::string_view filename);

// Reads the file at `path`: `.hcl` is parsed with parseHcl, `.json` with parseJsonConfig, any
// other extension is an error.
Result<nlohmann::json> parseConfigFile(const std::string& path);

// One block found by hclBlocks(). `body` points into the json passed to hclBlocks() and lives
// as long as it does.
struct HclBlock {
  std::vector<std::string> labels;
  const nlohmann::json* body;
};

// The blocks of `type` in `body` (a parsed config or a block body), in order, each with exactly
// `label_count` labels; none when `body` has no `type`. Accepts the shape parseHcl produces and
// HCL JSON's other forms: at any level an object may stand for a one-element array, and a label
// object may hold several labels. An error names `source` and the JSON path that does not fit.
Result<std::vector<HclBlock>> hclBlocks(const nlohmann::json& body, std::string_view type,
                                        size_t label_count, std::string_view source);
// The blocks would point into a temporary.
Result<std::vector<HclBlock>> hclBlocks(const nlohmann::json&& body, std::string_view type,
                                        size_t label_count, std::string_view source) = delete;

}  // namespace tessera::core
