import os, time, json, torch, torch.distributed as dist
rank = int(os.environ["RANK"]); world = int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", 0))
steps = int(os.environ.get("STEPS", "100")); late = int(os.environ.get("LATE_RANK", "-1"))
a = torch.ones(16 << 20, device="cuda"); gi = torch.ones(4 << 20, device="cuda")
go = torch.empty(world * (4 << 20), device="cuda"); m = torch.randn(2048, 2048, device="cuda")
for _ in range(3):
    dist.all_reduce(a); dist.all_gather_into_tensor(go, gi)
torch.cuda.synchronize(); dist.barrier()
ts = []
t0 = time.time()
for s in range(steps):
    t = time.perf_counter()
    for _ in range(4): m = torch.tanh(m @ m)
    if rank == late: time.sleep(0.05)
    dist.all_reduce(a); dist.all_gather_into_tensor(go, gi)
    torch.cuda.synchronize()
    ts.append(time.perf_counter() - t)
ts.sort()
print("RESULT", json.dumps({"rank": rank, "tag": os.environ.get("TAG"), "steps": steps, "median_ms": 1000*ts[len(ts)//2], "mean_ms": 1000*sum(ts)/len(ts), "t0": t0, "t1": time.time()}), flush=True)
dist.destroy_process_group()
