# For each run in a history: the rows `gpudirect show N --json` holds against the rows read
# straight from `gpudirect show N --raw` (nccl-tests' own table lines, by a regex of its own).
import json, re, subprocess, sys
G, db = sys.argv[1], sys.argv[2]
ids = [int(l.split()[0]) for l in subprocess.run([G, "--db", db, "history", "--limit", "0"], capture_output=True, text=True).stdout.splitlines()[1:] if l[:1].strip().isdigit() or l.strip()[:1].isdigit()]
row = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\S+)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s*$")
bad = 0
for i in sorted(ids):
    d = json.loads(subprocess.run([G, "--db", db, "show", str(i), "--json"], capture_output=True, text=True).stdout)
    raw = subprocess.run([G, "--db", db, "show", str(i), "--raw"], capture_output=True, text=True).stdout
    want = []
    for line in raw.splitlines():
        m = row.match(line)
        if m:
            s = int(m[1])
            want.append((s, "out", float(m[6]), float(m[7]), float(m[8])))
            want.append((s, "in", float(m[10]), float(m[11]), float(m[12])))
    got = [(r["size_bytes"], r["placement"], r["time_us"], r["algbw"], r["busbw"]) for r in d["rows"]]
    same = sorted(got) == sorted(want)
    bad += not same
    print(f"run {i:3} {d['variant'] or '-':28} {d['status']:7} rows {len(got):3} raw rows {len(want):3} {'equal' if same else 'DIFFER'}")
print("all equal" if bad == 0 else f"{bad} differ")
