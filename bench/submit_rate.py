#!/usr/bin/python3
"""Submissions per second from one tenant as its workloads grow (issue #40, item 7).

Posts N one-GPU workloads (each runs 10 h) from C clients of one tenant, each over one
HTTPS connection, retrying a 429 after 10 ms, and prints the rate of each 1,000 accepted:

  tessera dev --simulated --nodes dgx-h100:500 --data-dir D --addr 127.0.0.1:8300 &
  TESSERA_TOKEN=<root> tessera tenant update demo --max-workloads 100000 \\
      --max-pending 100000 --request-rate 20000 --request-burst 20000
  TESSERA_TOKEN=<demo's token> bench/submit_rate.py https://127.0.0.1:8300 D/ca.pem 16000 8

The token comes from TESSERA_TOKEN, never the command line. Only the standard library: run
it with /usr/bin/python3 (docs/benchmarks.md).
"""
import http.client
import json
import os
import ssl
import sys
import threading
import time


def main():
    token = os.environ.get("TESSERA_TOKEN", "")
    if len(sys.argv) != 5 or not token:
        sys.exit(__doc__)
    addr, ca = sys.argv[1], sys.argv[2]
    total, clients = int(sys.argv[3]), int(sys.argv[4])
    host, port = addr.removeprefix("https://").rsplit(":", 1)
    context = ssl.create_default_context(cafile=ca)
    body = json.dumps({"gpu": {"count": 1}, "cpuMilli": 1000, "memoryMiB": 1024,
                       "duration": 36000})
    headers = {"X-Tessera-Token": token, "Content-Type": "application/json"}
    lock = threading.Lock()
    accepted = [0]
    marks = []
    start = time.monotonic()

    def client(k):
        conn = http.client.HTTPSConnection(host, int(port), context=context)
        for i in range(k, total, clients):
            while True:
                conn.request("POST", f"/v1/tenants/demo/workloads/rate-{i}", body, headers)
                answer = conn.getresponse()
                answer.read()
                if answer.status != 429:
                    break
                time.sleep(0.01)
            if answer.status != 202:
                print(f"workload rate-{i}: HTTP {answer.status}", file=sys.stderr)
                return
            with lock:
                accepted[0] += 1
                if accepted[0] % 1000 == 0:
                    marks.append((accepted[0], time.monotonic() - start))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    before = (0, 0.0)
    for n, at in marks:
        print(f"{n} accepted at {at:.1f} s: {(n - before[0]) / (at - before[1]):.0f}/s")
        before = (n, at)


if __name__ == "__main__":
    main()
