#include "model/codec.h"

#include <gtest/gtest.h>

namespace tessera::model {
namespace {

using nlohmann::json;

core::Result<TaskRequest> parse(const std::string& text,
                                std::function<bool(GpuModelId)> available = {}) {
  static const GpuCatalogue cat = GpuCatalogue::builtin();
  const json j = json::parse(text);
  const std::string source = "w.json";
  core::JsonNode n(j, "", source);
  TaskRequest r;
  TESSERA_RETURN_IF_ERROR(parseTaskRequest(n, cat, available, r));
  return r;
}

TEST(CodecTest, TaskRequests) {
  auto r = parse(R"({"cpuMilli": 8000, "memoryMiB": 1024, "gpu": {}})");
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r->gpu_count, 1);
  EXPECT_EQ(r->gpu_milli, core::kWholeGpu);
  EXPECT_EQ(r->isolation, Isolation::kHardware);
  EXPECT_EQ(r->cpu, core::MilliCpu{8000});
  r = parse(R"({"gpu": {"milli": 250}})");
  ASSERT_TRUE(r.isOk());
  EXPECT_TRUE(r->isFractional());
  EXPECT_EQ(r->isolation, Isolation::kProcess);
  r = parse(R"({"gpu": {"mig": "3g.40gb", "models": ["H100-80GB"]}})");
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_TRUE(r->isMig());
  ASSERT_EQ(r->models.size(), 1U);
  r = parse(R"({"cpuMilli": 500})");
  ASSERT_TRUE(r.isOk());
  EXPECT_TRUE(r->isCpuOnly());
  r = parse(R"({"cpuMilli": 500, "gpu": {"count": 0}})");  // tessera run --gpus 0
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_TRUE(r->isCpuOnly());
  EXPECT_FALSE(parse(R"({"gpu": {"count": 0, "milli": 500}})").isOk());
  r = parse(R"({"gpu": {"count": 1}, "nodeSelector": {"zone": "a", "pool": "p"}})");
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r->node_selector,
            (std::vector<std::pair<std::string, std::string>>{{"pool", "p"}, {"zone", "a"}}));
  EXPECT_EQ(parse(R"({"nodeSelector": {"-x": "a"}})").status().message().substr(0, 20),
            "w.json: nodeSelector");
  EXPECT_FALSE(parse(R"({"nodeSelector": {"zone": 3}})").isOk());
  EXPECT_FALSE(parse(R"({"nodeSelector": ["zone"]})").isOk());
}

// #41 item 3: a burst limit over a time-sliced share; refused elsewhere, naming the field.
TEST(CodecTest, ABurstLimitIsForATimeSlicedShare) {
  auto r = parse(R"({"gpu": {"milli": 300, "milliLimit": 800, "isolation": "none"}})");
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r->gpu_milli, core::MilliGpu{300});
  EXPECT_EQ(r->gpu_milli_limit, core::MilliGpu{800});
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {R"({"gpu": {"milli": 300, "milliLimit": 800}})", "time-sliced"},
           {R"({"gpu": {"count": 2, "milliLimit": 1000}})", "time-sliced"},
           {R"({"gpu": {"milli": 300, "milliLimit": 200, "isolation": "none"}})",
            "must be at least milli (300)"},
           {R"({"gpu": {"milli": 300, "milliLimit": 1001, "isolation": "none"}})", "1000"}}) {
    auto bad = parse(text);
    ASSERT_FALSE(bad.isOk()) << text;
    EXPECT_NE(bad.status().message().find("gpu.milliLimit"), std::string::npos)
        << bad.status().message();
    EXPECT_NE(bad.status().message().find(why), std::string::npos) << bad.status().message();
  }
}

TEST(CodecTest, ErrorsNameTheField) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {R"({"gpu": {"count": 99}})", "w.json: gpu.count: value 99 is outside 0..64"},
      {R"({"gpu": {"milli": 0}})", "w.json: gpu.milli: value 0 is outside 1..1000"},
      {R"({"gpu": {"isolation": "strong"}})", "gpu.isolation: expected hardware, process or none"},
      {R"({"gpu": {"models": ["B200"]}})", "gpu.models[0]: unknown GPU model 'B200'"},
      {R"({"gpu": {"models": "H100-80GB"}})", "gpu.models: expected an array"},
      {R"({"gpu": {"colour": 1}})", "gpu: unknown field 'colour'"},
      {R"({"cpuMilli": -1})", "cpuMilli: value -1 is outside"},
  };
  for (const Case& c : cases) {
    auto r = parse(c.json);
    ASSERT_FALSE(r.isOk()) << c.json;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos)
        << c.json << " -> " << r.status().message();
  }
  auto none = parse(R"({"gpu": {"models": ["H100-80GB"]}})", [](GpuModelId) { return false; });
  ASSERT_FALSE(none.isOk());
  EXPECT_NE(none.status().message().find("no node has GPU model 'H100-80GB'"), std::string::npos);
}

}  // namespace
}  // namespace tessera::model
