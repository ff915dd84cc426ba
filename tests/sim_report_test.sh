#!/usr/bin/env bash
# The simulator's HTML reports in a real browser: `tessera sim openb` (with the authors' curves),
# `sim scenario` and `sim philly` write report.html; Debian's headless Chromium must load each and
# hold its charts in the DOM with their data points, and paint the openb and scenario plots in a
# 1280x2000 screenshot.
# Without Chromium the test fails (scripts/bootstrap installs it), it is never skipped.
#   tests/sim_report_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
chromium=${TESSERA_CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
  echo "FAIL: $chromium not found: this test needs Debian's chromium" \
    "(scripts/bootstrap installs it)"
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

sample=$source/testdata/openb-sample
mkdir -p "$work/expected"
# Two arrived columns only: the authors' curve has two points, at 99 % and 100 %.
cat > "$work/expected/analysis_allo_discrete.csv" <<'CSV'
workload,sc_policy,tune,seed,total_gpus,99,100
openb_pod_list_pods,06-FGD,1.3,42,6212,95.0,95.25
openb_pod_list_pods,06-FGD,1.3,43,6212,95.0,94.75
CSV
"$build/tessera" sim openb -n "$sample/nodes.csv" -p "$sample/pods.csv" --policy fgd,bestfit \
  --seeds 1-2 --no-placements -q -o "$work/openb" --expected "$work/expected" > /dev/null
"$build/tessera" sim scenario "$source/examples/scenarios/reclaim.json" -q -o "$work/scenario" \
  > /dev/null
# Philly: vc-b's job (as much GPU-time as vc-a's two, so half the quota) reclaims one of
# vc-a's gangs.
cat > "$work/philly.csv" <<'CSV'
timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:00:00,7200,8,57600,vc-a
2017-10-09 07:00:00,7200,8,57600,vc-a
2017-10-09 07:10:00,14400,8,115200,vc-b
CSV
"$build/tessera" sim philly --trace "$work/philly.csv" --cluster 2x8 --max-unsaved 100000 -q \
  -o "$work/philly" > /dev/null

browse() {
  # A throwaway profile: nothing read from or written to the user's.
  timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --user-data-dir="$work/profile" \
    "$@" 2> "$work/chromium.err" || {
    echo "FAIL: chromium $* exited with $?:"
    tail -20 "$work/chromium.err"
    exit 1
  }
}
for report in openb scenario; do
  [ -s "$work/$report/report.html" ] || { echo "FAIL: no $report/report.html"; exit 1; }
  browse --dump-dom "file://$work/$report/report.html" > "$work/$report.dom"
  browse --screenshot="$work/$report.png" --window-size=1280,2000 \
    "file://$work/$report/report.html" > /dev/null
done
[ -s "$work/philly/report.html" ] || { echo "FAIL: no philly/report.html"; exit 1; }
browse --dump-dom "file://$work/philly/report.html" > "$work/philly.dom"

python3 - "$work" <<'PY'
import html.parser, struct, sys, zlib

work = sys.argv[1]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


class Dom(html.parser.HTMLParser):
    """The charts as the browser holds them: <svg class="chart ..."> and their series."""

    def __init__(self):
        super().__init__()
        self.charts = 0
        self.series = []  # (name, points or bars)
        self.polylines = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg" and "chart" in a.get("class", "").split():
            self.charts += 1
        elif tag == "g" and a.get("class") == "series":
            points = a.get("data-points", a.get("data-bars", "0"))
            self.series.append((a.get("data-name"), int(points)))
        elif tag == "polyline" and a.get("points", "").count(",") >= 2:
            self.polylines += 1


def dom(name):
    d = Dom()
    d.feed(open(f"{work}/{name}.dom", encoding="utf-8").read())
    return d


def palette_pixels(path, enough, rgb=(0x4E, 0x79, 0xA7), tolerance=8):
    """Size and the number of pixels near the palette's first colour (the first series), counted
    from the top until there are `enough` (decoding in Python is slow)."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    pos, idat, width, height, ctype = 8, b"", 0, 0, 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
            if depth != 8 or ctype not in (2, 6):
                return None
        elif kind == b"IDAT":
            idat += body
    bpp = 3 if ctype == 2 else 4
    stride = width * bpp
    raw = zlib.decompress(idat)
    prev = bytearray(stride)
    count = 0
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        for x in range(0, stride, bpp):
            if all(abs(line[x + k] - rgb[k]) <= tolerance for k in range(3)):
                count += 1
        prev = line
        if count >= enough:
            break
    return width, height, count


openb = dom("openb")
series = dict()
for name, n in openb.series:
    series.setdefault(name, []).append(n)
check(openb.charts == 2, f"openb: 2 charts (full range and from 80 %), got {openb.charts}")
check(all(n > 0 for n in series.get("fgd", [0])) and len(series.get("fgd", [])) == 2,
      f"openb: fgd drawn in both charts with points: {series.get('fgd')}")
check(all(n > 0 for n in series.get("bestfit", [0])) and len(series.get("bestfit", [])) == 2,
      f"openb: bestfit drawn in both charts with points: {series.get('bestfit')}")
check(series.get("fgd (authors)") == [2, 2],
      f"openb: the authors' fgd curve, 2 points per chart: {series.get('fgd (authors)')}")
check(openb.polylines >= 6, f"openb: at least 6 lines drawn, got {openb.polylines}")

scenario = dom("scenario")
names = [name for name, _ in scenario.series]
check(scenario.charts == 4,
      f"scenario: 4 charts (2 queues, evictions, pending), got {scenario.charts}")
check(names.count("allocated") == 2 and names.count("fair share") == 2,
      f"scenario: allocation and fair share for each queue: {names}")
check(all(n > 0 for name, n in scenario.series if name in ("allocated", "fair share", "a", "b")),
      f"scenario: every queue series has points: {scenario.series}")
check(("reclaim", 1) in scenario.series,
      f"scenario: one bar of reclaim evictions: {scenario.series}")

philly = dom("philly")
check(philly.charts == 4, f"philly: 4 charts (2 queues, evictions, pending), got {philly.charts}")
check(("reclaim", 1) in philly.series, f"philly: one bar of reclaim evictions: {philly.series}")
check(all(dict(philly.series).get(q, 0) > 0 for q in ("vc-a", "vc-b")),
      f"philly: pending tasks of each queue drawn: {philly.series}")

for name in ("openb", "scenario"):
    got = palette_pixels(f"{work}/{name}.png", 400)
    check(got is not None and got[:2] == (1280, 2000), f"{name}.png: a 1280x2000 PNG, got {got}")
    # Legend swatches alone paint about 60 pixels each: hundreds more are the plotted series.
    check(got is not None and got[2] >= 400,
          f"{name}.png: the first series' colour painted in the plots ({got and got[2]} pixels)")

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
PY
echo "sim reports render in Chromium"
