# A Tessera server for a small GPU fleet: one machine runs the server, agents join with join
# tokens (docs/server.md "Nodes join"). Checked by `tessera server -validate` in the tests
# (CliServerConfigTest.ExamplesAndDocsConfigsValidateAndStart), with these paths moved under a
# temporary folder.
#
# Certificates, if you have no PKI of your own (as `nomad tls` makes them):
#   cd /etc/tessera && tessera tls ca create
#   tessera tls cert create --server --dns tessera.example.internal --ip 10.0.0.10
#   (keep tessera-ca-key.pem off this machine once the certificates are made)
# Then: tessera server -validate -config=/etc/tessera/server.hcl && tessera server -config=...

storage "sqlite" { path = "/var/lib/tessera/tessera.db" }

# Operators, agents and every tenant's CLI, console and Vault clients.
listener "tcp" {
  address       = "0.0.0.0:8200"
  tls_cert_file = "/etc/tessera/tessera-server.pem"
  tls_key_file  = "/etc/tessera/tessera-server-key.pem"
}

# The audit log: every request, hash-chained and signed, rotated by size and age; verify it
# with `tessera audit verify /var/log/tessera/audit.log`. Ship the rotated files off the machine.
audit "file" {
  path            = "/var/log/tessera/audit.log"
  rotate_bytes    = 104857600
  rotate_interval = "24h"
  retain_files    = 30
}

# No nodes block: no node until an agent joins (`tessera node join-token create`), and no
# simulated ones.

scheduler { policy = "tessera" }

limits {
  max_workloads = 10000
  max_pending   = 1000
}

# Interactive tokens last a working day at most; service credentials (Prometheus, CI) are
# periodic tokens: `tessera token create --period 24h ...`.
tokens {
  default_ttl = "1h"
  max_ttl     = "24h"
}

secrets { seal = "file" }
