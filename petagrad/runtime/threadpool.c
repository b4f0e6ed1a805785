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
   first job). pg_pool_shutdown() stops and joins the workers (called at exit). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#define PG_MAX_THREADS 256
#define PG_CHUNKS_PER_THREAD 4
#define PG_BACKOFF_NS 20000000LL   /* after a sign that another process wants this core: no spinning for 20 ms */
#define PG_GAP_NS 20000LL          /* a spin loop that lost the core for this long was preempted */

typedef void (*pg_fn)(void *args, long long begin, long long end);

/* a thread's share of a job: packed so one CAS claims a chunk only while the job it belongs to is live.
   bits 63..40: job tag, 39..20: next chunk, 19..0: end chunk */
typedef struct { _Atomic uint64_t v; char pad[56]; } pg_share;

static struct {
  pthread_mutex_t lock;            /* held by the thread that runs a job */
  int nworkers;                    /* started workers */
  pthread_t tids[PG_MAX_THREADS];
  pid_t pid;                       /* the process the workers belong to (a forked child has none) */
  long spin_ns;
  /* the job */
  pg_fn fn; void *args; long long n; int nchunks; int nthreads;
  _Atomic uint32_t gen __attribute__((aligned(64)));   /* job generation: workers wait on it (futex word) */
  _Atomic int sleepers;                                /* workers asleep (or about to be) on gen */
  _Atomic uint32_t done __attribute__((aligned(64)));  /* chunks finished in the current job (futex word) */
  _Atomic int caller_sleeping;
  _Atomic int stop;
  _Atomic long long prewake_until;                     /* workers woken by pg_pool_prewake spin until then */
  pg_share share[PG_MAX_THREADS];
} P = {.lock = PTHREAD_MUTEX_INITIALIZER, .spin_ns = 100000};

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
static inline uint64_t pack(uint64_t tag, uint64_t next, uint64_t end) { return (tag << 40) | (next << 20) | end; }

/* claim one chunk of job `tag` from thread t's share; -1 when it has none left (or the job is over) */
static int claim(int t, uint64_t tag) {
  uint64_t v = atomic_load_explicit(&P.share[t].v, memory_order_acquire);
  for (;;) {
    uint64_t next = (v >> 20) & 0xFFFFF, end = v & 0xFFFFF;
    if ((v >> 40) != tag || next >= end) return -1;
    if (atomic_compare_exchange_weak_explicit(&P.share[t].v, &v, pack(tag, next + 1, end), memory_order_acq_rel, memory_order_acquire))
      return (int)next;
  }
}

/* run chunks of job `tag`: own share first, then the others'. The job's fields are read only after a claim
   succeeded: a claim succeeds only while the job is live, so they cannot change under it. */
static int work(int self, uint64_t tag, int nthreads) {
  int ran = 0;
  for (int k = 0; k < nthreads; k++) {
    int t = (self + k) % nthreads, c;
    while ((c = claim(t, tag)) >= 0) {
      long long n = P.n, nc = P.nchunks;
      P.fn(P.args, n * c / nc, n * (c + 1) / nc);
      uint32_t d = atomic_fetch_add(&P.done, 1) + 1;   /* seq_cst: pairs with caller_sleeping */
      if ((long long)d == nc && atomic_load(&P.caller_sleeping)) futex(&P.done, FUTEX_WAKE, 1);
      ran++;
    }
  }
  return ran;
}

static void *worker(void *arg) {
  int self = (int)(intptr_t)arg;
  sigset_t all; sigfillset(&all); pthread_sigmask(SIG_BLOCK, &all, NULL);   /* signals go to Python's threads */
  uint32_t seen = atomic_load(&P.gen);
  long last_preempted = 0;
  long long quiet_after = 0;   /* no spinning before this time */
  for (;;) {
    /* spin a bounded time for the next job, then sleep on the futex. Spinning while another process wants this
       core is what made spinning OpenMP slow on a shared machine: the spin time counts against this thread, so the
       scheduler lets the other process run when a job comes, and the job waits for the chunk this thread holds. A
       thread that sleeps is woken with priority. So: no spinning for a while after this thread was preempted
       (involuntary context switches since the last job) or lost the core while spinning (a gap in the loop). */
    long long t0 = now_ns(), prev = t0;
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) == 0 && ru.ru_nivcsw != last_preempted) { last_preempted = ru.ru_nivcsw; quiet_after = t0 + PG_BACKOFF_NS; }
    long long until = t0 < quiet_after ? t0 : t0 + P.spin_ns;
    uint32_t g;
    for (;;) {
      int spins = 0;
      while ((g = atomic_load_explicit(&P.gen, memory_order_acquire)) == seen && !atomic_load_explicit(&P.stop, memory_order_relaxed)) {
        cpu_relax();
        if (++spins == 64) {
          spins = 0;
          long long t = now_ns();
          if (t - prev > PG_GAP_NS) { quiet_after = t + PG_BACKOFF_NS; break; }
          if (t > until) break;
          prev = t;
        }
      }
      if (g != seen || atomic_load(&P.stop)) break;
      atomic_fetch_add(&P.sleepers, 1);
      if ((g = atomic_load(&P.gen)) == seen) futex(&P.gen, FUTEX_WAIT, seen);   /* returns at once if gen moved */
      atomic_fetch_sub(&P.sleepers, 1);
      g = atomic_load(&P.gen);
      if (g != seen || atomic_load(&P.stop)) break;
      /* woken without a job: a pre-wake (or a spurious wake-up): spin until the pre-wake's deadline, unless this
         thread backs off */
      prev = now_ns();
      until = prev < quiet_after ? prev : atomic_load(&P.prewake_until);
    }
    if (atomic_load(&P.stop)) return NULL;
    seen = g;
    /* nthreads is read without a claim: a stale value only makes this worker look at too few or too many
       shares, and every claim checks the tag */
    int nt = P.nthreads;
    if (self < nt) work(self, g & 0xFFFFFF, nt);
  }
}

static void after_fork_child(void) {
  /* only the forking thread exists in the child: forget the parent's workers and its lock state */
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  P.lock = fresh;
  P.nworkers = 0;
  atomic_store(&P.sleepers, 0);
  atomic_store(&P.caller_sleeping, 0);
  atomic_store(&P.stop, 0);
  P.pid = getpid();
}

static void ensure_workers(int want) {
  if (P.pid != getpid()) after_fork_child();   /* a fork that skipped the atfork handler (e.g. a raw clone) */
  if (want > PG_MAX_THREADS - 1) want = PG_MAX_THREADS - 1;
  while (P.nworkers < want) {
    pthread_attr_t a; pthread_attr_init(&a);
    int ok = pthread_create(&P.tids[P.nworkers + 1], &a, worker, (void *)(intptr_t)(P.nworkers + 1)) == 0;
    pthread_attr_destroy(&a);
    if (!ok) break;
    P.nworkers++;
  }
}

/* run fn over [0, n) with up to nthreads threads (the caller is one of them); returns after every chunk ran */
void pg_parallel_for(pg_fn fn, void *args, long long n, int nthreads) {
  if (nthreads > PG_MAX_THREADS) nthreads = PG_MAX_THREADS;
  if (n <= 1 || nthreads <= 1 || pthread_mutex_trylock(&P.lock) != 0) { if (n > 0) fn(args, 0, n); return; }
  ensure_workers(nthreads - 1);
  if (P.nworkers + 1 < nthreads) nthreads = P.nworkers + 1;
  if (nthreads <= 1) { pthread_mutex_unlock(&P.lock); fn(args, 0, n); return; }
  int nchunks = nthreads * PG_CHUNKS_PER_THREAD;
  if (nchunks > n) nchunks = (int)n;
  uint32_t g = atomic_load(&P.gen) + 1;
  uint64_t tag = g & 0xFFFFFF;
  P.fn = fn; P.args = args; P.n = n; P.nchunks = nchunks; P.nthreads = nthreads;
  atomic_store_explicit(&P.done, 0, memory_order_relaxed);
  for (int t = 0; t < nthreads; t++)
    atomic_store_explicit(&P.share[t].v, pack(tag, (uint64_t)nchunks * t / nthreads, (uint64_t)nchunks * (t + 1) / nthreads), memory_order_release);
  atomic_store(&P.gen, g);                                   /* publish (seq_cst: pairs with sleepers below) */
  if (atomic_load(&P.sleepers) > 0) futex(&P.gen, FUTEX_WAKE, P.nworkers);
  long long t0 = now_ns();
  int ran = work(0, tag, nthreads);
  /* wait for the chunks other threads still hold. A running worker finishes its chunk within about one chunk's
     time (measured on this thread), so spin that long; longer means it was descheduled (another process wants its
     core): then sleep, which frees this core for it */
  long long t1 = now_ns(), wait_ns = ran > 0 ? 2 * (t1 - t0) / ran + 2000 : P.spin_ns;
  if (wait_ns > P.spin_ns) wait_ns = P.spin_ns;
  int spins = 0;
  uint32_t d;
  while ((d = atomic_load_explicit(&P.done, memory_order_acquire)) != (uint32_t)nchunks) {
    cpu_relax();
    if (++spins == 64) { spins = 0; if (now_ns() - t1 > wait_ns) break; }
  }
  while ((d = atomic_load(&P.done)) != (uint32_t)nchunks) {
    atomic_store(&P.caller_sleeping, 1);
    if ((d = atomic_load(&P.done)) != (uint32_t)nchunks) futex(&P.done, FUTEX_WAIT, d);
    atomic_store(&P.caller_sleeping, 0);
  }
  pthread_mutex_unlock(&P.lock);
}

/* a threaded kernel is about to be launched (the caller has some Python left to run first): wake the sleeping
   workers now, so that they spin when the job comes instead of paying their wake-up then. They spin at most
   PG_PREWAKE_NS, and not at all while they back off (another process wants the cores). */
#define PG_PREWAKE_NS 1000000LL
void pg_pool_prewake(void) {
  if (P.pid != getpid() || P.nworkers == 0 || atomic_load(&P.sleepers) == 0) return;
  atomic_store(&P.prewake_until, now_ns() + PG_PREWAKE_NS);
  futex(&P.gen, FUTEX_WAKE, P.nworkers);
}

void pg_pool_set_spin_ns(long ns) { P.spin_ns = ns < 0 ? 0 : ns; }
int pg_pool_workers(void) { return P.pid == getpid() ? P.nworkers : 0; }
int pg_pool_sleepers(void) { return P.pid == getpid() ? atomic_load(&P.sleepers) : 0; }

void pg_pool_shutdown(void) {
  if (P.pid != getpid()) return;
  pthread_mutex_lock(&P.lock);
  atomic_store(&P.stop, 1);
  futex(&P.gen, FUTEX_WAKE, PG_MAX_THREADS);
  for (int i = 1; i <= P.nworkers; i++) pthread_join(P.tids[i], NULL);
  P.nworkers = 0;
  atomic_store(&P.stop, 0);
  pthread_mutex_unlock(&P.lock);
}

__attribute__((constructor)) static void pg_pool_init(void) {
  P.pid = getpid();
  pthread_atfork(NULL, NULL, after_fork_child);
}
