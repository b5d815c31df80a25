//! The forms of NCCL's log lines the reader takes, one rule per form, each with the NCCL
//! (or PyTorch) version it comes from. Read from NCCL's source history (`src/debug.cc`,
//! `src/include/debug.h`, `src/init.cc`, `src/transport/{net,coll_net,p2p,shm}.cc`, tags
//! v1.3.4 to v2.30) and from public logs for the releases whose source was never published
//! (2.0 to 2.2). The code that applies each rule names it (`rule L1` ...).
//!
//! # Lines
//!
//! - **L1, the prefix (2.3 to 2.30).** An INFO line is `host:pid:tid [dev] NCCL INFO msg`;
//!   a WARN line is `host:pid:tid [dev] file:line NCCL WARN msg`, preceded by an empty line
//!   up to 2.25; a TRACE line is `host:pid:tid [dev] time func:line NCCL TRACE msg`; 2.20
//!   adds `host:pid:tid NCCL CALL msg` (no device). `host` is the node's name up to its
//!   first `.`; from 2.29 a `%` or `/` in it is written `-`.
//! - **L2, NCCL's own timestamp (2.26+).** `NCCL_DEBUG_TIMESTAMP_LEVELS` (default: WARN
//!   only) puts `NCCL_DEBUG_TIMESTAMP_FORMAT` (default `[%F %T] `) before `host:pid:tid`.
//!   So a 2.26+ WARN line starts `[2026-09-09 11:29:56] host:pid:tid [0] file:line NCCL WARN`.
//! - **L3, anything before the prefix.** Launchers and collectors add their own text in
//!   front: torchrun's `[rankN]:`, `srun -l`'s `N: `, Open MPI's `[1,N]<stdout>:` (with
//!   `--timestamp-output`, a date glued before it), pdsh's `host: `, Ray's
//!   `(Actor pid=N, ip=A) ` (nested: one per layer), log collectors' timestamps and `|`
//!   columns, terminal colour codes (`ESC[..m`). None of them is NCCL's: an NCCL line is
//!   one whose ` NCCL INFO|WARN|TRACE|CALL` token follows a `host:pid:tid` token, after
//!   colour codes are removed.
//! - **L4, no `host:pid:tid` at all.** A paste or grep that stripped it leaves `[dev] NCCL
//!   INFO msg` (or nothing before `NCCL INFO`): still an NCCL line, of an unknown host;
//!   such lines of one input are one process.
//! - **L5, NCCL 2.0 to 2.2 (binary releases).** Lines carry no `NCCL` token and no pid:
//!   `host [dev] file:line WARN msg` and `[dev] INFO msg` (seen in public logs, e.g.
//!   `[3] include/socket.h:371 WARN ...`, `[1] INFO init.cu:413 -> 2`). NCCL 1.x printed
//!   `WARN file:line msg` and `INFO msg` with nothing before them; those are not read.
//! - **L6, the version line.** Up to 2.21, NCCL printed `NCCL version X.Y.Z+cudaA.B` with
//!   `printf` to stdout, with no prefix of its own (and, only when the debug output went to a
//!   file, also as an INFO line); 2.22+ prints it as an INFO line (or at VERSION level,
//!   without `host:pid:tid`). A launcher tag may precede the bare form
//!   (`[1,0]<stdout>:NCCL version 2.5.6+cuda10.2`): it is the version wherever it stands.
//! - **L8, records glued on one line.** A terminal paste can lose its newlines and keep
//!   each record padded to the terminal's width: `... via NET/IBext/2/GDRDMA` then many
//!   spaces, then `host:pid:tid [dev] NCCL INFO Channel ...` on the same physical line
//!   (deepseek-ai/DeepEP#106). A `host:pid:tid [dev] NCCL INFO|WARN|TRACE` that follows two
//!   or more spaces inside a line starts a record of its own: the line is read as one record
//!   per such start. (One space before it is not enough: a message may quote a prefix.)
//! - **L7, a host that is not a name.** Posters redact host names (`<cluster_name>`,
//!   `xxxx`, `***`, `REDACTED`): such a host says nothing about which node a line came
//!   from. Lines with one are kept apart by pid and device only, and a node count comes
//!   from NCCL's `nNodes` (2.20+: `comm 0x.. rank R nRanks N nNodes M localRanks L`).
//!
//! # Communicators
//!
//! - **C1, init (up to 2.28).** 2.19 to 2.22: `comm 0xP rank R nranks N cudaDev C nvmlDev G
//!   busId B commId 0xI - Init START`; 2.23 to 2.28 put the function's name first
//!   (`ncclCommInitRank comm 0xP ...`). The COMPLETE line carries the commId from 2.16;
//!   before that `comm 0xP rank R nranks N cudaDev C [nvmlDev G | busId B] - Init
//!   COMPLETE` names no communicator, and 2.3 to 2.12 also print `rank R nranks N` alone.
//! - **C2, init (2.29+).** The START line gains `[Rank R] ` before the function name:
//!   `[Rank 1] ncclCommInitRank comm 0xP rank 1 nranks 4 ... commId 0xI - Init START`.
//!   Splits and shrinks (`ncclCommSplit`, `ncclCommShrink`) print `parent 0xP childCount K
//!   color C key K` and no commId.
//! - **C3, the summary (2.20+).** `comm 0xP rank R nRanks N nNodes M localRanks L localRank
//!   K MNNVL X`: the pointer ties it to the init line of the same process.
//! - **C4, channel counts.** `N coll channels, N p2p channels, N p2p channels per peer`
//!   (2.12 to 2.17, `graph/paths.cc`); 2.18 and 2.19 add `N nvls channels`; 2.20 adds `N
//!   collnet channels` (the CollNet channels set up), but 2.21+ print the coll count in its
//!   place (`comm->nChannels` twice, `init.cc`), so from 2.21 it says nothing of CollNet.
//!   `nvls channels` above 0: NVLS (NVSwitch multicast) is set up for the communicator (0
//!   when NVLS is unsupported or has no graph). The line comes before the rank's Init
//!   COMPLETE: in an excerpt that starts after Init START, the COMPLETE line that follows
//!   names the communicator it belongs to.
//! - **C5, connections before COMPLETE.** A rank sets up its rings' and trees' connections
//!   inside its init (`initTransportsRank`), so their channel lines come before its `Init
//!   COMPLETE`; up to 2.18 nothing marks the init's start. A process's channel lines before
//!   the COMPLETE of its first communicator (no START seen), all from that communicator's
//!   rank, are that rank's; lines before an `Init START` belong to an earlier one.
//!
//! # Links
//!
//! - **K1, channels to a peer.** `Ring NN : a[dev] -> b[dev] [send|receive] via PATH` (up to
//!   2.6; 2.4 prints bare ranks), `Channel NN : ...` (2.7 to 2.11), `Channel NN/C : ...`
//!   (2.12+); the bracket after a rank is its busId up to 2.18, its nvmlDev from 2.19. Network paths: `NET/<net>/<dev>[(proxyRank)][/GDRDMA][(PCI)][/Shared]`, written
//!   by the side that owns the connection: `[send]` lines by the sender, `[receive]` by the
//!   receiver. GPUDirect RDMA is decided per connection, so the two directions of one link
//!   may differ (`NCCL_NET_GDR_READ` governs the send side; unset, `graph/paths.cc` turns
//!   it off for a GPU with no NVLink peer in a node of several GPUs, and from 2.19 only when
//!   that GPU is also older than Ampere). Inside a node: `P2P/...`,
//!   `SHM/...` (2.5 calls it `direct shared memory`), `NVLS`. A NET path between two ranks
//!   of one node is a network link inside the node (P2P and SHM disabled or unavailable).
//! - **K2, CollNet.** `Coll NN : R [send|receive] via COLLNET/<name>/<dev>[/GDRDMA]`
//!   (2.6, 2.7), `CollNet NN : R ...` (2.8 to 2.12), `CollNet NN/C : R ...` (2.13+, with
//!   `(PCI)` after GDRDMA from 2.19): rank R's own connection to the collective network
//!   (SHARP is the usual `<name>`); no peer rank.
//! - **K3, NICs.** `NET/<net> : Using [0]name:addr<0> [1]...` (2.4+; IB adds `:port/IB`,
//!   `/RoCE`, `/SHARP`, a merged device is `[0]={[0] a, [1] b}`); 2.3 prints one line per
//!   device, `NET/IB: [0] mlx5_1:1/IB`. The socket transport's list is every interface
//!   that `NCCL_SOCKET_IFNAME` admits: a `veth*`, `docker*`, `virbr*` or link-local
//!   (`fe80::`) address in it may carry traffic between nodes.
//! - **K4, the plugin.** `Using network <name>` (2.4+) names the net plugin a process
//!   loaded; alone (a grep) it says what each process meant to use, not what a channel used.
//! - **K5, the bootstrap's interface.** `Bootstrap : Using [0]a:addr<0> [1]b:addr<0> ...`
//!   (2.4 to 2.7, `bootstrap.cc`) lists every interface the search found, at most 16, and
//!   the bootstrap listens and connects on entry `[0]` only (`state->dev = 0`, unless
//!   `NCCL_COMM_ID` makes it match that address's subnet); 2.8+ keep one interface,
//!   `Bootstrap : Using a:addr<0>` (2.27: `Bootstrap: Using`). Its sockets carry NCCL's
//!   own setup between ranks, never a collective's data: a `veth*`, `virbr*` or
//!   link-local entry in that list is not a data path and is not said.
//! - **K6, CollNet set up or given up.** The SHARP plugin (nccl-rdma-sharp-plugins,
//!   `sharp_plugin.c`) prints `Sharp rank R/N initialized on mlx5_4:1` (2020), `SHARP rank
//!   ...` (2022+) when a process joins its SHARP group, and WARNs `SHARP coll init error`
//!   or `SHARP group create: ...` when it cannot. NCCL then WARNs `Cannot initialize
//!   CollNet, using point-to-point network instead` (`transport.cc`, 2.11 to 2.30, each
//!   node's local rank 0) and goes on: `init.cc` ignores the CollNet setup's result
//!   (`if (comm->collNetSupport > 0) collNetTrySetup(...)` up to 2.21, `ncclCollNetSetup`
//!   after). The `transport.cc:N -> M` and `init.cc:N -> M` returns printed before that
//!   warning are the setup failing, not the job.
//!
//! # PyTorch (ProcessGroupNCCL)
//!
//! - **T1.** The watchdog writes `[Rank R] Watchdog caught collective operation timeout:
//!   WorkNCCL(SeqNum=S, OpType=O, ...) ran for T milliseconds before timing out.` (1.x to
//!   2.x; 2.3+ adds `[PG ID i PG GUID g Rank R]` and `Exception (either an error or
//!   timeout) detected by watchdog at work: S`), then `Some NCCL operations have failed or
//!   timed out` and `NCCL watchdog thread terminated with exception`. A log holding only
//!   these lines is a job with trouble, even without one NCCL line.
