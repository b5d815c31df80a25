/* A STAND-IN for NCCL's Inspector in the connection profiler's tests: a profiler plugin that
 * asks for collectives and kernel channels (the Inspector's mask), hands out handles of its
 * own, and counts what it is given, so that the test can check the profiler passes on only
 * what this plugin asked for, with parent handles translated to this plugin's own. */
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

enum { COLL = 1 << 1, KERNEL_CH = 1 << 6 };

struct descr {
  uint64_t type;
  void *parent;
  int rank;
  unsigned char rest[88];
};

static int ctx_tag;
static uint64_t coll_tag = COLL, kernel_tag = KERNEL_CH;
/* The handle this plugin gives a collective, for the test to compare with what NCCL got. */
void *stub_coll_handle = &coll_tag;
int stub_inits, stub_colls, stub_kernels, stub_kernel_parent_ok, stub_others, stub_stops,
    stub_states, stub_finalized;

static int init(void **ctx, uint64_t comm, int *mask, const char *name, int nnodes,
                int nranks, int rank, void *log) {
  (void)comm; (void)name; (void)nnodes; (void)nranks; (void)rank; (void)log;
  *ctx = &ctx_tag;
  *mask = COLL | KERNEL_CH;
  stub_inits++;
  return 0;
}

static int start(void *ctx, void **handle, struct descr *d) {
  *handle = NULL;
  if (ctx != &ctx_tag) return 0;
  if (d->type == COLL) {
    stub_colls++;
    *handle = &coll_tag;
  } else if (d->type == KERNEL_CH) {
    stub_kernels++;
    if (d->parent == &coll_tag) stub_kernel_parent_ok++;
    *handle = &kernel_tag;
  } else {
    stub_others++;
  }
  return 0;
}

static int stop(void *handle) {
  if (handle == &coll_tag || handle == &kernel_tag) stub_stops++;
  return 0;
}

static int state(void *handle, int s, void *args) {
  (void)s; (void)args;
  if (handle == &kernel_tag) stub_states++;
  return 0;
}

static int finalize(void *ctx) {
  if (ctx == &ctx_tag) stub_finalized++;
  return 0;
}

struct table {
  const char *name;
  void *init, *start, *stop, *state, *finalize;
} ncclProfiler_v5 = {"chained-stub", (void *)init, (void *)start, (void *)stop, (void *)state,
                     (void *)finalize};
