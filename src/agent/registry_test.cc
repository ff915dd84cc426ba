// RegistrySession against a fake registry that speaks the Bearer-token flow (as Docker Hub,
// GHCR and Harbor do) over TLS, and that keeps its blobs behind a redirect to another origin (as
// registries backed by object storage do): a small Python server on loopback, with a
// certificate made for the test. The basic-auth flow runs against the real docker-registry in
// tests/integration/registry_test.cc.
#include "agent/registry.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "agent/oci_image.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;

// The fake: GET /v2/team/app/manifests/<ref> and /v2/team/app/blobs/<digest> need
// "Bearer tok-123", which /token gives for basic "u:p" and the pull scope of team/app; blobs
// redirect to a plain-HTTP storage origin that refuses any Authorization header, and serves
// blobs/<hex> (else one default blob; a file fail-<hex> holding N makes its first N tries a 500).
// Every request's line and Authorization are appended to requests.log.
constexpr const char* kFake = R"PY(
import http.server, ssl, sys, threading, json, base64, os
d = sys.argv[1]
manifest = open(os.path.join(d, 'manifest.json'), 'rb').read()
blob = open(os.path.join(d, 'blob'), 'rb').read()
log = open(os.path.join(d, 'requests.log'), 'a')
class Storage(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        log.write('storage %s %s\n' % (self.path, self.headers.get('Authorization', '-'))); log.flush()
        if self.headers.get('Authorization'):
            self.send_response(400); self.end_headers(); return
        hexd = self.path.rsplit('/', 1)[-1]
        fail = os.path.join(d, 'fail-' + hexd)
        left = int(open(fail).read() or 0) if os.path.exists(fail) else 0
        if left > 0:
            with open(fail, 'w') as f: f.write(str(left - 1))
            self.send_response(500); self.send_header('Content-Length', '0'); self.end_headers(); return
        path = os.path.join(d, 'blobs', hexd)
        body = open(path, 'rb').read() if os.path.exists(path) else blob
        self.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers()
        self.wfile.write(body)
storage = http.server.HTTPServer(('127.0.0.1', 0), Storage)
threading.Thread(target=storage.serve_forever, daemon=True).start()
class Registry(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def send(self, code, body=b'', headers={}):
        self.send_response(code)
        for k, v in headers.items(): self.send_header(k, v)
        self.send_header('Content-Length', str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        auth = self.headers.get('Authorization', '-')
        log.write('registry %s %s\n' % (self.path, auth)); log.flush()
        port = self.server.server_address[1]
        if self.path.startswith('/token'):
            if auth != 'Basic ' + base64.b64encode(b'u:p').decode() or 'scope=repository%3Ateam%2Fapp%3Apull' not in self.path:
                return self.send(401, b'{"errors":[{"code":"UNAUTHORIZED","message":"bad login"}]}')
            return self.send(200, json.dumps({'token': 'tok-123'}).encode())
        if auth != 'Bearer tok-123':
            return self.send(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}', {'WWW-Authenticate':
                'Bearer realm="https://127.0.0.1:%d/token",service="fake registry",scope="repository:team/app:pull"' % port})
        if self.path in ('/v2/team/app/manifests/1', '/v2/team/app/manifests/' + sys.argv[2]):
            return self.send(200, manifest, {'Content-Type': 'application/vnd.oci.image.manifest.v1+json'})
        if self.path.startswith('/v2/team/app/blobs/'):
            return self.send(307, b'', {'Location': 'http://127.0.0.1:%d/store/%s' % (
                storage.server_address[1], self.path.rsplit(':', 1)[-1])})
        return self.send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}')
server = http.server.HTTPServer(('127.0.0.1', 0), Registry)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(os.path.join(d, 'cert.pem'), os.path.join(d, 'key.pem'))
server.socket = ctx.wrap_socket(server.socket, server_side=True)
open(os.path.join(d, 'port.tmp'), 'w').write(str(server.server_address[1]))
os.rename(os.path.join(d, 'port.tmp'), os.path.join(d, 'port'))
server.serve_forever()
)PY";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string sha256(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  std::string out = "sha256:";
  for (unsigned int i = 0; i < len; ++i) {
    static constexpr char kHex[] = "0123456789abcdef";
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

class RegistrySessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera-registry-unit-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // A real image: one gzip layer holding /etc/marker, and its config.
    fs::create_directories(dir_ / "layer" / "etc");
    fs::create_directories(dir_ / "blobs");
    std::ofstream(dir_ / "layer" / "etc" / "marker") << "from the registry\n";
    ASSERT_EQ(std::system(("tar -C " + (dir_ / "layer").string() + " -czf " +
                           (dir_ / "layer.tgz").string() + " .")
                              .c_str()),
              0);
    const std::string layer = slurp(dir_ / "layer.tgz");
    const std::string config = R"({"architecture":"amd64","os":"linux","config":{"Cmd":["sh"]}})";
    layer_digest_ = sha256(layer);
    for (const std::string* b : {&layer, &config}) {
      std::ofstream(dir_ / "blobs" / sha256(*b).substr(7), std::ios::binary) << *b;
    }
    manifest_ = nlohmann::json{{"schemaVersion", 2},
                               {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                               {"config",
                                {{"mediaType", "application/vnd.oci.image.config.v1+json"},
                                 {"digest", sha256(config)},
                                 {"size", config.size()}}},
                               {"layers",
                                {{{"mediaType", "application/vnd.oci.image.layer.v1.tar+gzip"},
                                  {"digest", layer_digest_},
                                  {"size", layer.size()}}}}}
                    .dump();
    blob_ = std::string(300000, 'b') + "end";
    std::ofstream(dir_ / "manifest.json") << manifest_;
    std::ofstream(dir_ / "blob") << blob_;
    std::ofstream(dir_ / "fake.py") << kFake;
    const std::string cert =
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
        "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout " +
        (dir_ / "key.pem").string() + " -out " + (dir_ / "cert.pem").string() + " 2>/dev/null";
    ASSERT_EQ(std::system(cert.c_str()), 0) << "openssl cannot make a test certificate";
    pid_ = ::fork();
    if (pid_ == 0) {
      (void)!std::freopen((dir_ / "fake.log").c_str(), "w", stderr);
      const std::string script = (dir_ / "fake.py").string();
      const std::string d = dir_.string();
      const std::string digest = sha256(manifest_);
      ::execl("/usr/bin/python3", "python3", script.c_str(), d.c_str(), digest.c_str(), nullptr);
      _exit(127);
    }
    for (int i = 0; i < 500 && !fs::exists(dir_ / "port"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(fs::exists(dir_ / "port")) << slurp(dir_ / "fake.log");
    registry_ = "127.0.0.1:" + slurp(dir_ / "port");
    options_.hosts[registry_].ca_file = (dir_ / "cert.pem").string();
    options_.timeout = std::chrono::seconds(10);
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    fs::remove_all(dir_);
  }
  model::ImageRef ref(const std::string& rest) {
    auto r = model::parseImageRef(registry_ + "/" + rest);
    EXPECT_TRUE(r.isOk()) << r.status().message();
    return *r;
  }

  fs::path dir_;
  pid_t pid_ = -1;
  std::string manifest_, blob_, registry_, layer_digest_;
  RegistryOptions options_;
};

TEST_F(RegistrySessionTest, BearerTokenFlowWithTheTasksLoginAndBlobsThroughARedirect) {
  RegistrySession s(options_, ref("team/app:1"), {"u", "p"});
  auto m = s.manifest("1");
  ASSERT_TRUE(m.isOk()) << m.status().message() << slurp(dir_ / "fake.log");
  EXPECT_EQ(m->body, manifest_);
  EXPECT_EQ(m->digest, sha256(manifest_));
  EXPECT_EQ(m->media_type, "application/vnd.oci.image.manifest.v1+json");
  // By digest: the same bytes, checked against it.
  auto by_digest = s.manifest(sha256(manifest_));
  ASSERT_TRUE(by_digest.isOk()) << by_digest.status().message();
  std::string got;
  const core::Status st = s.blob("sha256:" + std::string(64, 'c'), [&](const void* p, size_t n) {
    got.append(static_cast<const char*>(p), n);
    return core::Status::ok();
  });
  ASSERT_TRUE(st.isOk()) << st.message() << slurp(dir_ / "requests.log");
  EXPECT_EQ(got, blob_);
  const std::string log = slurp(dir_ / "requests.log");
  // The token was asked for with the service and the pull scope; the storage origin got no
  // Authorization header (the fake answers 400 to one, so the blob would have failed).
  EXPECT_NE(log.find("service=fake%20registry"), std::string::npos) << log;
  EXPECT_NE(log.find("storage /store/" + std::string(64, 'c') + " -"), std::string::npos) << log;
}

// Mirrors are tried first, anonymously: one that cannot be reached and one that refuses an
// anonymous pull each leave it to the next, then to the registry, with the task's login.
TEST_F(RegistrySessionTest, MirrorsAreTriedFirstAnonymouslyThenTheRegistry) {
  RegistryOptions options = options_;
  options.hosts[registry_].mirrors = {"http://127.0.0.1:1", "https://" + registry_};
  RegistrySession s(options, ref("team/app:1"), {"u", "p"});
  auto m = s.manifest("1");
  ASSERT_TRUE(m.isOk()) << m.status().message();
  EXPECT_EQ(m->body, manifest_);
  const std::string log = slurp(dir_ / "requests.log");
  // The mirror (the same server here) was asked without the login; the registry with it.
  const size_t anonymous = log.find("registry /token?service=fake%20registry&scope=");
  ASSERT_NE(anonymous, std::string::npos) << log;
  EXPECT_EQ(log.substr(log.find(' ', log.find(' ', anonymous) + 1) + 1, 1), "-") << log;
  EXPECT_NE(log.find("registry /v2/team/app/manifests/1 Bearer tok-123"), std::string::npos) << log;
}

// Through the node's cache: the image's layer arrives checked against its digest, with the
// pull's progress; a download that breaks off (a 500 from the blob store) is tried again.
TEST_F(RegistrySessionTest, ALayerWhoseDownloadBrokeOffIsTriedAgain) {
  std::ofstream(dir_ / ("fail-" + layer_digest_.substr(7))) << "1";
  ImageCache cache((dir_ / "cache").string(), options_);
  int64_t last_done = -1;
  int64_t last_total = -1;
  auto img = cache.get(ref("team/app:1"),
                       {.credentials = {"u", "p"}, .progress = [&](int64_t done, int64_t total) {
                          last_done = done;
                          last_total = total;
                        }});
  ASSERT_TRUE(img.isOk()) << img.status().message() << slurp(dir_ / "requests.log");
  ASSERT_EQ(img->layer_dirs.size(), 1U);
  EXPECT_EQ(slurp(fs::path(img->layer_dirs[0]) / "etc" / "marker"), "from the registry\n");
  EXPECT_EQ(img->config.cmd, std::vector<std::string>{"sh"});
  EXPECT_EQ(last_done, last_total);  // The failed try's bytes are not counted twice.
  EXPECT_EQ(last_total, static_cast<int64_t>(fs::file_size(dir_ / "layer.tgz")));
  const std::string log = slurp(dir_ / "requests.log");
  size_t tries = 0;
  for (size_t at = log.find("storage /store/" + layer_digest_.substr(7)); at != std::string::npos;
       at = log.find("storage /store/" + layer_digest_.substr(7), at + 1)) {
    ++tries;
  }
  EXPECT_EQ(tries, 2U) << log;
  cache.release(*img);
  // Three failures in a row: the task's reason says so.
  std::ofstream(dir_ / ("fail-" + layer_digest_.substr(7))) << "3";
  ImageCache empty((dir_ / "cache2").string(), options_);
  auto failed = empty.get(ref("team/app:1"), {.credentials = {"u", "p"}});
  ASSERT_FALSE(failed.isOk());
  EXPECT_EQ(failed.status().code(), core::StatusCode::kUnavailable);
  EXPECT_NE(failed.status().message().find("answered 500"), std::string::npos)
      << failed.status().message();
  EXPECT_NE(failed.status().message().find("(after 3 tries)"), std::string::npos)
      << failed.status().message();
}

TEST_F(RegistrySessionTest, RefusalsMissingManifestsAndBadCertificatesSayWhy) {
  {
    RegistrySession s(options_, ref("team/app:1"), {"u", "wrong"});
    auto m = s.manifest("1");
    ASSERT_FALSE(m.isOk());
    EXPECT_EQ(m.status().code(), core::StatusCode::kPermissionDenied);
    EXPECT_NE(m.status().message().find("unauthorized: the token service"), std::string::npos)
        << m.status().message();
    EXPECT_NE(m.status().message().find("refused the pull secret's credentials"), std::string::npos)
        << m.status().message();
  }
  {
    RegistrySession s(options_, ref("team/app:1"), {});
    auto m = s.manifest("1");
    ASSERT_FALSE(m.isOk());
    EXPECT_NE(m.status().message().find("an anonymous pull (no pull secret)"), std::string::npos)
        << m.status().message();
  }
  {
    RegistrySession s(options_, ref("team/app:2"), {"u", "p"});
    auto m = s.manifest("2");
    ASSERT_FALSE(m.isOk());
    EXPECT_EQ(m.status().code(), core::StatusCode::kNotFound);
    EXPECT_NE(m.status().message().find("not found: registry " + registry_ +
                                        " has no manifest 2 (MANIFEST_UNKNOWN: manifest unknown)"),
              std::string::npos)
        << m.status().message();
  }
  {
    // A digest whose bytes the registry does not have: its 404, not someone else's bytes.
    RegistrySession s(options_, ref("team/app:1"), {"u", "p"});
    auto m = s.manifest("sha256:" + std::string(64, 'd'));
    ASSERT_FALSE(m.isOk());
    EXPECT_EQ(m.status().code(), core::StatusCode::kNotFound);
  }
  {
    // Without the registry's CA: the handshake fails, and the error says where to set it.
    RegistryOptions no_ca = options_;
    no_ca.hosts.clear();
    RegistrySession s(no_ca, ref("team/app:1"), {"u", "p"});
    auto m = s.manifest("1");
    ASSERT_FALSE(m.isOk());
    EXPECT_EQ(m.status().code(), core::StatusCode::kUnavailable);
    EXPECT_NE(m.status().message().find("set ca_file in the agent's registry \"" + registry_),
              std::string::npos)
        << m.status().message();
  }
}

}  // namespace
}  // namespace tessera::agent
