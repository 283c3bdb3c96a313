/* codecs_cpu.c: times the mpi-c runtime's CPU codecs (collc_zcodec.h), two builds of them side by side.
 *
 * benchmarks/codecs_cpu.py compiles this file three times into one program:
 *   -DCODECS_SIDE=0 -I <baseline runtime>   the "old" codecs, as old_encode / old_decode
 *   -DCODECS_SIDE=1 -I runtime              the "new" codecs, as new_encode / new_decode
 *   (no CODECS_SIDE)                        main: the data, the timing loop and the comparison
 * Each side is its own translation unit, so the two headers' static inline functions never meet.
 *
 *   codecs_cpu N ROUNDS KIND STEP_BITS INV2EB_BITS BITS BLOCK SIGNAL
 *
 * KIND is collc_codec_kind (1 ebq, 2 fwq); STEP_BITS and INV2EB_BITS are the float32 grid constants as
 * their bit patterns (hex); SIGNAL is "uniform" (random in [-1, 1]) or "smooth" (a sum of slow sines).
 * Every round times old encode, new encode, old decode, new decode, in an order that alternates from
 * round to round, and prints one line per timing: "encode old 0.123456".  Before timing, the payloads
 * and the decoded values of both sides are compared byte for byte; a difference ends the run (exit 1).
 */
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>

typedef unsigned long long u64;

#ifdef CODECS_SIDE
#include "collc_zcodec.h"

#if CODECS_SIDE == 0
#define SIDE(name) old_##name
#else
#define SIDE(name) new_##name
#endif

static struct collc_codec make(int kind, float step, float inv2eb, int bits, int block)
{
    struct collc_codec c = {(enum collc_codec_kind)kind, step, inv2eb, bits, block, "bench"};
    return c;
}

u64 SIDE(max_bytes)(int kind, float step, float inv2eb, int bits, int block, u64 n)
{
    struct collc_codec c = make(kind, step, inv2eb, bits, block);
    return collc_zmax_bytes(&c, n, 1);
}

u64 SIDE(encode)(int kind, float step, float inv2eb, int bits, int block, const float *x, u64 n,
                 unsigned char *out, u64 *bad)
{
    struct collc_codec c = make(kind, step, inv2eb, bits, block);
    return collc_zencode(&c, x, n, out, bad);
}

void SIDE(decode)(int kind, float step, float inv2eb, int bits, int block, const unsigned char *in, u64 n,
                  float *out)
{
    struct collc_codec c = make(kind, step, inv2eb, bits, block);
    collc_zdecode(&c, in, n, out);
}

#else /* main */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIDES(name, ret, args)                                                                                       \
    ret old_##name args;                                                                                             \
    ret new_##name args;
SIDES(max_bytes, u64, (int, float, float, int, int, u64))
SIDES(encode, u64, (int, float, float, int, int, const float *, u64, unsigned char *, u64 *))
SIDES(decode, void, (int, float, float, int, int, const unsigned char *, u64, float *))

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float from_bits(const char *hex)
{
    unsigned u = (unsigned)strtoul(hex, NULL, 16);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The input: xorshift noise in [-1, 1], or a smooth signal (three slow sines and a little noise). */
static void fill(float *x, u64 n, const char *signal)
{
    u64 s = 0x9E3779B97F4A7C15ull;
    int smooth = strcmp(signal, "smooth") == 0;
    for (u64 i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        float noise = (float)(s >> 40) * (2.0f / 16777216.0f) - 1.0f;
        if (smooth) {
            double t = (double)i;
            x[i] = (float)(0.5 * sin(t * 1e-4) + 0.3 * sin(t * 3.7e-3) + 0.15 * sin(t * 2.1e-2)) + 1e-3f * noise;
        } else {
            x[i] = noise;
        }
    }
}

static void *alloc(u64 bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1)) {
        fprintf(stderr, "out of memory (%llu bytes)\n", bytes);
        exit(2);
    }
    memset(p, 0, bytes); /* touch every page before timing */
    return p;
}

int main(int argc, char **argv)
{
    if (argc != 9) {
        fprintf(stderr, "usage: %s N ROUNDS KIND STEP_BITS INV2EB_BITS BITS BLOCK SIGNAL\n", argv[0]);
        return 2;
    }
    u64 n = strtoull(argv[1], NULL, 10);
    int rounds = atoi(argv[2]), kind = atoi(argv[3]);
    float step = from_bits(argv[4]), inv2eb = from_bits(argv[5]);
    int bits = atoi(argv[6]), block = atoi(argv[7]);
#define ARGS kind, step, inv2eb, bits, block

    u64 room = old_max_bytes(ARGS, n);
    float *x = alloc(4 * n), *y_old = alloc(4 * n), *y_new = alloc(4 * n);
    unsigned char *p_old = alloc(room), *p_new = alloc(room);
    fill(x, n, argv[8]);

    /* The two sides must agree before they are timed. */
    u64 bad_old, bad_new;
    u64 size_old = old_encode(ARGS, x, n, p_old, &bad_old);
    u64 size_new = new_encode(ARGS, x, n, p_new, &bad_new);
    if (size_old != size_new || bad_old != bad_new || (size_old != ~0ull && memcmp(p_old, p_new, size_old))) {
        fprintf(stderr, "payloads differ: old %llu bytes, new %llu bytes\n", size_old, size_new);
        return 1;
    }
    if (size_old == ~0ull) {
        fprintf(stderr, "the codec refuses element %llu of the input\n", bad_old);
        return 2;
    }
    old_decode(ARGS, p_old, n, y_old);
    new_decode(ARGS, p_old, n, y_new);
    if (memcmp(y_old, y_new, 4 * n)) {
        fprintf(stderr, "decoded values differ\n");
        return 1;
    }
    printf("payload %llu\n", size_old);

    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 4; k++) {
            int which = (k + r) % 4; /* rotate the order: each timing takes every slot in turn */
            double t0 = now();
            switch (which) {
            case 0: old_encode(ARGS, x, n, p_old, &bad_old); break;
            case 1: new_encode(ARGS, x, n, p_new, &bad_new); break;
            case 2: old_decode(ARGS, p_old, n, y_old); break;
            case 3: new_decode(ARGS, p_new, n, y_new); break;
            }
            double t = now() - t0;
            printf("%s %s %.6f\n", which < 2 ? "encode" : "decode", which % 2 ? "new" : "old", t);
        }
    }
    if (memcmp(p_old, p_new, size_old) || memcmp(y_old, y_new, 4 * n)) {
        fprintf(stderr, "the timed runs' outputs differ\n");
        return 1;
    }
    free(x), free(y_old), free(y_new), free(p_old), free(p_new);
    return 0;
}
#endif
