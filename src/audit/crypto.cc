#include "audit/crypto.h"

#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/strings.h"

namespace tessera::audit {
namespace {

using core::Result;
using core::Status;

std::string toHex(const unsigned char* data, size_t n) { return core::hexEncode(data, n); }

bool fromHex(std::string_view hex, std::vector<unsigned char>* out) {
  if (hex.size() % 2 != 0) {
    return false;
  }
  out->resize(hex.size() / 2);
  for (size_t i = 0; i < out->size(); ++i) {
    const int hi = core::hexDigitValue(hex[2 * i]);
    const int lo = core::hexDigitValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return false;
    }
    (*out)[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return true;
}

// The last OpenSSL error as text, and the queue cleared so it does not leak into the next call.
std::string opensslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) {
    return "unknown OpenSSL error";
  }
  char buf[256];
  ERR_error_string_n(code, buf, sizeof buf);
  return buf;
}

struct PkeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyDeleter>;
struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;
struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

Result<std::string> keyIdOf(EVP_PKEY* key) {
  std::array<unsigned char, 32> raw{};
  size_t len = raw.size();
  if (EVP_PKEY_get_raw_public_key(key, raw.data(), &len) != 1 || len != raw.size()) {
    return core::internalError("cannot read the Ed25519 public key: " + opensslError());
  }
  return sha256Hex(std::string_view(reinterpret_cast<const char*>(raw.data()), len)).substr(0, 16);
}

Status checkEd25519(EVP_PKEY* key, std::string_view what) {
  if (EVP_PKEY_get_id(key) != EVP_PKEY_ED25519) {
    return core::invalidArgument(std::string(what) + " is not an Ed25519 key");
  }
  return Status::ok();
}

Result<std::string> readSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return core::notFound(path + ": cannot open: " + std::strerror(errno));
  }
  std::stringstream s;
  s << in.rdbuf();
  if (in.bad()) {
    return core::internalError(path + ": cannot read");
  }
  return s.str();
}

// Creates `path` exclusively with `mode` and writes `content`, fsynced.
Status writeNewFile(const std::string& path, std::string_view content, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    if (errno == EEXIST) {
      return {core::StatusCode::kAlreadyExists,
              path + ": already exists; not overwriting it (move it away first)"};
    }
    return core::internalError(path + ": cannot create: " + std::strerror(errno));
  }
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      const std::string err = std::strerror(errno);
      ::close(fd);
      ::unlink(path.c_str());
      return core::internalError(path + ": cannot write: " + err);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    return core::internalError(path + ": cannot sync: " + std::strerror(errno));
  }
  return Status::ok();
}

}  // namespace

std::string sha256Hex(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  // EVP_Digest with SHA-256 cannot fail short of memory exhaustion; an all-zero digest would
  // then break the chain visibly rather than silently.
  EVP_Digest(data.data(), data.size(), md.data(), &len, EVP_sha256(), nullptr);
  return toHex(md.data(), len);
}

std::string base64Encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

core::Result<std::string> base64Decode(std::string_view in) {
  while (!in.empty() && std::isspace(static_cast<unsigned char>(in.back())) != 0) {
    in.remove_suffix(1);
  }
  if (in.size() % 4 != 0) {
    return core::invalidArgument("not base64");
  }
  std::string out(in.size() / 4 * 3 + 1, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  if (n < 0) {
    return core::invalidArgument("not base64");
  }
  size_t len = static_cast<size_t>(n);
  for (size_t i = in.size(); i > 0 && in[i - 1] == '='; --i) {
    --len;  // EVP_DecodeBlock counts the padding's bytes.
  }
  out.resize(len);
  return out;
}

std::string hmacValue(std::string_view salt, std::string_view value) {
  // A context per thread keyed with the last salt, re-initialized for each value: HMAC() would
  // fetch the algorithm and set the key every time, which was most of its cost (a sink has one
  // salt, and every audit record HMACs at least the token accessor).
  struct Keyed {
    std::string salt;
    EVP_MAC_CTX* ctx = nullptr;
    ~Keyed() { EVP_MAC_CTX_free(ctx); }
  };
  static EVP_MAC* const hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  thread_local Keyed keyed;
  std::array<unsigned char, EVP_MAX_MD_SIZE> mac{};
  size_t len = 0;
  bool ok = hmac != nullptr;
  if (ok && (keyed.ctx == nullptr || keyed.salt != salt)) {
    EVP_MAC_CTX_free(keyed.ctx);
    keyed.ctx = EVP_MAC_CTX_new(hmac);
    keyed.salt.clear();
    char digest[] = "SHA256";
    const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0),
                                 OSSL_PARAM_construct_end()};
    ok = keyed.ctx != nullptr &&
         EVP_MAC_init(keyed.ctx, reinterpret_cast<const unsigned char*>(salt.data()), salt.size(),
                      params) == 1;
    if (ok) {
      keyed.salt = salt;
    }
  } else if (ok) {
    ok = EVP_MAC_init(keyed.ctx, nullptr, 0, nullptr) == 1;  // Same key, fresh state.
  }
  ok = ok &&
       EVP_MAC_update(keyed.ctx, reinterpret_cast<const unsigned char*>(value.data()),
                      value.size()) == 1 &&
       EVP_MAC_final(keyed.ctx, mac.data(), &len, mac.size()) == 1;
  if (!ok) {
    // Not expected with a working OpenSSL; the one-shot call then decides.
    EVP_MAC_CTX_free(keyed.ctx);
    keyed = {};
    unsigned int one_shot = 0;
    HMAC(EVP_sha256(), salt.data(), static_cast<int>(salt.size()),
         reinterpret_cast<const unsigned char*>(value.data()), value.size(), mac.data(), &one_shot);
    len = one_shot;
  }
  return std::string(kHmacPrefix) + toHex(mac.data(), len);
}

Result<std::string> randomHex(size_t n_bytes) {
  std::vector<unsigned char> buf(n_bytes);
  if (RAND_bytes(buf.data(), static_cast<int>(buf.size())) != 1) {
    return core::internalError("no random bytes from OpenSSL: " + opensslError());
  }
  return toHex(buf.data(), buf.size());
}

Result<std::string> readSaltFile(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string salt, readSmallFile(path));
  while (!salt.empty() && (salt.back() == '\n' || salt.back() == '\r' || salt.back() == ' ' ||
                           salt.back() == '\t')) {
    salt.pop_back();
  }
  if (salt.empty()) {
    return core::invalidArgument(path + ": the salt file is empty");
  }
  return salt;
}

Result<std::string> createSaltFile(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string salt, randomHex(32));
  TESSERA_RETURN_IF_ERROR(writeNewFile(path, salt + "\n", 0600));
  return salt;
}

Result<KeyPairPem> generateKeyPairPem() {
  PkeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"));
  if (!key) {
    return core::internalError("cannot generate an Ed25519 key: " + opensslError());
  }
  BioPtr priv(BIO_new(BIO_s_mem()));
  BioPtr pub(BIO_new(BIO_s_mem()));
  if (!priv || !pub ||
      PEM_write_bio_PrivateKey(priv.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1 ||
      PEM_write_bio_PUBKEY(pub.get(), key.get()) != 1) {
    return core::internalError("cannot encode the Ed25519 key as PEM: " + opensslError());
  }
  auto contents = [](BIO* b) {
    char* data = nullptr;
    const long n = BIO_get_mem_data(b, &data);
    return std::string(data, static_cast<size_t>(n));
  };
  return KeyPairPem{contents(priv.get()), contents(pub.get())};
}

Status writeKeyPairFiles(const std::string& private_path, const std::string& public_path) {
  if (::access(public_path.c_str(), F_OK) == 0) {
    return {core::StatusCode::kAlreadyExists,
            public_path + ": already exists; not overwriting it (move it away first)"};
  }
  TESSERA_ASSIGN_OR_RETURN(KeyPairPem pair, generateKeyPairPem());
  TESSERA_RETURN_IF_ERROR(writeNewFile(private_path, pair.private_pem, 0600));
  return writeNewFile(public_path, pair.public_pem, 0644);
}

Result<std::unique_ptr<SigningKey>> SigningKey::fromPem(std::string_view pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  PkeyPtr key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key) {
    return core::invalidArgument(
        "not a PEM private key (expected '-----BEGIN PRIVATE KEY-----'): " + opensslError());
  }
  TESSERA_RETURN_IF_ERROR(checkEd25519(key.get(), "the private key"));
  TESSERA_ASSIGN_OR_RETURN(std::string id, keyIdOf(key.get()));
  return std::unique_ptr<SigningKey>(new SigningKey(key.release(), std::move(id)));
}

Result<std::unique_ptr<SigningKey>> SigningKey::fromPemFile(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string pem, readSmallFile(path));
  auto key = fromPem(pem);
  if (!key.isOk()) {
    return key.status().withContext(path);
  }
  return key;
}

SigningKey::~SigningKey() { EVP_PKEY_free(key_); }

Result<std::string> SigningKey::signHex(std::string_view message) const {
  MdCtxPtr ctx(EVP_MD_CTX_new());
  std::array<unsigned char, 64> sig{};
  size_t len = sig.size();
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key_) != 1 ||
      EVP_DigestSign(ctx.get(), sig.data(), &len,
                     reinterpret_cast<const unsigned char*>(message.data()), message.size()) != 1) {
    return core::internalError("cannot sign with the Ed25519 key: " + opensslError());
  }
  return toHex(sig.data(), len);
}

Result<std::unique_ptr<VerifyingKey>> VerifyingKey::fromPem(std::string_view pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  PkeyPtr key(bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key) {
    return core::invalidArgument("not a PEM public key (expected '-----BEGIN PUBLIC KEY-----'): " +
                                 opensslError());
  }
  TESSERA_RETURN_IF_ERROR(checkEd25519(key.get(), "the public key"));
  TESSERA_ASSIGN_OR_RETURN(std::string id, keyIdOf(key.get()));
  return std::unique_ptr<VerifyingKey>(new VerifyingKey(key.release(), std::move(id)));
}

Result<std::unique_ptr<VerifyingKey>> VerifyingKey::fromPemFile(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string pem, readSmallFile(path));
  auto key = fromPem(pem);
  if (!key.isOk()) {
    return key.status().withContext(path);
  }
  return key;
}

VerifyingKey::~VerifyingKey() { EVP_PKEY_free(key_); }

bool VerifyingKey::verifyHex(std::string_view message, std::string_view signature_hex) const {
  std::vector<unsigned char> sig;
  if (!fromHex(signature_hex, &sig) || sig.size() != 64) {
    return false;
  }
  MdCtxPtr ctx(EVP_MD_CTX_new());
  const bool ok =
      ctx && EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key_) == 1 &&
      EVP_DigestVerify(ctx.get(), sig.data(), sig.size(),
                       reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
  ERR_clear_error();
  return ok;
}

}  // namespace tessera::audit
