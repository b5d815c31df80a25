import os, time, torch, torch.distributed as dist
rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
ras, own = os.environ.get("NCCL_RAS_ADDR"), os.environ.get("GPUDIRECT_RAS_ADDR")
print(f"rank {rank} NCCL_RAS_ADDR={ras} GPUDIRECT_RAS_ADDR={own}", flush=True)
dist.init_process_group("nccl", rank=rank, world_size=world)
torch.cuda.set_device(0)
x = torch.ones(1 << 20, device="cuda")
stall = int(os.environ.get("STALL_RANK", "-1"))
for i in range(int(os.environ.get("STOP_AFTER", "1000000"))):
    if rank == stall and i == 8:
        print(f"rank {rank} stalls after {i} all_reduces", flush=True)
        time.sleep(3600)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    if i == 8:
        print(f"rank {rank} did {i} all_reduces", flush=True)
    time.sleep(0.05)
dist.destroy_process_group()
