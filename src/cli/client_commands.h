// The client commands of `tessera`, in the HashiCorp style: `login`, `tenant`, `token`,
// `policy`, `run`, `ps`, `show`, `cancel`, `nodes`, `top` and `audit tail`, each one or a few
// calls to the control plane's API (docs/server.md) over one keep-alive connection
// (api/client.h).
//
// Where and as whom (a flag wins over its environment variable):
//   --address  TESSERA_ADDR    the server, default https://127.0.0.1:8200
//   --token    TESSERA_TOKEN   else the token `tessera login` stored in ~/.tessera-token
//   --ca-cert  TESSERA_CACERT  PEM CA to trust, else the system's
//   --client-cert, --client-key  TESSERA_CLIENT_CERT, TESSERA_CLIENT_KEY: a PEM client
//                              certificate and key for a listener that requires one (mTLS)
//   --tenant   TESSERA_TENANT  the tenant scope (/v1/tenants/<t>/...); unset, a tenant token's
//                              own tenant (from lookup-self), else the admin scope
//   -format=json               JSON instead of tables: the server's data, as answered
//
// Exit codes: 0 done; 1 the server refused (`error: <status>: <message>` on stderr) or could
// not be reached (the message names the address and why), or `run --wait` saw the workload
// fail; 2 usage or bad input.
#pragma once

#include <CLI/CLI.hpp>

namespace tessera::cli {

// Adds the client commands to `app`; a command's exit code goes to `*rc`.
void addClientCommands(CLI::App& app, int* rc);
// Adds `tail` (the tenant's audit records, from the server) to the `audit` command.
void addAuditTail(CLI::App& audit, int* rc);
// `tessera node ...` (node_commands.cc): join tokens, cordon, drain, remove, dedicated pools.
void addNodeCommands(CLI::App& app, int* rc);
// `tessera kubeconfig` (kubeconfig_command.cc): a kubeconfig for the tenant's Kubernetes API.
void addKubeconfigCommand(CLI::App& app, int* rc);

}  // namespace tessera::cli
