#include "secrets/shamir.h"

#include <gtest/gtest.h>

namespace tessera::secrets {
namespace {

TEST(ShamirTest, AnyThresholdOfTheSharesGivesTheSecretBack) {
  const std::string secret = "0123456789abcdef0123456789abcdef";
  auto shares = splitSecret(secret, 5, 3);
  ASSERT_TRUE(shares.isOk()) << shares.status().toString();
  ASSERT_EQ(shares->size(), 5U);
  for (const std::string& s : *shares) {
    EXPECT_EQ(s.size(), secret.size() + 1);
    EXPECT_EQ(s.find(secret.substr(0, 8)), std::string::npos);
  }
  // Every 3-subset and the 4- and 5-sets.
  for (int a = 0; a < 5; ++a) {
    for (int b = a + 1; b < 5; ++b) {
      for (int c = b + 1; c < 5; ++c) {
        auto back = combineShares({(*shares)[a], (*shares)[b], (*shares)[c]});
        ASSERT_TRUE(back.isOk());
        EXPECT_EQ(*back, secret) << a << b << c;
      }
    }
  }
  EXPECT_EQ(*combineShares(*shares), secret);
  EXPECT_EQ(*combineShares({(*shares)[4], (*shares)[0], (*shares)[2], (*shares)[1]}), secret);
}

TEST(ShamirTest, FewerThanTheThresholdGiveSomethingElse) {
  const std::string secret(32, '\x5a');
  auto shares = splitSecret(secret, 5, 3);
  ASSERT_TRUE(shares.isOk());
  auto two = combineShares({(*shares)[0], (*shares)[1]});
  ASSERT_TRUE(two.isOk());  // Nothing in two shares says they are too few...
  EXPECT_NE(*two, secret);  // ...but they do not give the secret.
}

TEST(ShamirTest, RefusesBadParametersAndBadShares) {
  EXPECT_FALSE(splitSecret("k", 5, 1).isOk());
  EXPECT_FALSE(splitSecret("k", 3, 4).isOk());
  EXPECT_FALSE(splitSecret("k", 256, 3).isOk());
  EXPECT_FALSE(splitSecret("", 5, 3).isOk());
  auto shares = splitSecret("secret", 3, 2);
  ASSERT_TRUE(shares.isOk());
  EXPECT_FALSE(combineShares({(*shares)[0]}).isOk());
  EXPECT_FALSE(combineShares({(*shares)[0], (*shares)[0]}).isOk());  // The same share twice.
  EXPECT_FALSE(combineShares({(*shares)[0], (*shares)[1].substr(1)}).isOk());
}

TEST(ShamirTest, HexRoundTrip) {
  const std::string bytes("\x00\x01\xfe\xff\x7f", 5);
  EXPECT_EQ(toHex(bytes), "0001feff7f");
  EXPECT_EQ(*fromHex("0001FEff7f"), bytes);
  EXPECT_FALSE(fromHex("abc").isOk());
  EXPECT_FALSE(fromHex("zz").isOk());
}

}  // namespace
}  // namespace tessera::secrets
