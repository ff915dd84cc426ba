#include "cli/tls_command.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "server/certs.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;

struct TlsFlags {
  std::string out_dir = ".";
  int days = 0;
  std::string common_name;
  bool server = false;
  bool client = false;
  std::string ca = "tessera-ca.pem";
  std::string ca_key = "tessera-ca-key.pem";
  std::vector<std::string> dns;
  std::vector<std::string> ips;
};

core::Result<std::string> readFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return core::notFound(what + " '" + path +
                          "' cannot be read (make one with `tessera tls ca create`, or name it "
                          "with --ca and --ca-key)");
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Writes each (path, content, secret) file, none if any of them exists already: a key is never
// overwritten by accident.
core::Status writeNew(const std::vector<std::tuple<std::string, std::string, bool>>& files) {
  for (const auto& [path, content, secret] : files) {
    if (fs::exists(path)) {
      return core::Status(core::StatusCode::kAlreadyExists,
                          "'" + path + "' exists already; remove it or choose --out-dir");
    }
  }
  for (const auto& [path, content, secret] : files) {
    TESSERA_RETURN_IF_ERROR(server::writeFile(path, content, secret));
  }
  return core::Status::ok();
}

core::Status caCreate(const TlsFlags& f) {
  if (f.days < 1 || f.days > 36500) {
    return core::invalidArgument("--days: expected 1 to 36500");
  }
  TESSERA_ASSIGN_OR_RETURN(
      auto ca, server::CertAuthority::create(f.common_name, std::chrono::hours(24) * f.days));
  const std::string cert = (fs::path(f.out_dir) / "tessera-ca.pem").string();
  const std::string key = (fs::path(f.out_dir) / "tessera-ca-key.pem").string();
  TESSERA_RETURN_IF_ERROR(writeNew({{cert, ca->certPem(), false}, {key, ca->keyPem(), true}}));
  std::cout << "==> CA certificate saved to: " << cert << "\n"
            << "==> CA certificate key saved to: " << key << " (0600: keep it off the servers)\n\n"
            << "Next: `tessera tls cert create --server --dns <host> --ip <addr>` for each server, "
               "and give clients the CA: TESSERA_CACERT="
            << cert << "\n";
  return core::Status::ok();
}

core::Status certCreate(const TlsFlags& f) {
  if (f.server == f.client) {
    return core::invalidArgument("give exactly one of --server and --client");
  }
  if (f.days < 1 || f.days > 36500) {
    return core::invalidArgument("--days: expected 1 to 36500");
  }
  TESSERA_ASSIGN_OR_RETURN(std::string ca_pem, readFile(f.ca, "the CA certificate"));
  TESSERA_ASSIGN_OR_RETURN(std::string key_pem, readFile(f.ca_key, "the CA key"));
  auto ca = server::CertAuthority::load(ca_pem, key_pem, std::chrono::hours(24) * f.days);
  if (!ca.isOk()) {
    return ca.status().withContext(f.ca + ", " + f.ca_key);
  }
  std::vector<std::string> dns = f.dns;
  std::vector<std::string> ips = f.ips;
  std::string name = f.common_name;
  if (f.server) {
    // Reachable on the machine itself too, as Nomad's server certificates are.
    for (const char* d : {"localhost"}) {
      if (std::find(dns.begin(), dns.end(), d) == dns.end()) {
        dns.emplace_back(d);
      }
    }
    if (std::find(ips.begin(), ips.end(), "127.0.0.1") == ips.end()) {
      ips.emplace_back("127.0.0.1");
    }
    if (name.empty()) {
      name = f.dns.empty() ? "tessera server" : f.dns.front();
    }
  } else if (name.empty()) {
    name = "tessera client";
  }
  auto issued = (*ca)->issue(name, dns, ips, f.client);
  if (!issued.isOk()) {
    return issued.status();
  }
  const std::string kind = f.server ? "server" : "client";
  const std::string cert = (fs::path(f.out_dir) / ("tessera-" + kind + ".pem")).string();
  const std::string key = (fs::path(f.out_dir) / ("tessera-" + kind + "-key.pem")).string();
  TESSERA_RETURN_IF_ERROR(
      writeNew({{cert, issued->cert_pem, false}, {key, issued->key_pem, true}}));
  std::cout << "==> Using CA certificate " << f.ca << " and key " << f.ca_key << "\n"
            << "==> " << (f.server ? "Server" : "Client") << " certificate saved to: " << cert
            << "\n"
            << "==> " << (f.server ? "Server" : "Client") << " certificate key saved to: " << key
            << "\n";
  if (f.server) {
    std::string names;
    for (const std::string& d : dns) {
      names += (names.empty() ? "" : ", ") + d;
    }
    for (const std::string& ip : ips) {
      names += (names.empty() ? "" : ", ") + ip;
    }
    std::cout << "    valid for: " << names << "\n\n"
              << "In the server's config:\n"
              << "  listener \"tcp\" {\n    address = \"0.0.0.0:8200\"\n    tls_cert_file = \""
              << cert << "\"\n    tls_key_file = \"" << key << "\"\n  }\n";
  } else {
    std::cout << "\nFor a listener with tls_client_ca_file = \"" << f.ca
              << "\": TESSERA_CLIENT_CERT=" << cert << " TESSERA_CLIENT_KEY=" << key << "\n";
  }
  return core::Status::ok();
}

template <typename F>
void onRun(CLI::App* c, const std::shared_ptr<TlsFlags>& flags, F run, int* rc) {
  c->callback([flags, run, rc] {
    core::Status st = run(*flags);
    if (!st.isOk()) {
      std::cerr << "error: " << st.message() << "\n";
      *rc = st.code() == core::StatusCode::kInvalidArgument ? 2 : 1;
    }
  });
}

}  // namespace

void addTlsCommand(CLI::App& app, int* rc) {
  CLI::App* tls = app.add_subcommand(
      "tls", "Make a CA and server and client certificates (for a fleet with no PKI of its own)");
  tls->require_subcommand(1);
  CLI::App* ca = tls->add_subcommand("ca", "The certificate authority");
  ca->require_subcommand(1);
  {
    auto f = std::make_shared<TlsFlags>();
    f->days = 1825;
    f->common_name = "Tessera CA";
    CLI::App* c = ca->add_subcommand(
        "create", "Create a CA: tessera-ca.pem and tessera-ca-key.pem (0600), never overwritten");
    c->add_option("--days", f->days, "How long it is valid")->capture_default_str();
    c->add_option("--common-name", f->common_name, "Its name")->capture_default_str();
    c->add_option("--out-dir", f->out_dir, "Where the files go")->capture_default_str();
    onRun(c, f, &caCreate, rc);
  }
  CLI::App* cert = tls->add_subcommand("cert", "Certificates signed by the CA");
  cert->require_subcommand(1);
  {
    auto f = std::make_shared<TlsFlags>();
    f->days = 365;
    CLI::App* c = cert->add_subcommand(
        "create",
        "Create a server certificate (tessera-server.pem, -key.pem; for localhost and 127.0.0.1 "
        "too) or a client one (tessera-client.pem, -key.pem), signed by the CA");
    c->add_flag("--server", f->server, "A server's certificate (serverAuth)");
    c->add_flag("--client", f->client, "A client's certificate (clientAuth), for mTLS listeners");
    c->add_option("--dns", f->dns, "A DNS name the server answers to (repeat, or a,b)")
        ->delimiter(',');
    c->add_option("--ip", f->ips, "An IP address the server answers on (repeat, or a,b)")
        ->delimiter(',');
    c->add_option("--common-name", f->common_name,
                  "Its name (default: the first --dns, or tessera server / tessera client)");
    c->add_option("--ca", f->ca, "The CA certificate")->capture_default_str();
    c->add_option("--ca-key", f->ca_key, "The CA key")->capture_default_str();
    c->add_option("--days", f->days, "How long it is valid")->capture_default_str();
    c->add_option("--out-dir", f->out_dir, "Where the files go")->capture_default_str();
    onRun(c, f, &certCreate, rc);
  }
}

}  // namespace tessera::cli
