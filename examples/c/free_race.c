/* free_race: a stress test of the handle rules in rdmaxfer.h (Ownership, Threading), not an
 * example of good use. The main thread makes a handle, publishes it, waits until a caller has
 * started a call on it, frees it at once and waits for another call, while caller threads keep
 * calling functions through the published pointer, which goes stale at the free (mid-call or between calls) and may then
 * reach the next handle made in the same memory. Every call must return RDMAXFER_OK,
 * RDMAXFER_ERR_BUSY (two callers at once) or RDMAXFER_ERR_INVALID_STATE (freed); nothing may
 * crash, and under valgrind memcheck nothing may touch freed memory. Then, single-threaded: a
 * call on a freed handle and a second free say so.
 *
 *   free_race [-n CONFIG_ITERS] [-d DEVICE_LIST_ITERS] [-t CALLER_THREADS] [-m MIN_OVERLAPS]
 * (device lists need an RDMA device; -d 0, the default, skips them). -m: go on making and
 * freeing configs (up to 10 times CONFIG_ITERS) until at least MIN_OVERLAPS rounds of calls
 * saw a free happen while they ran, and fail when they did not (default 0: on one CPU, or
 * under valgrind, which runs one thread at a time, the threads rarely overlap). Prints two
 * summary lines, the last ending in "ok", and exits 0, or says what went wrong and exits 1. */
#include "common.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

static _Atomic(struct rdmaxfer_config *) shared_cfg;
static _Atomic(struct rdmaxfer_device_list *) shared_list;
static atomic_int done;
/* Rounds of calls started and finished through the published pointers (the main thread
 * waits for these to move), and frees done by the main thread. */
static atomic_ulong started, calls, frees;
/* Rounds of calls during which a free happened: the race this test is about. */
static atomic_ulong overlapped;
static atomic_ulong n_ok, n_busy, n_freed, n_other;
static atomic_int other_status = -1;

static void count(enum rdmaxfer_status st)
{
    switch (st) {
    case RDMAXFER_OK: atomic_fetch_add(&n_ok, 1); break;
    case RDMAXFER_ERR_BUSY: atomic_fetch_add(&n_busy, 1); break;
    case RDMAXFER_ERR_INVALID_STATE: atomic_fetch_add(&n_freed, 1); break;
    default:
        atomic_fetch_add(&n_other, 1);
        atomic_store(&other_status, (int)st);
        fprintf(stderr, "free_race: unexpected status %d: %s\n", (int)st,
                rdmaxfer_last_error_message());
    }
}

static void *caller(void *arg)
{
    unsigned long i = (unsigned long)(size_t)arg;
    while (!atomic_load(&done)) {
        unsigned long frees_before = atomic_load(&frees);
        atomic_fetch_add(&started, 1);
        struct rdmaxfer_config *cfg = atomic_load(&shared_cfg);
        /* A burst of calls per round, so that the free often lands in the middle of one. */
        for (int k = 0; cfg && k < 8; k++) {
            count(rdmaxfer_config_set_port(cfg, (uint16_t)(1000 + (i + k) % 1000)));
            count(rdmaxfer_config_set_token(cfg, ((i + k) & 1) ? "token" : NULL));
        }
        struct rdmaxfer_device_list *list = atomic_load(&shared_list);
        if (list) {
            struct rdmaxfer_device_info info = {.struct_size = sizeof info};
            (void)rdmaxfer_device_list_len(list);
            /* The strings in `info` are not read: they live only until the list is freed. */
            count(rdmaxfer_device_list_get(list, 0, &info));
        }
        if (atomic_load(&frees) != frees_before)
            atomic_fetch_add(&overlapped, 1);
        atomic_fetch_add(&calls, 1);
        i++;
        sched_yield();
    }
    return NULL;
}

/* Waits (yielding) until `counter` moves past `before`; gives up after a while, so a starved
 * caller slows the test down instead of hanging it. */
static void wait_for(atomic_ulong *counter, unsigned long before)
{
    for (int spins = 0; spins < 100000 && atomic_load(counter) == before; spins++)
        sched_yield();
}

static int fail(const char *what)
{
    fprintf(stderr, "free_race: %s (last error: \"%s\")\n", what, rdmaxfer_last_error_message());
    return 1;
}

int main(int argc, char **argv)
{
    unsigned long cfg_iters = 20000, list_iters = 0, threads = 2, min_overlaps = 0;
    int c;
    while ((c = getopt(argc, argv, "n:d:t:m:")) != -1) {
        switch (c) {
        case 'n': cfg_iters = strtoul(optarg, NULL, 10); break;
        case 'd': list_iters = strtoul(optarg, NULL, 10); break;
        case 't': threads = strtoul(optarg, NULL, 10); break;
        case 'm': min_overlaps = strtoul(optarg, NULL, 10); break;
        default:
            fprintf(stderr,
                    "usage: %s [-n CONFIG_ITERS] [-d DEVICE_LIST_ITERS] [-t THREADS] "
                    "[-m MIN_OVERLAPS]\n",
                    argv[0]);
            return 2;
        }
    }
    if (threads < 1 || threads > 64)
        return fail("-t must be 1..64");

    pthread_t tid[64];
    for (unsigned long t = 0; t < threads; t++)
        if (pthread_create(&tid[t], NULL, caller, (void *)(size_t)(t * 7919)) != 0)
            return fail("pthread_create");

    unsigned long iters = cfg_iters > list_iters ? cfg_iters : list_iters;
    unsigned long i = 0, made = 0;
    for (; i < iters || (atomic_load(&overlapped) < min_overlaps && i < 10 * cfg_iters); i++) {
        struct rdmaxfer_config *cfg = NULL;
        struct rdmaxfer_device_list *list = NULL;
        if (i < cfg_iters || i >= iters) {
            made++;
            CHECK(rdmaxfer_config_new(&cfg));
            atomic_store(&shared_cfg, cfg);
        }
        if (i < list_iters) {
            CHECK(rdmaxfer_devices(&list));
            atomic_store(&shared_list, list);
        }
        wait_for(&started, atomic_load(&started));
        /* The published pointers stay: the callers go on with them, freed (and, from the next
         * iteration on, with the new handles that may reuse their memory). */
        rdmaxfer_config_free(cfg);
        rdmaxfer_device_list_free(list);
        atomic_fetch_add(&frees, 1);
        wait_for(&calls, atomic_load(&calls));
    }
    atomic_store(&done, 1);
    for (unsigned long t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);

    printf("free_race: %lu config and %lu device list handles freed under %lu callers; calls: "
           "%lu ok, %lu busy, %lu freed, %lu other; %lu rounds of calls overlapped a free\n",
           made, list_iters, threads, atomic_load(&n_ok), atomic_load(&n_busy),
           atomic_load(&n_freed), atomic_load(&n_other), atomic_load(&overlapped));
    if (atomic_load(&n_other) != 0) {
        fprintf(stderr, "free_race: a call returned status %d\n", atomic_load(&other_status));
        return 1;
    }
    if (atomic_load(&overlapped) < min_overlaps)
        return fail("fewer rounds of calls overlapped a free than -m asks");

    /* Single-threaded now: nothing else makes a config, so the freed slot is not reused. */
    struct rdmaxfer_config *cfg = NULL;
    CHECK(rdmaxfer_config_new(&cfg));
    CHECK(rdmaxfer_config_set_port(cfg, 7));
    rdmaxfer_config_free(cfg);
    if (rdmaxfer_config_set_port(cfg, 8) != RDMAXFER_ERR_INVALID_STATE)
        return fail("a call on a freed config did not return RDMAXFER_ERR_INVALID_STATE");
    if (!strstr(rdmaxfer_last_error_message(), "was freed"))
        return fail("a call on a freed config: no \"was freed\" in the last error");
    rdmaxfer_config_free(cfg);
    if (!strstr(rdmaxfer_last_error_message(), "already freed"))
        return fail("a second free: no \"already freed\" in the last error");
    rdmaxfer_config_free(NULL);
    struct rdmaxfer_config *again = NULL;
    CHECK(rdmaxfer_config_new(&again));
    CHECK(rdmaxfer_config_set_port(again, 9));
    rdmaxfer_config_free(again);
    printf("free_race: a freed handle and a second free are refused; ok\n");
    return 0;
}
