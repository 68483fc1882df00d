/* autoconfig's native thread pool: runs a kernel's parts on all cores without
 * touching Python between the call and its return.
 *
 * Why native: Python threads hand work over through futexes and the GIL; on a VM
 * whose idle vCPUs halt, each hand-off costs tens of microseconds, more than a
 * sub-millisecond kernel. Here workers spin for a while after each job (as
 * OpenBLAS's and OpenMP's do), so back-to-back calls reach them in well under a
 * microsecond; after SPIN_NS without work they sleep on a condition variable.
 *
 * One job = `parts` calls of a task trampoline (kernels/abi.py, `c_tasks`):
 *   task(buffers + i * nbuf, sizes + i * nsize)   for i in [0, parts)
 * Part 0 runs on the calling thread, part i on worker i. A program (`ac_program`) is
 * a sequence of jobs; `ac_program_call` is the entry from Python (a layer's
 * program plus the call's numpy arrays), `ac_program_run` the one of a built model. The caller takes back any
 * part whose worker has not started it by the time the caller is free, so a
 * sleeping worker never makes a call slower than running it all serially.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*ac_task)(void *const *buffers, const int64_t *sizes);

enum { MAX_WORKERS = 255 };
/* How long a worker spins for its next job before sleeping: longer than the gap
 * between consecutive kernels of a model or benchmark loop, short enough that an
 * idle process stops burning cores at once. */
static const int64_t SPIN_NS = 20 * 1000 * 1000;

enum { IDLE, READY, TAKEN, DONE };

typedef struct {
  _Atomic int state;
  _Atomic int sleeping;
  ac_task task;
  void *const *buffers;
  const int64_t *sizes;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  pthread_t thread;
} slot_t;

static slot_t slots[MAX_WORKERS + 1]; /* slot i serves part i; slot 0 is unused */
static int started;                   /* workers running: slots 1..started */
static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Claim a READY part (worker or caller: whoever comes first runs it). */
static int claim(slot_t *s) {
  int expected = READY;
  return atomic_compare_exchange_strong(&s->state, &expected, TAKEN);
}

static void run_claimed(slot_t *s) {
  s->task(s->buffers, s->sizes);
  atomic_store_explicit(&s->state, DONE, memory_order_release);
}

static void *worker_main(void *arg) {
  slot_t *s = arg;
  for (;;) {
    int64_t deadline = now_ns() + SPIN_NS;
    int polls = 0;
    while (atomic_load_explicit(&s->state, memory_order_acquire) != READY) {
      cpu_relax();
      if (++polls % 1024 == 0 && now_ns() > deadline) {
        pthread_mutex_lock(&s->lock);
        atomic_store(&s->sleeping, 1); /* seq_cst: pairs with the caller's READY store */
        while (atomic_load(&s->state) != READY) pthread_cond_wait(&s->wake, &s->lock);
        atomic_store(&s->sleeping, 0);
        pthread_mutex_unlock(&s->lock);
        break;
      }
    }
    if (claim(s)) run_claimed(s);
  }
  return NULL;
}

/* Start workers up to `count`; returns how many are running. */
static int ensure_workers(int count) {
  while (started < count) {
    slot_t *s = &slots[started + 1];
    atomic_store(&s->state, IDLE);
    atomic_store(&s->sleeping, 0);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    if (pthread_create(&s->thread, NULL, worker_main, s) != 0) break;
    pthread_detach(s->thread);
    started++;
  }
  return started;
}

static void run_serially(ac_task task, int64_t parts, void *const *buffers, int64_t nbuf,
                         const int64_t *sizes, int64_t nsize) {
  for (int64_t i = 0; i < parts; i++) task(buffers + i * nbuf, sizes + i * nsize);
}

/* A forked child has none of the parent's workers: start again from none. */
static void forget_workers_in_child(void) {
  started = 0;
  pthread_mutex_init(&run_lock, NULL);
}

/* Give a worker its part, waking it if it sleeps. */
static void hand_over(slot_t *s, ac_task task, void *const *buffers, const int64_t *sizes) {
  s->task = task;
  s->buffers = buffers;
  s->sizes = sizes;
  atomic_store(&s->state, READY); /* seq_cst: pairs with the worker's sleeping store */
  if (atomic_load(&s->sleeping)) {
    pthread_mutex_lock(&s->lock);
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
  }
}

/* Run task over `parts` parts in parallel and return when all are done.
 * Concurrent callers (another Python thread) run their parts serially rather than
 * wait. Returns how many parts ran on workers (the rest ran on the caller). */
int ac_pool_run(ac_task task, int64_t parts, void *const *buffers, int64_t nbuf,
                const int64_t *sizes, int64_t nsize) {
  if (parts <= 1 || pthread_mutex_trylock(&run_lock) != 0) {
    run_serially(task, parts, buffers, nbuf, sizes, nsize);
    return 0;
  }
  int workers = ensure_workers(parts - 1 < MAX_WORKERS ? (int)(parts - 1) : MAX_WORKERS);
  int64_t handed = parts - 1 < workers ? parts - 1 : workers;
  for (int64_t i = 1; i <= handed; i++) {
    slot_t *s = &slots[i];
    hand_over(s, task, buffers + i * nbuf, sizes + i * nsize);
  }
  task(buffers, sizes);
  for (int64_t i = handed + 1; i < parts; i++) task(buffers + i * nbuf, sizes + i * nsize);
  int by_workers = 0;
  for (int64_t i = 1; i <= handed; i++) {
    slot_t *s = &slots[i];
    if (claim(s))
      run_claimed(s);
    else
      by_workers++;
    while (atomic_load_explicit(&s->state, memory_order_acquire) != DONE) cpu_relax();
    atomic_store_explicit(&s->state, IDLE, memory_order_relaxed);
  }
  pthread_mutex_unlock(&run_lock);
  return by_workers;
}

/* Whether the caller's core and the workers' pass a cache line to each other quickly, as
 * cores sharing a last-level cache do: a built model then runs the program that reuses
 * memory at once, else the one that reuses it only after the other cores' caches have
 * cooled (a line another core still holds is slow to write). A line is bounced between
 * the caller and the first and last workers, at most every REMEASURE_NS; meanwhile, or
 * while another call holds the pool, the last verdict stands. AUTOCONFIG_CORES=near or
 * apart in the environment decides instead. */
static const int64_t NEAR_NS = 100;    /* one-way: tens of ns within one L3, well over 100 across dies */
static const int64_t REMEASURE_NS = 100 * 1000 * 1000; /* where a VM's vCPUs run changes over minutes */
static const int64_t TAKE_NS = 2 * 1000 * 1000;        /* a sleeping worker's wake-up, at most */
enum { BOUNCES = 32 }; /* round trips timed at once: a clock read is noise beside them, all a few µs */
static _Atomic int64_t ball;

static void bounce(void *const *buffers, const int64_t *sizes) {
  (void)buffers;
  (void)sizes;
  for (int64_t i = 1; i < 2 * BOUNCES; i += 2) {
    while (atomic_load_explicit(&ball, memory_order_acquire) != i) cpu_relax();
    atomic_store_explicit(&ball, i + 1, memory_order_release);
  }
}

/* A line's one-way trip between the caller and worker `s`, or -1 if it did not start. */
static int64_t one_way_ns(slot_t *s) {
  atomic_store(&ball, 0);
  hand_over(s, bounce, NULL, NULL);
  int64_t deadline = now_ns() + TAKE_NS;
  while (atomic_load(&s->state) == READY && now_ns() < deadline) cpu_relax();
  if (claim(s)) { /* taken back unstarted */
    atomic_store(&s->state, IDLE);
    return -1;
  }
  int64_t start = now_ns();
  for (int64_t i = 1; i < 2 * BOUNCES; i += 2) {
    atomic_store_explicit(&ball, i, memory_order_release);
    while (atomic_load_explicit(&ball, memory_order_acquire) != i + 1) cpu_relax();
  }
  int64_t ns = (now_ns() - start) / (2 * BOUNCES);
  while (atomic_load_explicit(&s->state, memory_order_acquire) != DONE) cpu_relax();
  atomic_store_explicit(&s->state, IDLE, memory_order_relaxed);
  return ns;
}

int ac_pool_cores_near(void) {
  static _Atomic int verdict = 1;
  static _Atomic int64_t next_ns;
  const char *told = getenv("AUTOCONFIG_CORES"); /* near or apart: the user's word instead */
  if (told && (!strcmp(told, "near") || !strcmp(told, "apart"))) return !strcmp(told, "near");
  int64_t now = now_ns();
  if (now < atomic_load(&next_ns) || pthread_mutex_trylock(&run_lock) != 0) return atomic_load(&verdict);
  int workers = ensure_workers(1), near = 1, measured = 0;
  int ends[2] = {1, workers}; /* the first worker and the last (the same when one) */
  for (int e = 0; e < (workers > 1 ? 2 : workers); e++) {
    int64_t ns = one_way_ns(&slots[ends[e]]); /* -1: not measured */
    measured += ns >= 0;
    near = near && ns < NEAR_NS;
  }
  if (measured) {
    atomic_store(&verdict, near);
    atomic_store(&next_ns, now + REMEASURE_NS);
  }
  pthread_mutex_unlock(&run_lock);
  return atomic_load(&verdict);
}

/* A program: kernel calls in order, each on `parts` parts, every buffer addressed as
 * (space, byte offset). One description serves a layer called from Python (the spaces
 * are its numpy arrays and fixed buffers) and a whole model in a built library (the
 * spaces are its arena, weights, inputs and outputs).
 *
 * Step encoding (int64): kernel, parts, nbuf, nsize, then sizes[parts][nsize], then
 * refs[parts][nbuf][2] = (space, byte offset). */
typedef struct {
  const int64_t *code;
  int64_t steps;
  const ac_task *tasks; /* by kernel index */
  char **bases;         /* by space */
  void **pointers;      /* room for the widest step's parts x nbuf resolved buffers */
  int64_t data_offset;  /* where a numpy array object keeps its data pointer */
} ac_program;

/* Run the step at `at`, add the parts workers ran to `*by_workers`, and return where
 * the next step starts. */
static const int64_t *run_step(const ac_program *p, const int64_t *at, int64_t *by_workers) {
  int64_t kernel = at[0], parts = at[1], nbuf = at[2], nsize = at[3];
  const int64_t *sizes = at + 4;
  const int64_t *refs = sizes + parts * nsize;
  for (int64_t i = 0; i < parts * nbuf; i++)
    p->pointers[i] = p->bases[refs[2 * i]] + refs[2 * i + 1];
  *by_workers += ac_pool_run(p->tasks[kernel], parts, p->pointers, nbuf, sizes, nsize);
  return refs + 2 * parts * nbuf;
}

/* Run every step; with `step_ns`, store each step's wall time in nanoseconds.
 * Returns how many parts ran on workers. */
int64_t ac_program_run(const ac_program *p, double *step_ns) {
  const int64_t *at = p->code;
  int64_t by_workers = 0;
  for (int64_t s = 0; s < p->steps; s++) {
    int64_t start = step_ns ? now_ns() : 0;
    at = run_step(p, at, &by_workers);
    if (step_ns) step_ns[s] = (double)(now_ns() - start);
  }
  return by_workers;
}

enum { MAX_CALL_ARRAYS = 6 };

/* From Python: spaces 0..count-1 are the numpy arrays a0.. (the rest None), the
 * others fixed in `bases` already; run the program, return the parts run by workers. */
int64_t ac_program_call(ac_program *p, int64_t count, const void *a0, const void *a1, const void *a2,
                     const void *a3, const void *a4, const void *a5) {
  const void *arrays[MAX_CALL_ARRAYS] = {a0, a1, a2, a3, a4, a5};
  for (int64_t i = 0; i < count; i++) p->bases[i] = *(char *const *)((const char *)arrays[i] + p->data_offset);
  return ac_program_run(p, NULL);
}

__attribute__((constructor)) static void register_fork_handler(void) {
  pthread_atfork(NULL, NULL, forget_workers_in_child);
}
