import json, os, statistics, time, torch, torch.distributed as dist
rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", 0))
if rank == 0:
    got = [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_PROFILER", "NCCL_INSPECTOR"))]
    print("telemetry variables:", " ".join(got) or "none", flush=True)
late, seconds = int(os.environ.get("LATE_RANK", "-1")), float(os.environ.get("RUN_SECONDS", "40"))
a = torch.ones(16 << 20, device="cuda")
gi = torch.ones(4 << 20, device="cuda")
go = torch.empty(world * (4 << 20), device="cuda")
m = torch.randn(2048, 2048, device="cuda")
stop = torch.zeros(1, device="cuda")
for _ in range(3):
    dist.all_reduce(a); dist.all_gather_into_tensor(go, gi)
torch.cuda.synchronize(); dist.barrier()
start = shown = time.time(); steps = []; window = []
while True:
    t = time.perf_counter()
    for _ in range(4):
        m = torch.tanh(m @ m)
    if rank == late:
        time.sleep(0.05)
    dist.all_reduce(a); dist.all_gather_into_tensor(go, gi)
    torch.cuda.synchronize()
    steps.append(time.perf_counter() - t); window.append(steps[-1])
    now = time.time()
    if rank == 0 and now - shown >= 5:
        print(f"STEP t={now:.1f} steps={len(steps)} median_ms={1000 * statistics.median(window):.1f}", flush=True)
        shown, window = now, []
    if len(steps) % 5 == 0:
        stop.fill_(1.0 if now - start >= seconds else 0.0)
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        if stop.item() > 0:
            break
print("RESULT", json.dumps({"rank": rank, "tag": os.environ.get("TAG"), "steps": len(steps),
    "median_ms": 1000 * statistics.median(steps), "mean_ms": 1000 * statistics.mean(steps),
    "start": start, "end": time.time()}), flush=True)
dist.destroy_process_group()
