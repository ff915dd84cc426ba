#include "secrets/aws_sts.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <string>

namespace tessera::secrets {
namespace {

// The shape of AWS's documented AssumeRoleWithWebIdentity answer.
constexpr const char* kGood =
    R"(<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>tenant:team-1:workload:w:task:0</SubjectFromWebIdentityToken>
    <Audience>sts.amazonaws.com</Audience>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/s3/tessera</Arn>
      <AssumedRoleId>AROACLKWSDQRAOEXAMPLE:tessera</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <SessionToken>FwoGZX&amp;IvYXdz&lt;x&gt;</SessionToken>
      <SecretAccessKey>wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY</SecretAccessKey>
      <Expiration>2026-12-03T06:30:00Z</Expiration>
      <AccessKeyId>ASIAIOSFODNN7EXAMPLE</AccessKeyId>
    </Credentials>
    <Provider>tessera.example</Provider>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>ad4156e9-bce1-11e2-82e6-6b6efEXAMPLE</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>)";

TEST(StsParse, GoodAnswerGivesEveryField) {
  auto c = parseStsResponse(kGood);
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(c->access_key_id, "ASIAIOSFODNN7EXAMPLE");
  EXPECT_EQ(c->secret_access_key, "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
  EXPECT_EQ(c->session_token, "FwoGZX&IvYXdz<x>");  // Entities decoded.
  EXPECT_EQ(c->expiration, "2026-12-03T06:30:00Z");
}

TEST(StsParse, ErrorAnswerNamesCodeAndMessage) {
  auto c = parseStsResponse(
      R"(<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>)"
      R"(<Code>AccessDenied</Code><Message>Not authorized to perform sts:AssumeRoleWithWebIdentity</Message>)"
      R"(</Error><RequestId>x</RequestId></ErrorResponse>)");
  ASSERT_FALSE(c.isOk());
  EXPECT_EQ(c.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.status().message(),
            "STS refused: AccessDenied: Not authorized to perform sts:AssumeRoleWithWebIdentity");
}

TEST(StsParse, MalformedOrTruncatedIsAClearError) {
  const std::string good = kGood;
  struct Case {
    std::string xml;
    std::string want;
  };
  const Case cases[] = {
      {"", "no <Credentials>"},
      {"not xml at all", "no <Credentials>"},
      {good.substr(0, good.find("</Credentials>")), "no <Credentials>"},  // Cut short.
      {good.substr(0, good.find("<SecretAccessKey>") + 20), "no <Credentials>"},
      {"<Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
       "<SessionToken></SessionToken><Expiration>E</Expiration></Credentials>",
       "without <SessionToken>"},
      {"<Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
       "<SessionToken>T</SessionToken></Credentials>",
       "without <Expiration>"},
      {"<Credentials><AccessKeyId>A<SecretAccessKey>S</SecretAccessKey></Credentials>",
       "without <AccessKeyId>"},
  };
  for (const Case& c : cases) {
    auto r = parseStsResponse(c.xml);
    ASSERT_FALSE(r.isOk()) << c.xml;
    EXPECT_EQ(r.status().code(), core::StatusCode::kInternal) << c.xml;
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << c.xml << " -> " << r.status().message();
  }
}

TEST(StsParse, TagTextFindsOnlyExactTags) {
  EXPECT_EQ(xmlTagText("<a><Code>X</Code></a>", "Code"), "X");
  EXPECT_EQ(xmlTagText("<CodeX>Y</CodeX>", "Code"), std::nullopt);
  EXPECT_EQ(xmlTagText("<Code>unterminated", "Code"), std::nullopt);
  EXPECT_EQ(xmlTagText("<Code>a &amp;&amp; b &bogus;</Code>", "Code"), "a && b &bogus;");
}

TEST(StsClamp, LeastOfTheBoundsWins) {
  EXPECT_EQ(*clampStsDuration(3600, 0, std::nullopt, std::nullopt), 3600);
  EXPECT_EQ(*clampStsDuration(7200, 3600, std::nullopt, std::nullopt), 3600);
  EXPECT_EQ(*clampStsDuration(3600, 0, 1500, std::nullopt), 1500);
  EXPECT_EQ(*clampStsDuration(3600, 0, 2000, 1200), 1200);
  EXPECT_EQ(*clampStsDuration(3600, 0, std::nullopt, 1000000), 3600);
  EXPECT_EQ(*clampStsDuration(3600, 0, 900, 900), 900);  // Exactly the minimum is fine.
  EXPECT_EQ(*clampStsDuration(0, 0, std::nullopt, std::nullopt), kStsDefaultTtlSeconds);
  EXPECT_EQ(*clampStsDuration(100000, 0, std::nullopt, std::nullopt), kStsMaxDurationSeconds);
}

TEST(StsClamp, UnderFifteenMinutesIsRefusedNeverLengthened) {
  auto grant = clampStsDuration(3600, 0, 899, std::nullopt);
  ASSERT_FALSE(grant.isOk());
  EXPECT_EQ(grant.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(grant.status().message().find("the grant's remaining window (899 s)"),
            std::string::npos)
      << grant.status().message();
  EXPECT_NE(grant.status().message().find("15-minute minimum"), std::string::npos);
  auto token = clampStsDuration(3600, 0, 2000, 60);
  ASSERT_FALSE(token.isOk());
  EXPECT_NE(token.status().message().find("the token's remaining TTL (60 s)"), std::string::npos);
  auto gone = clampStsDuration(3600, 0, -5, std::nullopt);
  ASSERT_FALSE(gone.isOk());
  EXPECT_NE(gone.status().message().find("(0 s)"), std::string::npos);
}

TEST(StsEndpoint, HttpsAnywhereHttpOnlyOnLoopback) {
  auto a = parseStsEndpoint("https://sts.eu-west-1.amazonaws.com");
  ASSERT_TRUE(a.isOk());
  EXPECT_TRUE(a->tls);
  EXPECT_EQ(a->host, "sts.eu-west-1.amazonaws.com");
  EXPECT_EQ(a->port, "443");
  EXPECT_EQ(a->target, "/");
  auto b = parseStsEndpoint("http://127.0.0.1:8123/sts");
  ASSERT_TRUE(b.isOk());
  EXPECT_FALSE(b->tls);
  EXPECT_EQ(b->port, "8123");
  EXPECT_EQ(b->target, "/sts");
  auto v6 = parseStsEndpoint("http://[::1]:99");
  ASSERT_TRUE(v6.isOk());
  EXPECT_EQ(v6->host, "::1");
  for (const char* bad : {"http://sts.amazonaws.com", "http://10.0.0.1:80", "ftp://x", "sts.com",
                          "https://", "https://h:0", "https://h:99999", "https://h:12x",
                          "https://u@h", "https://h/?a=b", "http://127.0.0.1.evil.com"}) {
    EXPECT_FALSE(parseStsEndpoint(bad).isOk()) << bad;
  }
}

TEST(StsForm, ValuesAreUrlEncoded) {
  EXPECT_EQ(assumeRoleWithWebIdentityForm("arn:aws:iam::1:role/a b", "s", "x.y+z/=", 900),
            "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A1%"
            "3Arole%2Fa%20b&RoleSessionName=s&WebIdentityToken=x.y%2Bz%2F%3D&DurationSeconds=900");
  EXPECT_EQ(stsSessionName("tessera:team-1/x"), "tessera-team-1-x");
  EXPECT_EQ(stsSessionName("a"), "a-");
  EXPECT_EQ(stsSessionName(std::string(100, 'a')).size(), 64u);
}

TEST(StsCall, UnreachableEndpointIsAClearErrorNamingIt) {
  // A port that was just free: nothing listens there.
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  const int port = a.local_endpoint().port();
  a.close();
  auto ep = parseStsEndpoint("http://127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(ep.isOk());
  auto r = callSts(*ep, "Action=x", std::chrono::seconds(2));
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), core::StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("STS at http://127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("connect failed"), std::string::npos) << r.status().message();
}

TEST(StsCall, SilentEndpointTimesOut) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  auto ep = parseStsEndpoint("http://127.0.0.1:" + std::to_string(a.local_endpoint().port()));
  ASSERT_TRUE(ep.isOk());
  // The kernel accepts the connection into the backlog; nobody ever answers.
  const auto t0 = std::chrono::steady_clock::now();
  auto r = callSts(*ep, "Action=x", std::chrono::milliseconds(300));
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("no answer within 300 ms"), std::string::npos)
      << r.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
}

}  // namespace
}  // namespace tessera::secrets
