/* position.h: where a restarted feed resumes.
 *
 * A program that saves its feed position with its checkpoint
 * (DataFeed.save_position, python/tfos/feed.py) leaves
 * <checkpoint_dir>/tfos-feed-position/attempt-<A>-<job>-<index>.json holding
 * the partitions that node had consumed ({"partitions": [...]}). After a
 * restart the launcher feeds only the partitions none of them lists: rows
 * before the checkpoint are not fed again, rows after it are. */
#ifndef TFOS_RUN_POSITION_H
#define TFOS_RUN_POSITION_H
#include <stddef.h>
#include <stdint.h>

/* The union of the partitions recorded in files modified at or after
 * since_s (seconds since the epoch), sorted, without duplicates: *ids
 * (malloc'd, the caller frees it; NULL when *n is 0) and *n. Returns 1 when
 * at least one position file was read, 0 when there is none (the feed then
 * starts from the beginning), TFOS_ENOMEM. Unreadable or malformed files are
 * skipped with a warning. */
int tfos__feed_positions(const char *checkpoint_dir, int64_t since_s, uint64_t **ids, size_t *n);

/* Whether id is in the sorted ids[0..n). */
int tfos__position_has(const uint64_t *ids, size_t n, uint64_t id);

#endif
