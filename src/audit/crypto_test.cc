#include "audit/crypto.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sys/stat.h>

#include <atomic>
#include <thread>
#include <vector>

#include "audit/test_util.h"

namespace tessera::audit {
namespace {

using testing::readFile;
using testing::TempDir;
using testing::writeFile;

TEST(CryptoTest, Sha256MatchesTheFipsVectors) {
  EXPECT_EQ(sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(CryptoTest, HmacValueIsPrefixedHmacSha256KeyedWithTheSalt) {
  // RFC 4231 test case 2: key "Jefe".
  EXPECT_EQ(hmacValue("Jefe", "what do ya want for nothing?"),
            "hmac-sha256:5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_NE(hmacValue("Jefe", "x"), hmacValue("Jeff", "x"));
}

TEST(CryptoTest, HmacValueStaysRightAcrossSaltsAndThreads) {
  // RFC 4231 test case 1 (key: 20 bytes of 0x0b) and case 2, interleaved: each thread keeps
  // a keyed context for its last salt and must re-key when the salt changes.
  const std::string key1(20, '\x0b');
  const std::string want1 =
      "hmac-sha256:b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7";
  const std::string want2 =
      "hmac-sha256:5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        if ((i + t) % 3 == 0) {
          wrong += hmacValue(key1, "Hi There") != want1;
        } else {
          wrong += hmacValue("Jefe", "what do ya want for nothing?") != want2;
        }
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  EXPECT_EQ(wrong, 0);
  // The same salt twice in a row: the second value is not mixed with the first.
  EXPECT_EQ(hmacValue(key1, "Hi There"), want1);
  EXPECT_EQ(hmacValue(key1, "Hi There"), want1);
}

TEST(CryptoTest, RandomHexHasTheLengthAskedAndDiffers) {
  auto a = randomHex(32);
  auto b = randomHex(32);
  ASSERT_TRUE(a.isOk());
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_NE(*a, *b);
}

TEST(CryptoTest, SaltFileIsCreatedPrivateReadBackAndNeverOverwritten) {
  TempDir dir;
  const std::string path = dir.file("salt");
  auto salt = createSaltFile(path);
  ASSERT_TRUE(salt.isOk()) << salt.status().toString();
  EXPECT_EQ(salt->size(), 64u);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto read = readSaltFile(path);
  ASSERT_TRUE(read.isOk());
  EXPECT_EQ(*read, *salt);  // The trailing newline is not part of the salt.
  auto again = createSaltFile(path);
  EXPECT_EQ(again.status().code(), core::StatusCode::kAlreadyExists);
  EXPECT_EQ(*readSaltFile(path), *salt);
}

TEST(CryptoTest, SaltFileMustNotBeEmpty) {
  TempDir dir;
  writeFile(dir.file("salt"), "\n");
  auto salt = readSaltFile(dir.file("salt"));
  ASSERT_FALSE(salt.isOk());
  EXPECT_NE(salt.status().message().find("empty"), std::string::npos);
  EXPECT_FALSE(readSaltFile(dir.file("missing")).isOk());
}

TEST(CryptoTest, SignatureVerifiesWithItsPublicKeyOnly) {
  auto pair = generateKeyPairPem();
  auto other = generateKeyPairPem();
  ASSERT_TRUE(pair.isOk() && other.isOk());
  EXPECT_NE(pair->private_pem.find("BEGIN PRIVATE KEY"), std::string::npos);
  EXPECT_NE(pair->public_pem.find("BEGIN PUBLIC KEY"), std::string::npos);
  auto signer = SigningKey::fromPem(pair->private_pem);
  auto verifier = VerifyingKey::fromPem(pair->public_pem);
  auto stranger = VerifyingKey::fromPem(other->public_pem);
  ASSERT_TRUE(signer.isOk() && verifier.isOk() && stranger.isOk());
  EXPECT_EQ((*signer)->keyId(), (*verifier)->keyId());
  EXPECT_NE((*signer)->keyId(), (*stranger)->keyId());
  EXPECT_EQ((*signer)->keyId().size(), 16u);

  auto sig = (*signer)->signHex("checkpoint 42");
  ASSERT_TRUE(sig.isOk());
  EXPECT_EQ(sig->size(), 128u);
  EXPECT_TRUE((*verifier)->verifyHex("checkpoint 42", *sig));
  EXPECT_FALSE((*verifier)->verifyHex("checkpoint 43", *sig));
  EXPECT_FALSE((*stranger)->verifyHex("checkpoint 42", *sig));
  std::string flipped = *sig;
  flipped[10] = flipped[10] == '0' ? '1' : '0';
  EXPECT_FALSE((*verifier)->verifyHex("checkpoint 42", flipped));
  EXPECT_FALSE((*verifier)->verifyHex("checkpoint 42", "zz"));
}

TEST(CryptoTest, KeysFromPemRejectGarbageAndOtherKeyTypes) {
  auto bad = SigningKey::fromPem("not a key");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("PRIVATE KEY"), std::string::npos);
  EXPECT_FALSE(VerifyingKey::fromPem("not a key").isOk());

  EVP_PKEY* ec = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  ASSERT_NE(ec, nullptr);
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PUBKEY(bio, ec);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  const std::string pem(data, static_cast<size_t>(n));
  BIO_free(bio);
  EVP_PKEY_free(ec);
  auto key = VerifyingKey::fromPem(pem);
  ASSERT_FALSE(key.isOk());
  EXPECT_NE(key.status().message().find("not an Ed25519 key"), std::string::npos);
}

TEST(CryptoTest, KeyPairFilesArePrivateLoadableAndNeverOverwritten) {
  TempDir dir;
  const std::string priv = dir.file("audit.pem");
  const std::string pub = dir.file("audit.pub.pem");
  ASSERT_TRUE(writeKeyPairFiles(priv, pub).isOk());
  struct stat st {};
  ASSERT_EQ(::stat(priv.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto signer = SigningKey::fromPemFile(priv);
  auto verifier = VerifyingKey::fromPemFile(pub);
  ASSERT_TRUE(signer.isOk() && verifier.isOk());
  EXPECT_TRUE((*verifier)->verifyHex("m", *(*signer)->signHex("m")));

  const std::string before = readFile(priv);
  EXPECT_EQ(writeKeyPairFiles(priv, dir.file("other.pub.pem")).code(),
            core::StatusCode::kAlreadyExists);
  EXPECT_EQ(readFile(priv), before);
}

}  // namespace
}  // namespace tessera::audit
