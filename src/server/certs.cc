#include "server/certs.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tessera::server {
namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct X509Free {
  void operator()(X509* p) const { X509_free(p); }
};
struct BioFree {
  void operator()(BIO* p) const { BIO_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Cert = std::unique_ptr<X509, X509Free>;

std::string sslError(const std::string& what) {
  const unsigned long e = ERR_get_error();
  char buf[256] = {0};
  if (e != 0) {
    ERR_error_string_n(e, buf, sizeof(buf));
  }
  return what + (e != 0 ? std::string(": ") + buf : "");
}

core::Result<Pkey> newKey() {
  Pkey key(EVP_EC_gen("P-256"));
  if (key == nullptr) {
    return core::internalError(sslError("cannot generate an EC key"));
  }
  return key;
}

std::string toPem(X509* cert) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), cert);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return {data, static_cast<size_t>(n)};
}

std::string toPem(EVP_PKEY* key) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return {data, static_cast<size_t>(n)};
}

core::Status addExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) {
    return core::internalError(sslError("bad certificate extension '" + value + "'"));
  }
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return core::Status::ok();
}

core::Result<Cert> newCert(const std::string& cn, EVP_PKEY* key, std::chrono::seconds validity) {
  Cert cert(X509_new());
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  RAND_bytes(serial, sizeof(serial));
  serial[0] &= 0x7f;  // Positive.
  BIGNUM* bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -300);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(validity.count()));
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  return cert;
}

}  // namespace

struct CertAuthority::Keys {
  Pkey key;
  Cert cert;
};

CertAuthority::~CertAuthority() = default;

core::Result<std::unique_ptr<CertAuthority>> CertAuthority::create(const std::string& common_name,
                                                                   std::chrono::seconds validity) {
  std::unique_ptr<CertAuthority> ca(new CertAuthority());
  ca->keys_ = std::make_unique<Keys>();
  TESSERA_ASSIGN_OR_RETURN(ca->keys_->key, newKey());
  TESSERA_ASSIGN_OR_RETURN(ca->keys_->cert, newCert(common_name, ca->keys_->key.get(), validity));
  X509* c = ca->keys_->cert.get();
  X509_set_issuer_name(c, X509_get_subject_name(c));
  TESSERA_RETURN_IF_ERROR(addExt(c, c, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
  TESSERA_RETURN_IF_ERROR(addExt(c, c, NID_key_usage, "critical,keyCertSign,cRLSign"));
  TESSERA_RETURN_IF_ERROR(addExt(c, c, NID_subject_key_identifier, "hash"));
  if (X509_sign(c, ca->keys_->key.get(), EVP_sha256()) == 0) {
    return core::internalError(sslError("cannot sign the CA certificate"));
  }
  ca->cert_pem_ = toPem(c);
  ca->key_pem_ = toPem(ca->keys_->key.get());
  ca->validity_ = validity;
  return ca;
}

core::Result<std::unique_ptr<CertAuthority>> CertAuthority::load(const std::string& cert_pem,
                                                                 const std::string& key_pem,
                                                                 std::chrono::seconds validity) {
  std::unique_ptr<CertAuthority> ca(new CertAuthority());
  ca->keys_ = std::make_unique<Keys>();
  std::unique_ptr<BIO, BioFree> cert_bio(
      BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
  ca->keys_->cert.reset(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (ca->keys_->cert == nullptr) {
    return core::invalidArgument(sslError("the CA certificate is not a PEM certificate"));
  }
  std::unique_ptr<BIO, BioFree> key_bio(
      BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  ca->keys_->key.reset(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (ca->keys_->key == nullptr) {
    return core::invalidArgument(sslError("the CA key is not a PEM private key"));
  }
  if (X509_check_private_key(ca->keys_->cert.get(), ca->keys_->key.get()) != 1) {
    ERR_clear_error();
    return core::invalidArgument("the CA key is not the CA certificate's key");
  }
  if (X509_check_ca(ca->keys_->cert.get()) == 0) {
    return core::invalidArgument("the certificate is not a CA's (no CA:TRUE basic constraint)");
  }
  ca->cert_pem_ = cert_pem;
  ca->key_pem_ = key_pem;
  ca->validity_ = validity;
  return ca;
}

core::Result<IssuedCert> CertAuthority::issue(const std::string& common_name,
                                              const std::vector<std::string>& dns_names,
                                              const std::vector<std::string>& ip_addresses,
                                              bool client) const {
  TESSERA_ASSIGN_OR_RETURN(Pkey key, newKey());
  TESSERA_ASSIGN_OR_RETURN(Cert cert, newCert(common_name, key.get(), validity_));
  X509* c = cert.get();
  X509* issuer = keys_->cert.get();
  X509_set_issuer_name(c, X509_get_subject_name(issuer));
  TESSERA_RETURN_IF_ERROR(addExt(c, issuer, NID_basic_constraints, "critical,CA:FALSE"));
  TESSERA_RETURN_IF_ERROR(addExt(c, issuer, NID_key_usage, "critical,digitalSignature"));
  TESSERA_RETURN_IF_ERROR(
      addExt(c, issuer, NID_ext_key_usage, client ? "clientAuth" : "serverAuth"));
  std::string san;
  for (const std::string& d : dns_names) {
    san += (san.empty() ? "" : ",") + std::string("DNS:") + d;
  }
  for (const std::string& ip : ip_addresses) {
    san += (san.empty() ? "" : ",") + std::string("IP:") + ip;
  }
  if (!san.empty()) {
    TESSERA_RETURN_IF_ERROR(addExt(c, issuer, NID_subject_alt_name, san));
  }
  if (X509_sign(c, keys_->key.get(), EVP_sha256()) == 0) {
    return core::internalError(sslError("cannot sign the certificate for '" + common_name + "'"));
  }
  return IssuedCert{toPem(c), toPem(key.get())};
}

core::Status writeFile(const std::string& path, const std::string& content, bool secret) {
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, secret ? 0600 : 0644);
  if (fd < 0) {
    return core::failedPrecondition("cannot write '" + path + "': " + std::strerror(errno));
  }
  // A file that was there keeps its mode through O_TRUNC: a key must not stay readable.
  if (secret && ::fchmod(fd, 0600) != 0) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    return core::failedPrecondition("cannot chmod 0600 '" + path + "': " + err);
  }
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      const std::string err = std::strerror(errno);
      ::close(fd);
      return core::failedPrecondition("cannot write '" + path + "': " + err);
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const std::string err = synced ? "" : std::strerror(errno);
  if (::close(fd) != 0 || !synced) {
    return core::failedPrecondition("cannot write '" + path +
                                    "': " + (synced ? std::strerror(errno) : err));
  }
  return core::Status::ok();
}

}  // namespace tessera::server
