/* petagrad's CPU thread pool: runs a kernel's thread loop, outlined as fn(args, begin, end), over the cores.

   Why not OpenMP: with OMP_WAIT_POLICY=PASSIVE its idle threads sleep at once, and waking a sleeping thread
   (an idle vCPU halts in a VM) costs more than a small kernel takes; with ACTIVE they spin for a long time and
   steal the core from whatever else runs. Here a worker spins for a bounded time (PG_SPIN_NS, a few tens to
   hundreds of microseconds: the gap between back-to-back kernels of one step) after its last job, then sleeps
   on a futex. The caller works too, and chunks are claimed dynamically (each thread first from its own static
   share, then from the others'), so a worker that wakes late or is descheduled by another process delays a
   kernel by at most the chunk it holds.

   One job at a time: a second thread that launches while the pool is busy runs its loop inline on its own
   thread (no waiting, no oversubscription). A forked child starts with no workers (they are re-created on its
   first job). pg_pool_shutdown() stops and joins the workers (called at exit).

   Several pools: pool 0 serves the launching threads; the launch queue k of a CPU device (below: a process with
   several CPU devices) runs its kernels on pool k+1, with its share of the cores: THREADS (pg_queue_threads) over
   the queues running a job at that moment, so a device working alone has all of them. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#define PG_MAX_THREADS 256
#define PG_MAX_POOLS 64
#define PG_CHUNKS_PER_THREAD 4
/* after a sign that another process wants this core, no spinning for a while: 1 ms after an isolated sign (a VM's
   hiccup, a daemon waking: a worker that slept through each kernel for 20 ms after any of them had 60-70% of a decode
   step's jobs wait for a futex wake-up), doubling up to 20 ms while the signs keep coming (a busy neighbour) */
#define PG_BACKOFF_MIN_NS 1000000LL
#define PG_BACKOFF_MAX_NS 20000000LL
/* a spin loop that lost the core for this long was preempted (shorter gaps are interrupts and the VM's pauses: at 20 us,
   40-90 false signs in 5 s of decoding here) */
#define PG_GAP_NS 200000LL

typedef void (*pg_fn)(void *args, long long begin, long long end);

/* a thread's share of a job: packed so one CAS claims a chunk only while the job it belongs to is live.
   bits 63..40: job tag, 39..20: next chunk, 19..0: end chunk */
typedef struct { _Atomic uint64_t v; char pad[56]; } pg_share;

typedef struct {
  pthread_mutex_t lock;            /* held by the thread that runs a job */
  int nworkers;                    /* started workers */
  pthread_t tids[PG_MAX_THREADS];
  /* the job */
  pg_fn fn; void *args; long long n; int nchunks; int nthreads;
  _Atomic uint32_t gen __attribute__((aligned(64)));   /* job generation: workers wait on it (futex word) */
  _Atomic int sleepers;                                /* workers asleep (or about to be) on gen */
  _Atomic uint32_t done __attribute__((aligned(64)));  /* chunks finished in the current job (futex word) */
  _Atomic int caller_sleeping;
  _Atomic int stop;
  _Atomic long long prewake_until;                     /* workers woken by pg_pool_prewake spin until then */
  pg_share share[PG_MAX_THREADS];
} pg_pool;

static pg_pool POOLS[PG_MAX_POOLS];
static pid_t pool_pid;            /* the process the workers belong to (a forked child has none) */
static long spin_ns = 100000;
static int pin_workers = 1;   /* pg_pool_set_pin */
static __thread pg_pool *bound;   /* the pool of this thread's launch queue (NULL: pool 0) */
static inline pg_pool *mine(void) { return bound ? bound : &POOLS[0]; }
static pg_pool *pool_at(int k) { return &POOLS[(k < 0 ? 0 : k) % PG_MAX_POOLS]; }
/* a launch queue's share of the cores: the threads the queues may use in all, over the queues running a job now */
static int queue_threads = 1;
static _Atomic int active_queues;
static inline int queue_share(void) {
  int a = atomic_load_explicit(&active_queues, memory_order_relaxed), n = queue_threads / (a > 1 ? a : 1);
  return n > 1 ? n : 1;
}

/* launch queues (below) */
#define PG_MAX_QUEUES 64
#define PG_QUEUE_SLOTS 1024
enum { PG_JOB_KERNEL, PG_JOB_COPY, PG_JOB_AFTER };
typedef struct { int kind; void (*fn)(void **); void **args; void *dst; const void *src; size_t n; int other; long long count; } pg_job;
typedef struct {
  pg_job ring[PG_QUEUE_SLOTS];
  pthread_mutex_t lock;                                  /* held while a job is queued */
  pthread_t tid; int started;
  long long queued;                                      /* jobs queued so far (written by the queueing thread) */
  _Atomic uint32_t queued32 __attribute__((aligned(64)));   /* its low bits: the worker sleeps on it */
  _Atomic int worker_sleeping;
  _Atomic long long done __attribute__((aligned(64)));   /* jobs finished */
  _Atomic uint32_t done32;                               /* its low bits: waiters sleep on it */
  _Atomic int waiters;
} pg_queue;
static pg_queue QUEUES[PG_MAX_QUEUES];

static long futex(_Atomic uint32_t *addr, int op, uint32_t val) {
  return syscall(SYS_futex, (uint32_t *)addr, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
}
static inline long long now_ns(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}
static inline void back_off(long long t, long long *quiet_after, long long *backoff) {
  /* a sign less than PG_BACKOFF_MAX_NS after the last quiet time ended: the contention goes on */
  *backoff = t < *quiet_after + PG_BACKOFF_MAX_NS ? (*backoff * 2 < PG_BACKOFF_MAX_NS ? *backoff * 2 : PG_BACKOFF_MAX_NS) : PG_BACKOFF_MIN_NS;
  *quiet_after = t + *backoff;
}
static inline uint64_t pack(uint64_t tag, uint64_t next, uint64_t end) { return (tag << 40) | (next << 20) | end; }

/* claim one chunk of job `tag` from thread t's share; -1 when it has none left (or the job is over) */
static int claim(pg_pool *P, int t, uint64_t tag) {
  uint64_t v = atomic_load_explicit(&P->share[t].v, memory_order_acquire);
  for (;;) {
    uint64_t next = (v >> 20) & 0xFFFFF, end = v & 0xFFFFF;
    if ((v >> 40) != tag || next >= end) return -1;
    if (atomic_compare_exchange_weak_explicit(&P->share[t].v, &v, pack(tag, next + 1, end), memory_order_acq_rel, memory_order_acquire))
      return (int)next;
  }
}

/* run chunks of job `tag`: own share first, then the others'. The job's fields are read only after a claim
   succeeded: a claim succeeds only while the job is live, so they cannot change under it. */
static int work(pg_pool *P, int self, uint64_t tag, int nthreads) {
  int ran = 0;
  for (int k = 0; k < nthreads; k++) {
    int t = (self + k) % nthreads, c;
    while ((c = claim(P, t, tag)) >= 0) {
      long long n = P->n, nc = P->nchunks;
      P->fn(P->args, n * c / nc, n * (c + 1) / nc);
      uint32_t d = atomic_fetch_add(&P->done, 1) + 1;   /* seq_cst: pairs with caller_sleeping */
      if ((long long)d == nc && atomic_load(&P->caller_sleeping)) futex(&P->done, FUTEX_WAKE, 1);
      ran++;
    }
  }
  return ran;
}

/* a worker's argument: its pool's index and its own (1..) */
#define PG_WORKER_ARG(pool, self) ((void *)(intptr_t)((pool) * PG_MAX_THREADS + (self)))

static void *worker(void *arg) {
  pg_pool *P = &POOLS[(intptr_t)arg / PG_MAX_THREADS];
  int self = (int)((intptr_t)arg % PG_MAX_THREADS);
  sigset_t all; sigfillset(&all); pthread_sigmask(SIG_BLOCK, &all, NULL);   /* signals go to Python's threads */
  uint32_t seen = atomic_load(&P->gen);
  long last_preempted = 0;
  long long quiet_after = 0, backoff = PG_BACKOFF_MIN_NS;   /* no spinning before quiet_after (back_off) */
  for (;;) {
    /* spin a bounded time for the next job, then sleep on the futex. Spinning while another process wants this
       core is what made spinning OpenMP slow on a shared machine: the spin time counts against this thread, so the
       scheduler lets the other process run when a job comes, and the job waits for the chunk this thread holds. A
       thread that sleeps is woken with priority. So: no spinning for a while after this thread was preempted
       (involuntary context switches since the last job) or lost the core while spinning (a gap in the loop). */
    long long t0 = now_ns(), prev = t0;
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) == 0 && ru.ru_nivcsw != last_preempted) { last_preempted = ru.ru_nivcsw; back_off(t0, &quiet_after, &backoff); }
    long long until = t0 < quiet_after ? t0 : t0 + spin_ns;
    uint32_t g;
    for (;;) {
      int spins = 0;
      while ((g = atomic_load_explicit(&P->gen, memory_order_acquire)) == seen && !atomic_load_explicit(&P->stop, memory_order_relaxed)) {
        cpu_relax();
        if (++spins == 64) {
          spins = 0;
          long long t = now_ns();
          if (t - prev > PG_GAP_NS) { back_off(t, &quiet_after, &backoff); break; }
          if (t > until) break;
          prev = t;
        }
      }
      if (g != seen || atomic_load(&P->stop)) break;
      atomic_fetch_add(&P->sleepers, 1);
      if ((g = atomic_load(&P->gen)) == seen) futex(&P->gen, FUTEX_WAIT, seen);   /* returns at once if gen moved */
      atomic_fetch_sub(&P->sleepers, 1);
      g = atomic_load(&P->gen);
      if (g != seen || atomic_load(&P->stop)) break;
      /* woken without a job: a pre-wake (or a spurious wake-up): spin until the pre-wake's deadline, unless this
         thread backs off */
      prev = now_ns();
      until = prev < quiet_after ? prev : atomic_load(&P->prewake_until);
    }
    if (atomic_load(&P->stop)) return NULL;
    seen = g;
    /* nthreads is read without a claim: a stale value only makes this worker look at too few or too many
       shares, and every claim checks the tag */
    int nt = P->nthreads;
    if (self < nt) work(P, self, g & 0xFFFFFF, nt);
  }
}

static void after_fork_child(void) {
  /* only the forking thread exists in the child: forget the parent's workers and the pools' lock states */
  for (int k = 0; k < PG_MAX_POOLS; k++) {
    pg_pool *P = &POOLS[k];
    pthread_mutex_init(&P->lock, NULL);
    P->nworkers = 0;
    atomic_store(&P->sleepers, 0);
    atomic_store(&P->caller_sleeping, 0);
    atomic_store(&P->stop, 0);
  }
  atomic_store(&active_queues, 0);
  for (int k = 0; k < PG_MAX_QUEUES; k++) {
    pg_queue *Q = &QUEUES[k];
    pthread_mutex_init(&Q->lock, NULL);
    Q->started = 0; Q->queued = 0;
    atomic_store(&Q->queued32, 0); atomic_store(&Q->done, 0); atomic_store(&Q->done32, 0);
    atomic_store(&Q->worker_sleeping, 0); atomic_store(&Q->waiters, 0);
  }
  pool_pid = getpid();
}

/* Worker k of the launching threads' pool stays on the k-th core this process may use, when the pool spans them all
   (THREADS unset: pg_pool_set_pin): Linux wakes a sleeping thread on its waker's core when it judges the cache warm there, and a worker
   woken next to the launching thread took turns with it on one core while another idled, until the load balancer
   moved one of them (measured here: after a 0.1 s pause a BERT-style encoder's calls ran 2x slower, each with 5-17
   involuntary context switches, for up to a second; pinned, 2.7 ms every call). The launching thread is not pinned:
   it settles on the core no worker holds (core 0). A pool over fewer threads than cores (a THREADS the user set for
   several processes side by side) is left where the OS puts it, as are the queues' pools (they share the cores). */
static void pin_worker(pthread_t tid, int k) {
  cpu_set_t allowed, one;
  if (!pin_workers || sched_getaffinity(0, sizeof allowed, &allowed) != 0 || k >= CPU_COUNT(&allowed)) return;
  CPU_ZERO(&one);
  for (int c = 0, seen = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &allowed) && seen++ == k) { CPU_SET(c, &one); pthread_setaffinity_np(tid, sizeof one, &one); return; }
}

static void ensure_workers(pg_pool *P, int want) {
  if (pool_pid != getpid()) after_fork_child();   /* a fork that skipped the atfork handler (e.g. a raw clone) */
  if (want > PG_MAX_THREADS - 1) want = PG_MAX_THREADS - 1;
  while (P->nworkers < want) {
    pthread_attr_t a; pthread_attr_init(&a);
    int ok = pthread_create(&P->tids[P->nworkers + 1], &a, worker, PG_WORKER_ARG(P - POOLS, P->nworkers + 1)) == 0;
    pthread_attr_destroy(&a);
    if (!ok) break;
    P->nworkers++;
    if (P == &POOLS[0]) pin_worker(P->tids[P->nworkers], P->nworkers);
  }
}

/* run fn over [0, n) with up to nthreads threads (the caller is one of them) of the calling thread's pool; returns
   after every chunk ran */
void pg_parallel_for(pg_fn fn, void *args, long long n, int nthreads) {
  pg_pool *P = mine();
  if (P != &POOLS[0] && nthreads > queue_share()) nthreads = queue_share();
  if (nthreads > PG_MAX_THREADS) nthreads = PG_MAX_THREADS;
  if (n <= 1 || nthreads <= 1 || pthread_mutex_trylock(&P->lock) != 0) { if (n > 0) fn(args, 0, n); return; }
  ensure_workers(P, nthreads - 1);
  if (P->nworkers + 1 < nthreads) nthreads = P->nworkers + 1;
  if (nthreads <= 1) { pthread_mutex_unlock(&P->lock); fn(args, 0, n); return; }
  int nchunks = nthreads * PG_CHUNKS_PER_THREAD;
  if (nchunks > n) nchunks = (int)n;
  uint32_t g = atomic_load(&P->gen) + 1;
  uint64_t tag = g & 0xFFFFFF;
  P->fn = fn; P->args = args; P->n = n; P->nchunks = nchunks; P->nthreads = nthreads;
  atomic_store_explicit(&P->done, 0, memory_order_relaxed);
  for (int t = 0; t < nthreads; t++)
    atomic_store_explicit(&P->share[t].v, pack(tag, (uint64_t)nchunks * t / nthreads, (uint64_t)nchunks * (t + 1) / nthreads), memory_order_release);
  atomic_store(&P->gen, g);                                   /* publish (seq_cst: pairs with sleepers below) */
  if (atomic_load(&P->sleepers) > 0) futex(&P->gen, FUTEX_WAKE, P->nworkers);
  long long t0 = now_ns();
  int ran = work(P, 0, tag, nthreads);
  /* wait for the chunks other threads still hold. A running worker finishes its chunk within about one chunk's
     time (measured on this thread), so spin that long; longer means it was descheduled (another process wants its
     core): then sleep, which frees this core for it */
  long long t1 = now_ns(), wait_ns = ran > 0 ? 2 * (t1 - t0) / ran + 2000 : spin_ns;
  if (wait_ns > spin_ns) wait_ns = spin_ns;
  int spins = 0;
  uint32_t d;
  while ((d = atomic_load_explicit(&P->done, memory_order_acquire)) != (uint32_t)nchunks) {
    cpu_relax();
    if (++spins == 64) { spins = 0; if (now_ns() - t1 > wait_ns) break; }
  }
  while ((d = atomic_load(&P->done)) != (uint32_t)nchunks) {
    atomic_store(&P->caller_sleeping, 1);
    if ((d = atomic_load(&P->done)) != (uint32_t)nchunks) futex(&P->done, FUTEX_WAIT, d);
    atomic_store(&P->caller_sleeping, 0);
  }
  pthread_mutex_unlock(&P->lock);
}


/* a threaded kernel is about to be launched (the caller has some Python left to run first): wake the sleeping
   workers of the calling thread's pool now, so that they spin when the job comes instead of paying their wake-up
   then. They spin at most PG_PREWAKE_NS, and not at all while they back off (another process wants the cores). */
#define PG_PREWAKE_NS 1000000LL
void pg_pool_prewake(void) {
  pg_pool *P = mine();
  if (pool_pid != getpid() || P->nworkers == 0 || atomic_load(&P->sleepers) == 0) return;
  atomic_store(&P->prewake_until, now_ns() + PG_PREWAKE_NS);
  futex(&P->gen, FUTEX_WAKE, P->nworkers);
}

/* pool k's started workers plus the caller */
int pg_pool_threads(int k) { return pool_pid == getpid() ? pool_at(k)->nworkers + 1 : 1; }

void pg_pool_set_spin_ns(long ns) { spin_ns = ns < 0 ? 0 : ns; }
void pg_pool_set_pin(int on) { pin_workers = on; }

/* a JIT replay's kernels, back to back on the calling thread (each spreads its loops over the pool as usual): one
   call from Python instead of one per kernel */
void pg_run_list(int n, void (**fns)(void **), void ***args) { for (int i = 0; i < n; i++) fns[i](args[i]); }
int pg_pool_workers(void) { return pool_pid == getpid() ? mine()->nworkers : 0; }
int pg_pool_sleepers(void) { return pool_pid == getpid() ? atomic_load(&mine()->sleepers) : 0; }

/* ---------------------------------------------------------------- launch queues

   A CPU device of a process with several runs its launches on a thread of its own (queue k runs its kernels on
   pool k+1): jobs run in the order they were queued, with no Python (and so no interpreter lock) on that thread.
   A job is a kernel (called through its argv entry point: fn(args), args a copy of the buffer pointers), a copy
   of bytes, or a wait until another queue has finished a given number of jobs (runtime/ops_cpu.py queues a copy
   between two devices on the source's queue, and makes the destination's launches that use the copy wait for it).
   Every wait refers to a job queued earlier, so queues never wait on each other in a cycle. Each queue counts its
   finished jobs; a host thread waits for a count with pg_queue_wait (spin, then futex). Any thread may queue jobs
   (enqueue takes the queue's lock). */

/* wait until queue q has finished `count` jobs: spin a while (the common wait is for a short kernel), then sleep */
static void wait_done(pg_queue *Q, long long count) {
  long long t0 = now_ns();
  int spins = 0;
  while (atomic_load_explicit(&Q->done, memory_order_acquire) < count) {
    cpu_relax();
    if (++spins == 64) { spins = 0; if (now_ns() - t0 > spin_ns) break; }
  }
  while (atomic_load(&Q->done) < count) {
    atomic_fetch_add(&Q->waiters, 1);
    uint32_t d = atomic_load(&Q->done32);
    if (atomic_load(&Q->done) < count) futex(&Q->done32, FUTEX_WAIT, d);
    atomic_fetch_sub(&Q->waiters, 1);
  }
}

/* wait for job number `next` of queue Q: spin a while after the last one (launches come back to back), then sleep */
static void wait_queued(pg_queue *Q, long long next) {
  long long t0 = now_ns();
  int spins = 0;
  while (atomic_load_explicit(&Q->queued32, memory_order_acquire) == (uint32_t)next) {
    cpu_relax();
    if (++spins == 64) {
      spins = 0;
      if (now_ns() - t0 > spin_ns) {
        atomic_store(&Q->worker_sleeping, 1);
        if (atomic_load(&Q->queued32) == (uint32_t)next) futex(&Q->queued32, FUTEX_WAIT, (uint32_t)next);
        atomic_store(&Q->worker_sleeping, 0);
        t0 = now_ns();
      }
    }
  }
}

static void *queue_worker(void *arg) {
  int k = (int)(intptr_t)arg;
  pg_queue *Q = &QUEUES[k];
  sigset_t all; sigfillset(&all); pthread_sigmask(SIG_BLOCK, &all, NULL);
  char name[16];
  snprintf(name, sizeof name, "pg-queue-%d", k);   /* what top -H and a debugger show */
  pthread_setname_np(pthread_self(), name);
  bound = pool_at(k + 1);
  for (long long next = 0;; next++) {
    /* while this queue waits for a job, or for another queue, the others' kernels may use its share of the cores */
    if (atomic_load_explicit(&Q->queued32, memory_order_acquire) == (uint32_t)next) wait_queued(Q, next);
    atomic_fetch_add(&active_queues, 1);
    pg_job *j = &Q->ring[next % PG_QUEUE_SLOTS];
    if (j->kind == PG_JOB_KERNEL) { j->fn(j->args); free(j->args); }
    else if (j->kind == PG_JOB_COPY) memcpy(j->dst, j->src, j->n);
    atomic_fetch_sub(&active_queues, 1);
    if (j->kind == PG_JOB_AFTER) wait_done(&QUEUES[j->other], j->count);
    atomic_store(&Q->done, next + 1);
    atomic_store(&Q->done32, (uint32_t)(next + 1));
    if (atomic_load(&Q->waiters) > 0) futex(&Q->done32, FUTEX_WAKE, INT32_MAX);
  }
  return NULL;
}

/* queue a job on queue k (starting its thread on first use); returns the job's number (1, 2, ...): the queue has run
   it once pg_queue_done(k) reaches that number. -1: the thread could not be started. */
static long long enqueue(int k, pg_job job) {
  pg_queue *Q = &QUEUES[k % PG_MAX_QUEUES];
  if (pool_pid != getpid()) after_fork_child();
  pthread_mutex_lock(&Q->lock);
  if (!Q->started) {
    if (pthread_create(&Q->tid, NULL, queue_worker, (void *)(intptr_t)(k % PG_MAX_QUEUES)) != 0) { pthread_mutex_unlock(&Q->lock); return -1; }
    pthread_detach(Q->tid);
    Q->started = 1;
  }
  if (Q->queued - atomic_load(&Q->done) >= PG_QUEUE_SLOTS) wait_done(Q, Q->queued - PG_QUEUE_SLOTS + 1);   /* full */
  Q->ring[Q->queued % PG_QUEUE_SLOTS] = job;
  long long n = ++Q->queued;
  atomic_store(&Q->queued32, (uint32_t)n);   /* publish (seq_cst: pairs with worker_sleeping) */
  if (atomic_load(&Q->worker_sleeping)) futex(&Q->queued32, FUTEX_WAKE, 1);
  pthread_mutex_unlock(&Q->lock);
  return n;
}
long long pg_queue_kernel(int k, void (*fn)(void **), void **args, int nargs) {
  void **copy = malloc(sizeof(void *) * (nargs > 0 ? nargs : 1));
  if (!copy) return -1;
  memcpy(copy, args, sizeof(void *) * nargs);
  pg_job j = {.kind = PG_JOB_KERNEL, .fn = fn, .args = copy};
  long long n = enqueue(k, j);
  if (n < 0) free(copy);
  return n;
}
long long pg_queue_copy(int k, void *dst, const void *src, size_t n) {
  pg_job j = {.kind = PG_JOB_COPY, .dst = dst, .src = src, .n = n};
  return enqueue(k, j);
}
/* queue k waits (in order) until queue `other` has finished `count` jobs */
long long pg_queue_after(int k, int other, long long count) {
  pg_job j = {.kind = PG_JOB_AFTER, .other = other % PG_MAX_QUEUES, .count = count};
  return enqueue(k, j);
}
/* the threads the queues' kernels may use in all (THREADS); and a queue's share now (for tests and debugging) */
void pg_queue_threads(int n) { queue_threads = n > 0 ? n : 1; }
int pg_queue_share(void) { return queue_share(); }
long long pg_queue_queued(int k) { return QUEUES[k % PG_MAX_QUEUES].queued; }
long long pg_queue_done(int k) { return atomic_load(&QUEUES[k % PG_MAX_QUEUES].done); }
/* the calling thread waits until queue k has finished `count` jobs */
void pg_queue_wait(int k, long long count) { wait_done(&QUEUES[k % PG_MAX_QUEUES], count); }

/* stop and join every pool's workers */
void pg_pool_shutdown(void) {
  if (pool_pid != getpid()) return;
  for (int k = 0; k < PG_MAX_POOLS; k++) {
    pg_pool *P = &POOLS[k];
    if (P->nworkers == 0) continue;
    pthread_mutex_lock(&P->lock);
    atomic_store(&P->stop, 1);
    futex(&P->gen, FUTEX_WAKE, PG_MAX_THREADS);
    for (int i = 1; i <= P->nworkers; i++) pthread_join(P->tids[i], NULL);
    P->nworkers = 0;
    atomic_store(&P->stop, 0);
    pthread_mutex_unlock(&P->lock);
  }
}

__attribute__((constructor)) static void pg_pool_init(void) {
  for (int k = 0; k < PG_MAX_POOLS; k++) pthread_mutex_init(&POOLS[k].lock, NULL);
  for (int k = 0; k < PG_MAX_QUEUES; k++) pthread_mutex_init(&QUEUES[k].lock, NULL);
  pool_pid = getpid();
  pthread_atfork(NULL, NULL, after_fork_child);
}
