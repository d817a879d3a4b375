"""Drive scripts/memsoak/run_traced.py at a fixed rate like vigil soak; RSS every 15 s to <workdir>/rss.tsv.

Usage: MEMSOAK_EVERY_S=30 MEMSOAK_TRACE=0|1 MEMSOAK_SNAPS=120,450 MEMSOAK_GC_EVERY_S=0|10 \
    WT=<checkout> python drive.py <workdir> <seconds> <runs/s> scripts/memsoak/run_traced.py
(scratch tooling of the issue-8 memory investigation; see BENCHMARKS.md)"""
import os, random, subprocess, sys, threading, time, sqlite3
from pathlib import Path
import httpx
sys.path.insert(0, os.environ.get("WT", "/work/wt-b"))
from vigil.process import free_port
from vigil.bench.soak import rss_mib
from vigil.bench.synth import body, make_run
work = Path(sys.argv[1]); work.mkdir(parents=True, exist_ok=True)
seconds = float(sys.argv[2]); rate = float(sys.argv[3]); script = sys.argv[4]
ports = {n: free_port() for n in ("OTLP_HTTP","OTLP_GRPC","HTTP","METRICS")}
env = {k: v for k, v in os.environ.items() if not k.startswith(("VIGIL_","OTEL_"))}
env.update({f"VIGIL_{n}_PORT": str(p) for n, p in ports.items()})
env.update({"VIGIL_OTLP_HTTP_HOST":"127.0.0.1","VIGIL_HTTP_HOST":"127.0.0.1","VIGIL_DATABASE_URL":f"sqlite:///{work/'vigil.db'}",
            "VIGIL_QUIET_PERIOD_S":"1","VIGIL_LOG_LEVEL":"warning","MEMSOAK_OUT":str(work/"samples.jsonl"), "PYTHONPATH": os.environ.get("WT","/work/wt-b")})
env.update({k: v for k, v in os.environ.items() if k.startswith("MEMSOAK_")})
log = open(work/"vigil.log","wb")
p = subprocess.Popen([sys.executable, script], cwd=work, env=env, stdout=log, stderr=log)
for _ in range(150):
    try:
        if httpx.get(f"http://127.0.0.1:{ports['HTTP']}/readyz", timeout=1).status_code == 200: break
    except httpx.TransportError: pass
    time.sleep(0.2)
rng = random.Random(11); stop = threading.Event(); sent = [0, 0]
def send():
    per = max(1, int(rate/10)); interval = per/rate; nxt = time.monotonic()
    with httpx.Client(timeout=30) as c:
        while not stop.is_set():
            runs = [make_run(rng) for _ in range(per)]
            r = c.post(f"http://127.0.0.1:{ports['OTLP_HTTP']}/v1/traces", content=body([s for x in runs for s in x.spans]), headers={"Content-Type":"application/x-protobuf"})
            sent[0] += per; sent[1] += per if r.status_code == 200 else 0
            nxt += interval; stop.wait(max(0, nxt-time.monotonic()))
threading.Thread(target=send, daemon=True).start()
t0 = time.monotonic()
with open(work/"rss.tsv","w") as f:
    while time.monotonic()-t0 < seconds:
        time.sleep(15)
        f.write(f"{time.monotonic()-t0:.0f}\t{rss_mib(p.pid):.1f}\t{sent[0]}\t{sent[1]}\n"); f.flush()
    (work/"samples.jsonl.trim").touch()
    time.sleep(float(os.environ.get("MEMSOAK_EVERY_S","120"))+5)
    f.write(f"{time.monotonic()-t0:.0f}\t{rss_mib(p.pid):.1f}\t{sent[0]}\t{sent[1]}\tafter-trim\n")
stop.set(); time.sleep(3)
p.terminate(); p.wait(60)
print("done", sent)
