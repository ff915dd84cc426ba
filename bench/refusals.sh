#!/bin/bash
# What the audit records of refused requests cost (docs/benchmarks.md, "Records of refused
# requests"): starts `tessera server` in a temp dir (certificates from a throwaway `tessera
# dev`), sends PAR keep-alive curl clients' N requests each with an unknown token, and prints
# the rate and what the audit log grew by.
#
#   bench/refusals.sh build/tessera                                  # the default budget
#   bench/refusals.sh build/tessera 'audit_refusals { per_source_rate = 1000000
#       per_source_burst = 1000000 unauthenticated_rate = 1000000 unauthenticated_burst = 1000000 }'
#   PAR=4 N=2000 bench/refusals.sh ...
set -euo pipefail
BIN=$1
EXTRA=${2:-}
N=${N:-2000}
PAR=${PAR:-4}
D=$(mktemp -d /tmp/tessera-refusals-XXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$D"' EXIT
"$BIN" dev --data-dir "$D/dev" --addr 127.0.0.1:0 --simulated >/dev/null 2>&1 &
DEV=$!
for _ in $(seq 100); do [ -s "$D/dev/dev.json" ] && break; sleep 0.1; done
kill "$DEV"; wait "$DEV" 2>/dev/null || true
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
cat > "$D/server.hcl" <<HCL
storage "sqlite" { path = "$D/t.db" }
listener "tcp" { address = "127.0.0.1:$PORT"  tls_cert_file = "$D/dev/server.pem"
                 tls_key_file = "$D/dev/server-key.pem" }
audit "file" { path = "$D/audit.log" }
nodes { simulated = "dgx-h100:1" }
$EXTRA
HCL
"$BIN" server -config="$D/server.hcl" >"$D/out" 2>"$D/err" &
SERVER=$!
for _ in $(seq 100); do grep -q listening "$D/out" && break; sleep 0.1; done
URLS=$(for _ in $(seq "$N"); do printf 'https://127.0.0.1:%s/v1/tenants/demo/workloads?list=true ' "$PORT"; done)
before=$(stat -c %s "$D/audit.log")
start=$(date +%s.%N)
pids=""
for _ in $(seq "$PAR"); do
  # shellcheck disable=SC2086  # one argument per URL
  curl -s -H "X-Tessera-Token: tsr.badbadbadbadbadbadbadbad1" --cacert "$D/dev/ca.pem" $URLS >/dev/null &
  pids="$pids $!"
done
# shellcheck disable=SC2086
wait $pids
end=$(date +%s.%N)
sleep 1.5  # The summary of what the budget dropped comes within a second.
after=$(stat -c %s "$D/audit.log")
kill "$SERVER"; wait "$SERVER" 2>/dev/null || true
echo "$((N * PAR)) requests in $(echo "$end - $start" | bc) s = $(echo "$N * $PAR / ($end - $start)" | bc) req/s; audit log +$((after - before)) bytes, $(wc -l <"$D/audit.log") lines"
