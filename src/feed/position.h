/* position.h: where a restarted feed resumes.
 *
 * A program that saves its feed position with its checkpoint
 * (DataFeed.save_position, python/tfos/feed/positions.py) leaves
 * <checkpoint_dir>/tfos-feed-position/attempt-<A>-<job>-<index>-<cluster>.json holding
 * the partitions that node had consumed ({"partitions": [...]}). After a
 * restart the launcher feeds only the partitions none of them lists: rows
 * before the checkpoint are not fed again, rows after it are. */
#ifndef TFOS_RUN_POSITION_H
#define TFOS_RUN_POSITION_H
#include <stddef.h>
#include <stdint.h>

/* The position files' directory, under the checkpoint dir. */
#define TFOS__POSITION_DIR "tfos-feed-position"

/* Where the feed resumes. */
typedef struct tfos__position {
    uint64_t *whole;    /* partitions consumed whole: sorted, no duplicates */
    size_t nwhole;
    uint64_t *part_id;  /* partitions read in part (none of them whole), sorted, */
    uint64_t *part_rows;/* with how many of their first rows were taken (the attempts' counts added) */
    size_t npart;
} tfos__position;

/* Read the position files modified at or after since (seconds since the
 * epoch, to the nanosecond) into *pos (free with tfos__position_fini). Returns 1 when at least
 * one file was read, 0 when there is none (the feed then starts from the
 * beginning; *pos is empty), TFOS_ENOMEM. Unreadable or malformed files are
 * skipped with a warning. */
int tfos__feed_positions(const char *checkpoint_dir, double since, tfos__position *pos);
void tfos__position_fini(tfos__position *pos);

/* Whether partition id was consumed whole. */
int tfos__position_whole(const tfos__position *pos, uint64_t id);
/* The rows of partition id already taken (0 if none or if whole). */
uint64_t tfos__position_rows(const tfos__position *pos, uint64_t id);

#endif
