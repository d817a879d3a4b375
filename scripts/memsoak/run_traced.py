"""vigil run with a memory sampler thread (scratch, for the issue-8 memory creep)."""
import ctypes, gc, json, os, sys, threading, time, tracemalloc
OUT = os.environ["MEMSOAK_OUT"]
EVERY = float(os.environ.get("MEMSOAK_EVERY_S", "30"))
SNAPS = [float(x) for x in os.environ.get("MEMSOAK_SNAPS", "").split(",") if x]
TRACE = int(os.environ.get("MEMSOAK_TRACE", "0"))
libc = ctypes.CDLL("libc.so.6")
sqlite = ctypes.CDLL("libsqlite3.so.0")
sqlite.sqlite3_memory_used.restype = ctypes.c_int64
sqlite.sqlite3_memory_highwater.restype = ctypes.c_int64
class MI2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena","ordblks","smblks","hblks","hblkhd","usmblks","fsmblks","uordblks","fordblks","keepcost")]
libc.mallinfo2.restype = MI2

def smaps():
    d = {}
    for line in open("/proc/self/smaps_rollup"):
        p = line.split()
        if len(p) >= 3 and p[-1] == "kB":
            d[p[0].rstrip(":")] = round(int(p[1]) / 1024, 1)
    return d

def stats(t):
    m = libc.mallinfo2()
    return {"t": round(t), "rss": smaps()["Rss"], "anon": smaps().get("Anonymous"),
            "traced_mib": round(tracemalloc.get_traced_memory()[0] / 2**20, 1) if TRACE else None,
            "malloc_inuse_mib": round(m.uordblks / 2**20, 1), "malloc_free_mib": round(m.fordblks / 2**20, 1),
            "malloc_arena_mib": round(m.arena / 2**20, 1), "mmap_mib": round(m.hblkhd / 2**20, 1),
            "sqlite_mib": round(sqlite.sqlite3_memory_used() / 2**20, 2), "gc_objects": len(gc.get_objects()),
            "gc_count": gc.get_count(), "gc_collections": [g["collections"] for g in gc.get_stats()],
            "gc_collected": [g["collected"] for g in gc.get_stats()], "gc_gen2_objects": len(gc.get_objects(2))}

def sampler():
    start = time.monotonic()
    snaps = list(SNAPS)
    while True:
        time.sleep(EVERY)
        t = time.monotonic() - start
        rec = stats(t)
        if TRACE and snaps and t >= snaps[0]:
            snaps.pop(0)
            tb = tracemalloc.get_traced_memory()[0]
            rb = smaps()["Rss"]
            freed = gc.collect()
            rec["pre_snapshot_collect"] = {"freed": freed, "traced_before": round(tb / 2**20, 1),
                "traced_after": round(tracemalloc.get_traced_memory()[0] / 2**20, 1), "rss_before": rb, "rss_after": smaps()["Rss"]}
            snap = tracemalloc.take_snapshot()
            snap.dump(f"{OUT}.snap{round(t)}")
            del snap
            gc.collect()
            rec["snapshot"] = True
        if os.path.exists(OUT + ".trim"):
            t0 = tracemalloc.get_traced_memory()[0] if TRACE else 0
            r0 = smaps()["Rss"]
            freed = gc.collect()
            rec["gc_collect"] = {"freed_objects": freed, "rss_before": r0, "rss_after": smaps()["Rss"],
                                 "traced_before_mib": round(t0 / 2**20, 1),
                                 "traced_after_mib": round(tracemalloc.get_traced_memory()[0] / 2**20, 1) if TRACE else None}
            before = smaps()["Rss"]
            libc.malloc_trim(0)
            rec["trim"] = {"before": before, "after": smaps()["Rss"]}
            os.remove(OUT + ".trim")
        with open(OUT, "a") as f:
            f.write(json.dumps(rec) + "\n")

GC_EVERY = float(os.environ.get("MEMSOAK_GC_EVERY_S", "0"))
def young_gc():
    while True:
        time.sleep(GC_EVERY)
        gc.collect(1)
if GC_EVERY:
    threading.Thread(target=young_gc, daemon=True).start()
if TRACE:
    tracemalloc.start(TRACE)
threading.Thread(target=sampler, daemon=True).start()
from vigil.cli import main
sys.exit(main(["run"]))
