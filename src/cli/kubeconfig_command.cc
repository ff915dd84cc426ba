// `tessera kubeconfig`: a kubeconfig that points kubectl (and every client-go or Python client)
// at a tenant's Kubernetes API (docs/kubernetes.md).
#include "audit/crypto.h"
#include "cli/client_commands.h"
#include "cli/client_session.h"

namespace tessera::cli {

namespace {

struct KubeconfigFlags {
  CommonFlags common;
  std::string output;
  std::string name;
};

// A YAML string, double-quoted (JSON's escapes are YAML's).
std::string yamlString(const std::string& s) { return nlohmann::json(s).dump(); }

core::Status kubeconfig(const KubeconfigFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(std::string tenant, s->tenant("a Kubernetes API"));
  // The token must work before it is written anywhere.
  if (auto me = s->self(); !me.isOk()) {
    if (me.status().code() == core::StatusCode::kNotFound) {
      // A tenant's paths answer 404 to a token that is not of that tenant (and a listener
      // chrooted to a tenant knows no other).
      return core::notFound("the token is not valid for tenant '" + tenant +
                            "' at this address (a token of another tenant, or a listener "
                            "chrooted to another tenant)");
    }
    return me.status();
  }
  const ClientConfig c = clientConfig(f.common);
  std::string address = c.address;
  const size_t comma = address.find(',');
  if (comma != std::string::npos) {
    address = address.substr(0, comma);  // The first of several replicas.
  }
  while (!address.empty() && address.back() == '/') {
    address.pop_back();
  }
  // On a listener chrooted to the tenant the API is at its root.
  const std::string probe = Session::path(tenant, "k8s");
  const std::string server =
      address + (s->rooted(probe) != probe ? std::string() : "/v1/tenants/" + tenant + "/k8s");
  std::string token = orEnv(f.common.token, "TESSERA_TOKEN");
  if (token.empty()) {
    token = storedToken();
  }
  const std::string name = f.name.empty() ? "tessera-" + tenant : f.name;
  std::string yaml = "apiVersion: v1\nkind: Config\nclusters:\n- name: " + yamlString(name) +
                     "\n  cluster:\n    server: " + yamlString(server) + "\n";
  if (!c.ca_cert_file.empty()) {
    std::ifstream in(c.ca_cert_file);
    if (!in) {
      return core::invalidArgument("cannot read the CA file " + c.ca_cert_file);
    }
    const std::string pem((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    yaml += "    certificate-authority-data: " + yamlString(audit::base64Encode(pem)) + "\n";
  }
  yaml += "users:\n- name: " + yamlString(name) + "\n  user:\n    token: " + yamlString(token) +
          "\ncontexts:\n- name: " + yamlString(name) +
          "\n  context:\n    cluster: " + yamlString(name) + "\n    user: " + yamlString(name) +
          "\n    namespace: default\ncurrent-context: " + yamlString(name) + "\n";
  if (f.output.empty() || f.output == "-") {
    std::cout << yaml;
    return core::Status::ok();
  }
  // It holds the token: the owner's alone, written whole or not at all.
  TESSERA_RETURN_IF_ERROR(writePrivateFile(f.output, yaml));
  std::cerr << "Wrote " << f.output << " (mode 0600): tenant '" << tenant << "' at " << server
            << ". Use it with `KUBECONFIG=" << f.output
            << " kubectl get pods`; it holds the token, which expires as the token does.\n";
  return core::Status::ok();
}

}  // namespace

void addKubeconfigCommand(CLI::App& app, int* rc) {
  auto f = std::make_shared<KubeconfigFlags>();
  CLI::App* c = app.add_subcommand(
      "kubeconfig",
      "Write a kubeconfig for the tenant's Kubernetes API (kubectl, client-go, python)");
  addCommonFlags(c, f->common);
  c->add_option("-o,--output", f->output,
                "Write it to this file (mode 0600) instead of standard output");
  c->add_option("--name", f->name,
                "The cluster, user and context name in it (default: tessera-<tenant>)");
  c->footer(
      "The kubeconfig holds the token (from --token, TESSERA_TOKEN or `tessera login`), the "
      "server (the tenant's k8s/ path, or the root of a listener chrooted to the tenant) and the "
      "CA from --ca-cert/TESSERA_CACERT. Example: tessera kubeconfig --tenant team-a -o "
      "team-a.kubeconfig && KUBECONFIG=team-a.kubeconfig kubectl get pods");
  bind(c, f, &kubeconfig, rc);
}

}  // namespace tessera::cli
