/* check.h: the few macros the C unit tests share. A failed CHECK prints the
 * file, line and expression and exits non-zero; the test binary is the case. */
#ifndef TFOS_TEST_CHECK_H
#define TFOS_TEST_CHECK_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#define CHECK_EQ(a, b)                                                                                  \
    do {                                                                                                \
        long long a_ = (long long)(a), b_ = (long long)(b);                                             \
        if (a_ != b_) {                                                                                 \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %lld, %s == %lld\n", __FILE__, __LINE__, #a, \
                    a_, #b, b_);                                                                        \
            exit(1);                                                                                    \
        }                                                                                               \
    } while (0)

#define CHECK_STR(a, b)                                                                                     \
    do {                                                                                                    \
        const char *a_ = (a), *b_ = (b);                                                                    \
        if (!a_ || !b_ || strcmp(a_, b_)) {                                                                 \
            fprintf(stderr, "%s:%d: CHECK_STR failed:\n  %s = \"%s\"\n  %s = \"%s\"\n", __FILE__, __LINE__, \
                    #a, a_ ? a_ : "(null)", #b, b_ ? b_ : "(null)");                                        \
            exit(1);                                                                                        \
        }                                                                                                   \
    } while (0)

/* What writer(f, arg) writes to a FILE, as a malloc'd string (free it). */
static inline char *check_capture(void (*writer)(FILE *, const char *), const char *arg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f != NULL);
    writer(f, arg);
    CHECK(fclose(f) == 0);
    return buf;
}

/* xorshift64: deterministic pseudo-random numbers, so a fuzz failure
 * reproduces. */
static inline unsigned long long check_rand(unsigned long long *state)
{
    unsigned long long x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

#define RUN(fn)                            \
    do {                                   \
        printf("%-40s", #fn);              \
        fflush(stdout);                    \
        fn();                              \
        printf("ok\n");                    \
    } while (0)

#endif
