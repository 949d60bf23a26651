"""Summary of plan12's GPT-2 steady-state runs: per kernel over plain, runs, the promise."""
import collections, json, sys
o = sys.argv[1]
def wall(n):
    try: return float(open(f"{o}/gpt2.{n}.wall").read())
    except Exception: return float("nan")
def out(n):
    try:
        r = json.load(open(f"{o}/gpt2.{n}.out.json")); return (r["loss_hex"], r["params_sha256"])
    except Exception as e: return f"no output ({e})"
plain = wall("plain")
print(f"plain: {plain:.1f} s, steps {json.load(open(f'{o}/gpt2.plain.out.json')).get('step_s') if out('plain') else '?'}")
for n in ("context", "window"):
    try: d = json.load(open(f"{o}/gpt2.{n}.json"))["dispatches"]
    except Exception as e: print(f"{n}: no report ({e})"); continue
    vals = [x for x in d if x.get("metrics")]
    runs = collections.Counter(x.get("run") for x in vals)
    kinds = collections.Counter(x.get("outcome") for x in d)
    why = collections.Counter((x.get("metrics_reason") or "")[:110] for x in d if x.get("outcome") == "replayed" and not x.get("metrics"))
    w = wall(n)
    per = (w - plain) / len(vals) if vals else float("nan")
    print(f"{n}: wall {w:.1f} s, {len(d)} records {dict(kinds)}, {len(vals)} with values, runs {dict(sorted(runs.items()))}, "
          f"{per:.4f} s per kernel over plain; same result as plain: {out(n) == out('plain')}")
    for r, k in why.most_common(3): print(f"   {k} replayed without values: {r}")
try:
    rows = [l for l in open(f"{o}/gpt2.ncu.csv", errors="replace") if l.startswith('"') and not l.startswith('"ID"')]
    n_ncu = len({l.split('","')[0] for l in rows})
    w = wall("ncu")
    per_ncu = (w - plain) / n_ncu if n_ncu else float("nan")
    print(f"ncu: wall {w:.1f} s, {n_ncu} kernels, {per_ncu:.4f} s per kernel over plain")
    for n in ("context", "window"):
        try:
            d = json.load(open(f"{o}/gpt2.{n}.json"))["dispatches"]
            vals = sum(1 for x in d if x.get("metrics"))
            print(f"ours ({n}) / ncu per kernel: {((wall(n) - plain) / vals) / per_ncu:.3f}")
        except Exception: pass
except Exception as e:
    print("ncu: no csv", e)
