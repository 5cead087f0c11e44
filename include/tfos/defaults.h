/*
 * defaults.h: every default of tfos, in one place.
 *
 * The C launcher, the agent, the coordinator, the CLI's help text and the
 * Python API (tfos._tfos.DEFAULTS, read by TFCluster.run and tfos.run) all
 * take their defaults from here; nothing else spells these numbers.
 */
#ifndef TFOS_DEFAULTS_H
#define TFOS_DEFAULTS_H

/* Seconds for every node to register: `tfos run` forms a local cluster in
 * well under a second, so a minute means something is wrong; on Spark an
 * executor may first have to be granted (TensorFlowOnSpark's 600). */
#define TFOS_DEFAULT_RESERVATION_TIMEOUT_LOCAL 60.0
#define TFOS_DEFAULT_RESERVATION_TIMEOUT_SPARK 600.0
/* Seconds between SIGTERM and SIGKILL when a cluster is stopped on purpose
 * (finished, Ctrl-C, shutdown()). */
#define TFOS_DEFAULT_STOP_GRACE 5.0
/* Seconds the survivors of a failed node get between SIGTERM and SIGKILL.
 * Their attempt is void (the cluster restarts or fails as a whole) and a
 * trainer blocked in a collective with a dead peer never reaches its SIGTERM
 * handler, so waiting out the stop grace buys nothing; half a second still
 * lets a program that is not blocked end on its SIGTERM (flush its logs).
 * 0 kills them at once. */
#define TFOS_DEFAULT_FAILURE_GRACE 0.5
/* Drain on notice (tfos_coord_drain: SIGTERM to `tfos run`, a Spark
 * executor's decommission): seconds the programs get to reach the drain
 * step, write their checkpoint and exit 0, after which those still running
 * are stopped (--grace) and the run falls back to its last checkpoint. 25 s
 * fits inside the shortest cloud notice (30 s) with the stop after it. */
#define TFOS_DEFAULT_DRAIN_GRACE 25.0
/* An elastic run's wait for a new attempt's nodes before it forms with fewer
 * (tfos_run_opts.elastic_wait; Spark's TFCluster.run(elastic_wait=) too). */
#define TFOS_DEFAULT_ELASTIC_WAIT 30.0
/* A node ended by SIGTERM: milliseconds the restart waits for a stop of
 * the run itself (a scheduler cancelling the whole job signals its parts
 * one after another; launch.c, conclude). */
#define TFOS_DEFAULT_RESTART_SETTLE_MS 2000
/* How far ahead of the ranks' estimated step the drain step is put, in
 * milliseconds of their step rate: the DRAIN frame must reach every
 * program before it passes that step (a frame takes well under 1 ms; the
 * reports the estimate starts from are up to a heartbeat old, which is
 * added). */
#define TFOS_DRAIN_LEAD_MS 1000
/* The most the coordinator waits for the fresh reports it asks the agents
 * for before it chooses the drain step (they answer in milliseconds). */
#define TFOS_DRAIN_PROBE_MS 500
/* `tfos run`'s exit code after a drain: every node checkpointed at the
 * drain step and ended; the same command again resumes (sysexits.h's
 * EX_TEMPFAIL: "try again later"). */
#define TFOS_EXIT_DRAINED 75
/* A running node whose agent is silent this long has failed. */
#define TFOS_DEFAULT_HEARTBEAT_TIMEOUT 30.0
/* /status lists at most this many nodes unasked (the first ones; a larger
 * cluster's rest by /status?nodes=FIRST-LAST), and at most
 * TFOS_STATUS_PAGE_MAX in one page: a page stays about 0.6 KB a node. */
#define TFOS_STATUS_PAGE_NODES 256
#define TFOS_STATUS_PAGE_MAX 1024
/* How often an agent beats, in milliseconds. */
#define TFOS_HEARTBEAT_INTERVAL_MS 1000
/* Seconds an agent keeps trying to reach its coordinator. */
#define TFOS_DEFAULT_CONNECT_TIMEOUT 30.0
/* Restarts of the whole cluster after a node fails. */
#define TFOS_DEFAULT_MAX_RESTARTS 3
/* tfos_agent_opts.respawn: a program that fails sooner than this after it
 * started (a model that cannot load) fails its node instead. */
#define TFOS_RESPAWN_MIN_UPTIME_MS 5000
/* A connection to the coordinator must authenticate within this time (a
 * real agent or client answers its greeting in milliseconds). */
#define TFOS_AUTH_TIMEOUT_MS 3000
/* ... and is not evicted for a newcomer before this, however full the
 * listener (core/link.h) */
#define TFOS_AUTH_GRACE_MS 1000
/* Feed rings per node, MiB (powers of two). */
#define TFOS_DEFAULT_FEED_MB 64
#define TFOS_DEFAULT_RESULT_MB 16
/* `tfos run --input`: rows per feed record and per partition. */
#define TFOS_DEFAULT_BATCH_ROWS 1024
/* Without --batch-rows, a record of a format whose row sizes are known before
 * reading (.npy) takes at most this many bytes (and at least one row): 1024
 * rows of 150 KiB tensors made 150 MB records, which went round a 512 MiB
 * ring through DRAM at 0.29 of memcpy; records of 1-2 MiB cycle through the
 * cache (docs/FEED.md). FeedClient.feed_arrays sizes its records the same. */
#define TFOS_AUTO_RECORD_BYTES ((size_t)2 << 20)
#define TFOS_DEFAULT_PARTITION_ROWS 10000
/* Bounded waits of the small coordinator clients (status query, abort), ms. */
#define TFOS_DEFAULT_CLIENT_TIMEOUT_MS 10000
/* Seconds an inference task waits for a node's next result once the node
 * has read every row of the partition (TFCluster.inference(results_timeout=)):
 * a map_fun that never calls feed.batch_results() fails with that question
 * after this long instead of after the whole feed_timeout. */
#define TFOS_DEFAULT_RESULTS_TIMEOUT 60.0
/* Lines of a failed program's output kept in its failure report (room for
 * the stacks a hung Python program dumps). */
#define TFOS_FAILURE_TAIL_LINES 40
/* TensorFlow's C++ log level (TF_CPP_MIN_LOG_LEVEL) for a program whose
 * environment does not set one: 1 drops TensorFlow's INFO lines (the CPU
 * instructions notice, gRPC servers started, coordination-service chatter),
 * about 20 lines per run of 2 workers and a ps, and keeps its warnings and
 * errors. A value the user sets, 0 included, is passed on as it is. */
#define TFOS_DEFAULT_TF_CPP_MIN_LOG_LEVEL "1"

/* Seconds a Spark feed task waits for its node to take a partition
 * (TFCluster.train/inference, tfos.spark.Cluster, TorchDistributor's
 * feed_timeout): TensorFlowOnSpark's 600. */
#define TFOS_DEFAULT_FEED_TIMEOUT 600.0
/* Seconds a Spark client's lease on its coordinator lasts without a word
 * (tfos.spark.Cluster(lease_timeout=)). */
#define TFOS_DEFAULT_LEASE_TIMEOUT 60.0

/* ---- tfos yarn (docs/YARN.md) ---- */
/* Memory of a node's container (MB) when its role's is not given. */
#define TFOS_YARN_DEFAULT_CONTAINER_MB 1024
/* Memory of the ApplicationMaster's container (MB). */
#define TFOS_YARN_DEFAULT_AM_MB 512
/* Seconds YARN may take to start the application, without a reservation
 * timeout to go by. */
#define TFOS_YARN_DEFAULT_ACCEPT_TIMEOUT 120.0

/* ---- tfos serve (docs/SERVING.md) ---- */
/* The HTTP port (TensorFlow Serving's REST port); a client's default URL. */
#define TFOS_SERVE_DEFAULT_PORT 8500
/* Restarts of a model server (alone, by its agent) or of the whole set. */
#define TFOS_SERVE_DEFAULT_MAX_RESTARTS 10
/* Seconds between a model server's looks for new versions. */
#define TFOS_SERVE_DEFAULT_POLL 2.0
/* tfos serve --registry-poll: seconds between asking MLflow's registry where
 * a followed alias points (a promotion is served within this and a load) */
#define TFOS_SERVE_DEFAULT_REGISTRY_POLL 10.0
/* Rows per batch sent to a model server. */
#define TFOS_SERVE_DEFAULT_MAX_BATCH 64
/* The longest a request waits for others to batch with, ms. */
#define TFOS_SERVE_DEFAULT_MAX_DELAY_MS 5
/* Rows waiting per model before requests get 429, in batches. */
#define TFOS_SERVE_DEFAULT_QUEUE_BATCHES 64
/* A request not answered within this many seconds gets 504. */
#define TFOS_SERVE_DEFAULT_TIMEOUT 30.0
/* The largest request body, bytes. */
#define TFOS_SERVE_DEFAULT_MAX_BODY (64LL << 20)
/* Seconds a client of tfos serve (tfos.serve.Client, predict_udf) waits
 * for an answer. */
#define TFOS_SERVE_DEFAULT_CLIENT_TIMEOUT 60.0

#endif
