#include "server/node_mailbox.h"

#include <gtest/gtest.h>

#include <thread>

namespace tessera::server {
namespace {

using namespace std::chrono_literals;

TEST(NodeMailboxTest, ARequestIsHandedOnceAndAnsweredOnlyByItsNode) {
  NodeMailbox box;
  std::optional<core::Result<LogPiece>> got;
  std::thread asker([&] {
    got = box.fetchLog("gpu-a", {.task = "t.w.0", .stream = "stdout", .offset = 5}, 10s);
  });
  std::vector<LogRequest> handed;
  for (int i = 0; i < 500 && handed.empty(); ++i) {
    handed = box.take("gpu-a");
    std::this_thread::sleep_for(2ms);
  }
  ASSERT_EQ(handed.size(), 1U);
  EXPECT_EQ(handed[0].task, "t.w.0");
  EXPECT_EQ(handed[0].offset, 5);
  EXPECT_TRUE(box.take("gpu-a").empty());  // Once.
  EXPECT_FALSE(box.hasWaiting("gpu-a"));
  EXPECT_TRUE(box.take("gpu-b").empty());
  // Another node cannot answer it, nor an id that was never handed out.
  EXPECT_EQ(box.answer("gpu-b", handed[0].id, {"stolen", 6, ""}).code(),
            core::StatusCode::kNotFound);
  EXPECT_EQ(box.answer("gpu-a", "1-00", {"x", 1, ""}).code(), core::StatusCode::kNotFound);
  ASSERT_TRUE(box.answer("gpu-a", handed[0].id, {"hello\n", 11, ""}).isOk());
  asker.join();
  ASSERT_TRUE(got.has_value() && got->isOk());
  EXPECT_EQ((*got)->data, "hello\n");
  EXPECT_EQ((*got)->size, 11);
  // Answered: a second answer finds nothing.
  EXPECT_EQ(box.answer("gpu-a", handed[0].id, {"again", 5, ""}).code(),
            core::StatusCode::kNotFound);
}

TEST(NodeMailboxTest, NoAnswerInTimeAndTheAgentsErrorsAreErrors) {
  NodeMailbox box;
  auto silent = box.fetchLog("gpu-a", {.task = "t.w.0", .stream = "stdout"}, 50ms);
  EXPECT_EQ(silent.status().code(), core::StatusCode::kUnavailable);
  EXPECT_NE(silent.status().message().find("did not answer"), std::string::npos);
  EXPECT_TRUE(box.take("gpu-a").empty());  // Gone with its asker.
  std::thread agent([&] {
    for (int i = 0; i < 500; ++i) {
      for (const LogRequest& r : box.take("gpu-a")) {
        (void)box.answer("gpu-a", r.id, {"", 0, "no stdout log of task t.w.0"});
        return;
      }
      std::this_thread::sleep_for(2ms);
    }
  });
  auto refused = box.fetchLog("gpu-a", {.task = "t.w.0", .stream = "stdout"}, 10s);
  agent.join();
  EXPECT_EQ(refused.status().code(), core::StatusCode::kNotFound);
  EXPECT_NE(refused.status().message().find("no stdout log"), std::string::npos);
}

}  // namespace
}  // namespace tessera::server
