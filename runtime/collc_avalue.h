/* collc_avalue.h: the values of .coll programs in C, for the any-p runtime (collc_anyp.h).
 *
 * `cv` is a value of the language: a 64-bit int with the language's checks
 * (overflow is an error; // and % floor towards minus infinity, mod is never
 * negative), a bool, a set of non-negative ints (a sorted list of disjoint,
 * non-adjacent runs), a range, or a tuple.  `struct collc_av` is the evaluation
 * of one instance: its globals, the arena the values live in (freed with the
 * instance), the memos of the functions, and the calling rank's step counter
 * and ops.  Every error ends the evaluation through collc_av_fail, which writes
 * "file:line:col: message" and longjmps to the instance's caller.
 */
#ifndef COLLC_AVALUE_H
#define COLLC_AVALUE_H

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collc_exec.h"

#define COLLC_AV_MAX_RANKS (1 << 17)
#define COLLC_AV_MAX_CHUNKS (1 << 26)
#define COLLC_AV_MAX_SLOTS ((int64_t)1 << 28)
#define COLLC_AV_MAX_ELEMENT (1 << 26)
#define COLLC_AV_MAX_ITERATION ((int64_t)1 << 26)
#define COLLC_AV_MAX_DEPTH 400
#define COLLC_AV_MAX_STEPS (1 << 20)

/* A place in the .coll sources: file index, line, column. */
#define AT(f, l, c) (((int64_t)(f) << 40) | ((int64_t)(l) << 16) | (int64_t)(c))

enum cv_kind { CV_UNSET, CV_INT, CV_BOOL, CV_SET, CV_RANGE, CV_TUPLE };

/* Elements lo .. hi-1 of a set. */
struct cv_run {
    int32_t lo, hi;
};

/* A value.  int, bool: a.  set: ptr = runs (sorted, disjoint, not adjacent), a = runs, b = elements.
 * range: a = lo, b = hi, c = step.  tuple: ptr = items, a = length. */
typedef struct cv {
    int kind;
    int64_t a, b, c;
    const void *ptr;
} cv;

static const cv CV_NONE = {CV_UNSET, 0, 0, 0, NULL};

static inline cv cv_int(int64_t v) { cv x = {CV_INT, v, 0, 0, NULL}; return x; }
static inline cv cv_bool(int v) { cv x = {CV_BOOL, v != 0, 0, 0, NULL}; return x; }
static inline cv cv_range3(int64_t lo, int64_t hi, int64_t step) { cv x = {CV_RANGE, lo, hi, step, NULL}; return x; }

/* One op of the rank: a send or a receive (copy or reduce) of some chunk runs in a step. */
struct collc_av_op {
    int step, kind, peer; /* kind: 0 send, 1 receive and copy, 2 receive and reduce */
    int64_t first, n;     /* its runs in the context's op runs */
};

struct collc_av_block {
    struct collc_av_block *next;
    size_t used, size;
    char data[];
};

struct collc_av_entry {
    uint64_t hash;
    const cv *args;
    cv value;
};

struct collc_av_memo {
    struct collc_av_entry *slots;
    size_t cap, n;
};

/* The evaluation of one instance (one p), for one rank after another. */
struct collc_av {
    jmp_buf fail;
    char error[400];
    const char *const *files;
    int p, rank, nchunks, root;
    cv *glob;
    const char *const *glob_names;
    int nglob;
    struct collc_av_block *blocks;
    struct collc_av_memo *memos;
    int nmemos;
    int depth;
    int64_t iterations_left;
    int counter;
    int64_t in_step; /* where the open step starts; -1: none */
    int64_t lane;    /* the open lane (`lane J:`); -1: none */
    collc_u64 *prefix; /* [nchunks + 1]: prefix sums of the chunk weights (malloc'ed); NULL: no weights */
    struct collc_av_op *ops;
    int64_t nops, capops;
    struct cv_run *opruns;
    int64_t nopruns, capopruns;
};

/* ---------------------------------------------------------------------------
 * Errors and memory
 * ------------------------------------------------------------------------- */

static inline void collc_av_fail(struct collc_av *X, int64_t at, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
static inline void collc_av_fail(struct collc_av *X, int64_t at, const char *fmt, ...)
{
    va_list ap;
    int n = 0;
    if (at >= 0)
        n = snprintf(X->error, sizeof X->error, "%s:%d:%d: ", X->files[at >> 40], (int)((at >> 16) & 0xffffff),
                     (int)(at & 0xffff));
    if (n < 0 || (size_t)n >= sizeof X->error) n = 0;
    va_start(ap, fmt);
    vsnprintf(X->error + n, sizeof X->error - (size_t)n, fmt, ap);
    va_end(ap);
    longjmp(X->fail, 1);
}

static inline void *collc_av_alloc(struct collc_av *X, size_t bytes)
{
    struct collc_av_block *b = X->blocks;
    bytes = (bytes + 15) & ~(size_t)15;
    if (b == NULL || b->size - b->used < bytes) {
        size_t size = bytes > ((size_t)1 << 20) ? bytes : ((size_t)1 << 20);
        b = (struct collc_av_block *)malloc(sizeof *b + size);
        if (b == NULL) collc_av_fail(X, -1, "out of memory");
        b->next = X->blocks, b->used = 0, b->size = size;
        X->blocks = b;
    }
    b->used += bytes;
    return b->data + b->used - bytes;
}

static inline void *collc_av_grow(struct collc_av *X, void *p, int64_t *cap, int64_t need, size_t elem)
{
    if (need <= *cap) return p;
    int64_t c = *cap > 0 ? *cap : 64;
    while (c < need) c *= 2;
    p = realloc(p, (size_t)c * elem);
    if (p == NULL) collc_av_fail(X, -1, "out of memory");
    *cap = c;
    return p;
}

/* ---------------------------------------------------------------------------
 * Types, checks, conversions
 * ------------------------------------------------------------------------- */

static inline const char *cv_a_type(cv v)
{
    switch (v.kind) {
    case CV_INT: return "an int";
    case CV_BOOL: return "a bool";
    case CV_SET: return "a set";
    case CV_RANGE: return "a range";
    case CV_TUPLE: return "a tuple";
    default: return "no value";
    }
}

static inline const char *cv_type(cv v) { return cv_a_type(v) + (v.kind == CV_INT ? 3 : 2); }

static inline int64_t cv_as_int(struct collc_av *X, cv v, const char *what, int64_t at)
{
    if (v.kind != CV_INT) collc_av_fail(X, at, "%s must be an int, not %s", what, cv_a_type(v));
    return v.a;
}

static inline int cv_test(struct collc_av *X, cv v, const char *what, int64_t at)
{
    if (v.kind != CV_BOOL) collc_av_fail(X, at, "%s must be a bool (true or false), not %s", what, cv_a_type(v));
    return (int)v.a;
}

static inline cv cv_boolv(struct collc_av *X, cv v, const char *what, int64_t at)
{
    cv_test(X, v, what, at);
    return v;
}

static inline int64_t cv_range_size(cv r)
{
    if (r.c > 0) return r.b > r.a ? (r.b - r.a + r.c - 1) / r.c : 0;
    return r.a > r.b ? (r.a - r.b - r.c - 1) / -r.c : 0;
}

static inline void cv_check_element(struct collc_av *X, int64_t i, int64_t at)
{
    if (i < 0) collc_av_fail(X, at, "sets hold non-negative integers; %lld is negative", (long long)i);
    if (i >= COLLC_AV_MAX_ELEMENT)
        collc_av_fail(X, at, "set element %lld is beyond the limit %d", (long long)i, COLLC_AV_MAX_ELEMENT);
}

static inline int cv_cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The set of n ints (checked, sorted here). */
static inline cv cv_set_of(struct collc_av *X, int64_t *ids, int64_t n, int64_t at)
{
    cv s = {CV_SET, 0, 0, 0, NULL};
    struct cv_run *runs;
    for (int64_t i = 0; i < n; i++) cv_check_element(X, ids[i], at);
    qsort(ids, (size_t)n, sizeof *ids, cv_cmp64);
    runs = (struct cv_run *)collc_av_alloc(X, (size_t)(n > 0 ? n : 1) * sizeof *runs);
    for (int64_t i = 0; i < n; i++) {
        if (s.a > 0 && runs[s.a - 1].hi >= ids[i]) {
            if (runs[s.a - 1].hi == ids[i]) runs[s.a - 1].hi++, s.b++;
            continue;
        }
        runs[s.a].lo = (int32_t)ids[i], runs[s.a].hi = (int32_t)ids[i] + 1;
        s.a++, s.b++;
    }
    s.ptr = runs;
    return s;
}

static inline cv cv_interval(struct collc_av *X, int64_t lo, int64_t hi)
{
    cv s = {CV_SET, 0, 0, 0, NULL};
    if (hi > lo) {
        struct cv_run *r = (struct cv_run *)collc_av_alloc(X, sizeof *r);
        r->lo = (int32_t)lo, r->hi = (int32_t)hi;
        s.a = 1, s.b = hi - lo, s.ptr = r;
    }
    return s;
}

/* Iteration over a range, a set or a tuple. */
struct cv_iter {
    cv v;
    int64_t i, k, left;
};

static inline void cv_iter_begin(struct collc_av *X, struct cv_iter *it, cv v, const char *what, int64_t at)
{
    memset(it, 0, sizeof *it);
    it->v = v;
    if (v.kind == CV_RANGE) {
        it->left = cv_range_size(v);
        if (it->left > COLLC_AV_MAX_ITERATION)
            collc_av_fail(X, at, "iterating over %lld values is beyond the limit of %lld", (long long)it->left,
                          (long long)COLLC_AV_MAX_ITERATION);
    } else if (v.kind != CV_SET && v.kind != CV_TUPLE) {
        collc_av_fail(X, at, "cannot iterate over %s in a %s; use a range, a set or a tuple", cv_a_type(v), what);
    }
}

static inline int cv_iter_next(struct cv_iter *it, cv *out)
{
    if (it->v.kind == CV_RANGE) {
        if (it->left == 0) return 0;
        *out = cv_int(it->v.a + it->i * it->v.c);
        it->i++, it->left--;
        return 1;
    }
    if (it->v.kind == CV_SET) {
        const struct cv_run *r = (const struct cv_run *)it->v.ptr;
        if (it->i >= it->v.a) return 0;
        *out = cv_int(r[it->i].lo + it->k);
        if (++it->k >= r[it->i].hi - r[it->i].lo) it->i++, it->k = 0;
        return 1;
    }
    if (it->i >= it->v.a) return 0;
    *out = ((const cv *)it->v.ptr)[it->i++];
    return 1;
}

static inline void collc_av_spend(struct collc_av *X, int64_t at)
{
    if (--X->iterations_left < 0)
        collc_av_fail(X, at, "the program runs more than %lld loop iterations in total; is a loop bound wrong?",
                      (long long)COLLC_AV_MAX_ITERATION);
}

/* A set from a set, a range, a tuple of ints or an int (the language's as_set). */
static inline cv cv_as_set(struct collc_av *X, cv v, const char *what, int64_t at)
{
    if (v.kind == CV_SET) return v;
    if (v.kind == CV_INT) {
        cv_check_element(X, v.a, at);
        return cv_interval(X, v.a, v.a + 1);
    }
    if (v.kind == CV_RANGE && v.c == 1) {
        if (v.b <= v.a) return cv_interval(X, 0, 0);
        cv_check_element(X, v.a, at);
        cv_check_element(X, v.b - 1, at);
        return cv_interval(X, v.a, v.b);
    }
    if (v.kind == CV_RANGE || v.kind == CV_TUPLE) {
        int64_t n = v.kind == CV_RANGE ? cv_range_size(v) : v.a, k = 0;
        int64_t *ids;
        struct cv_iter it;
        cv x;
        cv_iter_begin(X, &it, v, "set", at);
        ids = (int64_t *)collc_av_alloc(X, (size_t)(n > 0 ? n : 1) * sizeof *ids);
        while (cv_iter_next(&it, &x)) ids[k++] = cv_as_int(X, x, "a set element", at);
        return cv_set_of(X, ids, n, at);
    }
    collc_av_fail(X, at, "%s must be a set, a range or an int, not %s", what, cv_a_type(v));
}

static inline int cv_setlike(cv v) { return v.kind == CV_SET || v.kind == CV_RANGE; }

/* ---------------------------------------------------------------------------
 * Set operations on run lists
 * ------------------------------------------------------------------------- */

enum { CV_OR, CV_AND, CV_XOR, CV_SUB };

static inline int32_t cv_bound(const struct cv_run *r, int64_t k) { return k & 1 ? r[k >> 1].hi : r[k >> 1].lo; }

static inline cv cv_combine(struct collc_av *X, cv x, cv y, int op)
{
    const struct cv_run *A = (const struct cv_run *)x.ptr, *B = (const struct cv_run *)y.ptr;
    const int64_t na = 2 * x.a, nb = 2 * y.a;
    struct cv_run *out = (struct cv_run *)collc_av_alloc(X, (size_t)(x.a + y.a + 1) * sizeof *out);
    int64_t ia = 0, ib = 0;
    int in_a = 0, in_b = 0, in = 0;
    int32_t start = 0;
    cv s = {CV_SET, 0, 0, 0, out};
    while (ia < na || ib < nb) {
        int32_t xa = ia < na ? cv_bound(A, ia) : INT32_MAX, xb = ib < nb ? cv_bound(B, ib) : INT32_MAX;
        int32_t at = xa < xb ? xa : xb;
        int now;
        if (xa == at) in_a = !in_a, ia++;
        if (xb == at) in_b = !in_b, ib++;
        now = op == CV_OR ? (in_a | in_b) : op == CV_AND ? (in_a & in_b) : op == CV_XOR ? (in_a ^ in_b)
                                                                                            : (in_a & !in_b);
        if (now && !in) start = at;
        if (!now && in) {
            out[s.a].lo = start, out[s.a].hi = at;
            s.b += at - start;
            s.a++;
        }
        in = now;
    }
    return s;
}

static inline int cv_set_has(cv s, int64_t x)
{
    const struct cv_run *r = (const struct cv_run *)s.ptr;
    int64_t lo = 0, hi = s.a;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (r[mid].hi <= x) lo = mid + 1;
        else hi = mid;
    }
    return lo < s.a && r[lo].lo <= x && x < r[lo].hi;
}

/* Whether set s has an element in the one run of set one. */
static inline int cv_set_meets(cv s, cv one)
{
    const struct cv_run *r = (const struct cv_run *)s.ptr, *o = (const struct cv_run *)one.ptr;
    int64_t lo = 0, hi = s.a;
    while (lo < hi) { /* the first run of s that ends after o's start */
        int64_t mid = (lo + hi) / 2;
        if (r[mid].hi <= o->lo) lo = mid + 1;
        else hi = mid;
    }
    return lo < s.a && r[lo].lo < o->hi;
}

static inline int cv_set_equal(cv x, cv y)
{
    return x.a == y.a && x.b == y.b && (x.a == 0 || memcmp(x.ptr, y.ptr, (size_t)x.a * sizeof(struct cv_run)) == 0);
}

/* ---------------------------------------------------------------------------
 * Operators
 * ------------------------------------------------------------------------- */

static inline int64_t cv_floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

static inline int64_t cv_pymod(int64_t a, int64_t b)
{
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}

static inline cv cv_int_binop(struct collc_av *X, char op, const char *name, int64_t a, int64_t b, int64_t at)
{
    int64_t r = 0;
    switch (op) {
    case '+': if (__builtin_add_overflow(a, b, &r)) goto overflow; return cv_int(r);
    case '-': if (__builtin_sub_overflow(a, b, &r)) goto overflow; return cv_int(r);
    case '*': if (__builtin_mul_overflow(a, b, &r)) goto overflow; return cv_int(r);
    case '/': case 'f': case '%': case 'm':
        if (b == 0) collc_av_fail(X, at, (op == '/' || op == 'f') ? "division by zero" : "modulo by zero");
        if (b == -1) { /* INT64_MIN / -1 */
            if (op == '%' || op == 'm') return cv_int(0);
            if (a == INT64_MIN) goto overflow;
            return cv_int(-a);
        }
        if (op == 'f') return cv_int(cv_floordiv(a, b));
        if (op == '%') return cv_int(cv_pymod(a, b));
        if (op == 'm') return cv_int(cv_pymod(a, b < 0 ? -b : b));
        if (cv_pymod(a, b) != 0)
            collc_av_fail(X, at, "%lld / %lld is not exact; use // for floor division", (long long)a, (long long)b);
        return cv_int(cv_floordiv(a, b));
    case 'p': /* ** */
        if (b < 0) collc_av_fail(X, at, "negative exponent %lld", (long long)b);
        if ((a > 1 || a < -1) && b > 64) collc_av_fail(X, at, "%lld ** %lld does not fit in 64 bits", (long long)a,
                                                       (long long)b);
        r = 1;
        for (int64_t i = 0; i < b; i++) {
            if (__builtin_mul_overflow(r, a, &r)) goto overflow;
            if (r == 0 || r == 1) break;
            if (a == -1) { r = (b % 2) ? -1 : 1; break; }
        }
        return cv_int(r);
    case '<':
        if (b < 0) collc_av_fail(X, at, "negative shift count %lld", (long long)b);
        if (a == 0) return cv_int(0);
        if (b >= 63) goto overflow;
        {
            __int128 w = (__int128)a << b;
            if (w > INT64_MAX || w < INT64_MIN) goto overflow;
            return cv_int((int64_t)w);
        }
    case '>':
        if (b < 0) collc_av_fail(X, at, "negative shift count %lld", (long long)b);
        return cv_int(b >= 63 ? (a < 0 ? -1 : 0) : a >> b);
    case '|': return cv_int(a | b);
    case '&': return cv_int(a & b);
    case '^': return cv_int(a ^ b);
    case '.': return cv_range3(a, b, 1);
    default: break;
    }
overflow:
    collc_av_fail(X, at, "integer %lld %s %lld does not fit in 64 bits", (long long)a, name, (long long)b);
}

/* The language's binary operators.  op: + - * / f(//) % m(mod) p(**) < (<<) > (>>) | & ^ . (..) */
static inline cv cv_binop(struct collc_av *X, char op, const char *name, cv a, cv b, int64_t at)
{
    if (a.kind == CV_INT && b.kind == CV_INT) return cv_int_binop(X, op, name, a.a, b.a, at);
    if ((op == '|' || op == '&' || op == '^' || op == '-') && cv_setlike(a) && (cv_setlike(b) || b.kind == CV_INT)) {
        cv x = cv_as_set(X, a, "value", at), y = cv_as_set(X, b, "value", at);
        return cv_combine(X, x, y, op == '|' ? CV_OR : op == '&' ? CV_AND : op == '^' ? CV_XOR : CV_SUB);
    }
    if (op == '|' && a.kind == CV_INT && cv_setlike(b))
        return cv_combine(X, cv_as_set(X, a, "value", at), cv_as_set(X, b, "value", at), CV_OR);
    if (op == '+' && a.kind == CV_TUPLE && b.kind == CV_TUPLE) {
        cv t = {CV_TUPLE, a.a + b.a, 0, 0, NULL};
        cv *items = (cv *)collc_av_alloc(X, (size_t)(t.a + 1) * sizeof(cv));
        if (a.a) memcpy(items, a.ptr, (size_t)a.a * sizeof(cv));
        if (b.a) memcpy(items + a.a, b.ptr, (size_t)b.a * sizeof(cv));
        t.ptr = items;
        return t;
    }
    if (op == '.') collc_av_fail(X, at, "a range needs int bounds, not %s .. %s", cv_type(a), cv_type(b));
    collc_av_fail(X, at, "unsupported operand types for %s: %s and %s", name, cv_type(a), cv_type(b));
}

/* Unary operators: - + ~ n(not). */
static inline cv cv_unop(struct collc_av *X, char op, cv a, int64_t at)
{
    if (op == 'n') return cv_bool(!cv_test(X, a, "operand of not", at));
    if (a.kind != CV_INT)
        collc_av_fail(X, at, "unsupported operand type for unary %c: %s", op, cv_type(a));
    if (op == '-') {
        if (a.a == INT64_MIN) collc_av_fail(X, at, "integer -(%lld) does not fit in 64 bits", (long long)a.a);
        return cv_int(-a.a);
    }
    return op == '~' ? cv_int(~a.a) : a;
}

static inline int cv_equal(struct collc_av *X, cv a, cv b)
{
    if (cv_setlike(a) && cv_setlike(b)) return cv_set_equal(cv_as_set(X, a, "value", -1), cv_as_set(X, b, "value", -1));
    if (a.kind != b.kind) return 0;
    if (a.kind == CV_INT || a.kind == CV_BOOL) return a.a == b.a;
    if (a.kind == CV_TUPLE) {
        if (a.a != b.a) return 0;
        for (int64_t i = 0; i < a.a; i++)
            if (!cv_equal(X, ((const cv *)a.ptr)[i], ((const cv *)b.ptr)[i])) return 0;
        return 1;
    }
    return 0;
}

/* Comparisons: op is one of "<" "<=" ">" ">=" "==" "!=" "in" "not in". */
static inline int cv_compare(struct collc_av *X, const char *op, cv a, cv b, int64_t at)
{
    if (op[0] == 'i' || op[0] == 'n') {
        int found = 0;
        if (a.kind != CV_INT) collc_av_fail(X, at, "'%s' needs an int on the left, not %s", op, cv_a_type(a));
        if (b.kind == CV_SET) {
            found = cv_set_has(b, a.a);
        } else if (b.kind == CV_RANGE) {
            int64_t k = b.c > 0 ? a.a - b.a : b.a - a.a, step = b.c > 0 ? b.c : -b.c;
            found = k >= 0 && k % step == 0 && k / step < cv_range_size(b);
        } else if (b.kind == CV_TUPLE) {
            for (int64_t i = 0; i < b.a && !found; i++) {
                cv e = ((const cv *)b.ptr)[i];
                found = (e.kind == CV_INT || e.kind == CV_BOOL) && e.a == a.a;
            }
        } else {
            collc_av_fail(X, at, "'%s' needs a set, a range or a tuple on the right, not %s", op, cv_a_type(b));
        }
        return op[0] == 'i' ? found : !found;
    }
    if (op[0] == '=' || op[0] == '!') return cv_equal(X, a, b) == (op[0] == '=');
    if (a.kind == CV_INT && b.kind == CV_INT) {
        if (op[0] == '<') return op[1] ? a.a <= b.a : a.a < b.a;
        return op[1] ? a.a >= b.a : a.a > b.a;
    }
    if (cv_setlike(a) && cv_setlike(b) && op[1] == '=') {
        cv x = cv_as_set(X, a, "value", at), y = cv_as_set(X, b, "value", at);
        return op[0] == '<' ? cv_combine(X, x, y, CV_SUB).b == 0 : cv_combine(X, y, x, CV_SUB).b == 0;
    }
    collc_av_fail(X, at, "cannot compare %s %s %s", cv_type(a), op, cv_type(b));
}

static inline cv cv_index(struct collc_av *X, cv t, cv i, int64_t at)
{
    int64_t k;
    if (t.kind != CV_TUPLE) collc_av_fail(X, at, "only tuples can be indexed, not %s", cv_a_type(t));
    k = cv_as_int(X, i, "an index", at);
    if (k < -t.a || k >= t.a)
        collc_av_fail(X, at, "index %lld out of range for a tuple of length %lld", (long long)k, (long long)t.a);
    return ((const cv *)t.ptr)[k < 0 ? k + t.a : k];
}

/* A list of values being collected (set literals, tuples, comprehensions). */
struct cv_list {
    cv *items;
    int64_t n, cap;
};

static inline void cv_push(struct collc_av *X, struct cv_list *l, cv v)
{
    if (l->n == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 16;
        cv *items = (cv *)collc_av_alloc(X, (size_t)cap * sizeof(cv));
        if (l->n) memcpy(items, l->items, (size_t)l->n * sizeof(cv));
        l->items = items, l->cap = cap;
    }
    l->items[l->n++] = v;
}

static inline cv cv_tuple_of(struct cv_list *l)
{
    cv t = {CV_TUPLE, l->n, 0, 0, l->items};
    return t;
}

static inline cv cv_make_set(struct collc_av *X, struct cv_list *l, int64_t at)
{
    int64_t *ids = (int64_t *)collc_av_alloc(X, (size_t)(l->n + 1) * sizeof *ids);
    for (int64_t i = 0; i < l->n; i++) ids[i] = cv_as_int(X, l->items[i], "a set element", at);
    return cv_set_of(X, ids, l->n, at);
}

/* ---------------------------------------------------------------------------
 * Builtins
 * ------------------------------------------------------------------------- */

static inline cv cv_log2(struct collc_av *X, cv x, int64_t at)
{
    int64_t n = cv_as_int(X, x, "the argument of log2", at);
    if (n < 1) collc_av_fail(X, at, "log2 of %lld is undefined", (long long)n);
    return cv_int(63 - __builtin_clzll((unsigned long long)n));
}

static inline cv cv_ceil_log2(struct collc_av *X, cv x, int64_t at)
{
    int64_t n = cv_as_int(X, x, "the argument of ceil_log2", at);
    if (n < 1) collc_av_fail(X, at, "ceil_log2 of %lld is undefined", (long long)n);
    return cv_int(n == 1 ? 0 : 64 - __builtin_clzll((unsigned long long)(n - 1)));
}

static inline cv cv_is_pow2(struct collc_av *X, cv x, int64_t at)
{
    int64_t n = cv_as_int(X, x, "the argument of is_pow2", at);
    return cv_bool(n > 0 && (n & (n - 1)) == 0);
}

static inline cv cv_abs(struct collc_av *X, cv x, int64_t at)
{
    int64_t n = cv_as_int(X, x, "value", at);
    if (n == INT64_MIN) collc_av_fail(X, at, "integer abs(%lld) does not fit in 64 bits", (long long)n);
    return cv_int(n < 0 ? -n : n);
}

static inline cv cv_popcount(struct collc_av *X, cv x, int64_t at)
{
    int64_t n = cv_as_int(X, x, "value", at);
    if (n < 0) collc_av_fail(X, at, "popcount of negative %lld", (long long)n);
    return cv_int(__builtin_popcountll((unsigned long long)n));
}

static inline cv cv_bitreverse(struct collc_av *X, cv x, cv n, int64_t at)
{
    int64_t v = cv_as_int(X, x, "value", at), bits = cv_as_int(X, n, "the bit width", at), out = 0;
    if (bits < 0 || bits > 63) collc_av_fail(X, at, "bit width %lld must be in 0..63", (long long)bits);
    for (int64_t i = 0; i < bits; i++) out = (out << 1) | (v & 1), v >>= 1;
    return cv_int(out);
}

static inline cv cv_len(struct collc_av *X, cv x, int64_t at)
{
    if (x.kind == CV_RANGE) return cv_int(cv_range_size(x));
    if (x.kind == CV_SET) return cv_int(x.b);
    if (x.kind == CV_TUPLE) return cv_int(x.a);
    collc_av_fail(X, at, "len() needs a set, a range or a tuple, not %s", cv_a_type(x));
}

/* min / max of several arguments, or of one collection. */
static inline cv cv_minmax(struct collc_av *X, int want_max, int n, const cv *args, int64_t at)
{
    const char *name = want_max ? "max" : "min";
    int64_t best = 0;
    int have = 0;
    if (n == 1 && args[0].kind == CV_RANGE) {
        int64_t size = cv_range_size(args[0]), first = args[0].a, last = args[0].a + (size - 1) * args[0].c;
        if (size == 0) collc_av_fail(X, at, "%s() of an empty range", name);
        return cv_int(want_max ? (first > last ? first : last) : (first < last ? first : last));
    }
    if (n == 1) {
        struct cv_iter it;
        cv v;
        cv_iter_begin(X, &it, args[0], want_max ? "max()" : "min()", at);
        while (cv_iter_next(&it, &v)) {
            int64_t k = cv_as_int(X, v, want_max ? "an argument of max" : "an argument of min", at);
            if (!have || (want_max ? k > best : k < best)) best = k;
            have = 1;
        }
    } else {
        for (int i = 0; i < n; i++) {
            int64_t k = cv_as_int(X, args[i], want_max ? "an argument of max" : "an argument of min", at);
            if (!have || (want_max ? k > best : k < best)) best = k;
            have = 1;
        }
    }
    if (!have) collc_av_fail(X, at, "%s() of an empty collection", name);
    return cv_int(best);
}

static inline cv cv_sum_prod(struct collc_av *X, int prod, cv x, int64_t at)
{
    struct cv_iter it;
    cv v;
    int64_t total = prod ? 1 : 0;
    cv_iter_begin(X, &it, x, prod ? "prod()" : "sum()", at);
    while (cv_iter_next(&it, &v)) {
        int64_t k = cv_as_int(X, v, prod ? "an element of prod()" : "an element of sum()", at);
        if (prod ? __builtin_mul_overflow(total, k, &total) : __builtin_add_overflow(total, k, &total))
            collc_av_fail(X, at, "integer %s does not fit in 64 bits", prod ? "product" : "sum");
    }
    return cv_int(total);
}

static inline cv cv_union(struct collc_av *X, cv x, int64_t at)
{
    struct cv_iter it;
    cv v, out = cv_interval(X, 0, 0);
    cv_iter_begin(X, &it, x, "union()", at);
    while (cv_iter_next(&it, &v)) out = cv_combine(X, out, cv_as_set(X, v, "an element of union()", at), CV_OR);
    return out;
}

static inline cv cv_all_any(struct collc_av *X, int any, cv x, int64_t at)
{
    struct cv_iter it;
    cv v;
    cv_iter_begin(X, &it, x, any ? "any()" : "all()", at);
    while (cv_iter_next(&it, &v)) {
        int b = cv_test(X, v, any ? "an element of any()" : "an element of all()", at);
        if (b == any) return cv_bool(any);
    }
    return cv_bool(!any);
}

static inline cv cv_tuple(struct collc_av *X, cv x, const char *what, int64_t at)
{
    struct cv_iter it;
    struct cv_list l = {NULL, 0, 0};
    cv v;
    cv_iter_begin(X, &it, x, what, at);
    while (cv_iter_next(&it, &v)) cv_push(X, &l, v);
    return cv_tuple_of(&l);
}

static inline cv cv_reversed(struct collc_av *X, cv x, int64_t at)
{
    if (x.kind == CV_RANGE) {
        int64_t size = cv_range_size(x);
        if (size == 0) return cv_range3(x.a, x.a, -x.c); /* Python: range(lo, lo, -step) for an empty range */
        return cv_range3(x.a + (size - 1) * x.c, x.a - x.c, -x.c);
    }
    {
        cv t = cv_tuple(X, x, "reversed()", at);
        cv *items = (cv *)collc_av_alloc(X, (size_t)(t.a + 1) * sizeof(cv));
        for (int64_t i = 0; i < t.a; i++) items[i] = ((const cv *)t.ptr)[t.a - 1 - i];
        t.ptr = items;
        return t;
    }
}

static inline cv cv_range(struct collc_av *X, int n, const cv *args, int64_t at)
{
    int64_t v[3] = {0, 0, 1};
    for (int i = 0; i < n; i++) v[n == 1 ? 1 : i] = cv_as_int(X, args[i], "an argument of range", at);
    if (v[2] == 0) collc_av_fail(X, at, "range() step must not be zero");
    {
        /* Python normalises the stop of a stepped range to lo + size * step */
        cv r = cv_range3(v[0], v[1], v[2]);
        int64_t size = cv_range_size(r);
        if (v[2] != 1 && v[2] != -1) r.b = r.a + size * r.c;
        if (size == 0) r.b = r.a;
        return r;
    }
}

static inline cv cv_shift(struct collc_av *X, cv x, cv k, int64_t at)
{
    cv s = cv_as_set(X, x, "the first argument of shift", at);
    int64_t by = cv_as_int(X, k, "the offset of shift", at);
    const struct cv_run *r = (const struct cv_run *)s.ptr;
    struct cv_run *out;
    if (s.a == 0 || by == 0) return s;
    if (by > 0 && r[s.a - 1].hi - 1 + by >= COLLC_AV_MAX_ELEMENT)
        collc_av_fail(X, at, "set element %lld is beyond the limit %d", (long long)(r[s.a - 1].hi - 1 + by),
                      COLLC_AV_MAX_ELEMENT);
    if (by < 0 && r[0].lo + by < 0)
        collc_av_fail(X, at, "sets hold non-negative integers; shifting %d by %lld gives %lld", r[0].lo,
                      (long long)by, (long long)(r[0].lo + by));
    out = (struct cv_run *)collc_av_alloc(X, (size_t)s.a * sizeof *out);
    for (int64_t i = 0; i < s.a; i++) out[i].lo = (int32_t)(r[i].lo + by), out[i].hi = (int32_t)(r[i].hi + by);
    s.ptr = out;
    return s;
}

#endif /* COLLC_AVALUE_H */
