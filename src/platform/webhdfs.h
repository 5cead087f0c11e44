/* webhdfs.h: writing to HDFS over WebHDFS, the NameNode's REST API (on by
 * default in Hadoop 3), through httpc.h: what tfos yarn serve's front end
 * needs to hand the model servers in other containers a model version it
 * fetched (docs/MODELS.md, "On YARN"). The model servers read it back with
 * tfos.fs, which speaks the same API.
 *
 * The handle's calls use simple authentication (user.name=, as tfos.fs and
 * `hdfs dfs` without Kerberos): the user is HADOOP_USER_NAME, else the name of
 * this process's uid, the rule tfos.fs follows, so that both ends act as one
 * HDFS user. On a Kerberized cluster, in the YARN ApplicationMaster's
 * container, they carry the HDFS delegation token in the file
 * $TFOS_HDFS_TOKEN_FILE names instead (written by the ApplicationMaster, read
 * at each request). tfos__webhdfs_kerberos_token gets tfos.fs a delegation
 * token with a Kerberos ticket (SPNEGO).
 *
 * Paths are HDFS paths ("/user/me/x"); tfos__webhdfs_path takes one out of
 * an hdfs:// URL. Every call blocks its caller for at most the handle's
 * timeout per request: callers on a loop make them from a thread. A handle
 * may be used from several threads at once (it is not changed after open). */
#ifndef TFOS_PLATFORM_WEBHDFS_H
#define TFOS_PLATFORM_WEBHDFS_H
#include <stddef.h>

typedef struct tfos__webhdfs tfos__webhdfs;

/* What a refusal of a delegation token the NameNode no longer takes adds to
 * the error (tfos.fs says the same, tfos._tfos.WEBHDFS_TOKEN_FIX). */
#define TFOS_WEBHDFS_TOKEN_FIX                                                                                   \
    "the HDFS delegation token it was asked with is no longer valid: YARN renews an application's tokens only " \
    "up to the cluster's dfs.namenode.delegation.token.max-lifetime, and nobody renews them after. A job that " \
    "runs longer needs a keytab, which keeps fresh tokens coming: tfos yarn --principal P --keytab K, or "      \
    "spark-submit --principal P --keytab K (outside a container: kinit again)"

/* A handle for the NameNode whose WebHDFS base is `base` ("http://host:port",
 * $TFOS_WEBHDFS). timeout_ms bounds each request (0: 30 s). 0, TFOS_EINVAL
 * (err says why: not an http(s) URL, no Hadoop user), TFOS_ENOMEM. Does not
 * contact the NameNode. */
int tfos__webhdfs_open(tfos__webhdfs **out, const char *base, long timeout_ms, char *err, size_t errlen);
void tfos__webhdfs_close(tfos__webhdfs *w);

/* The path of an hdfs:// URL ("hdfs://nn:8020/user/me/x" -> "/user/me/x",
 * "hdfs:///x" -> "/x"), pointing into url; NULL when url is not hdfs://. */
const char *tfos__webhdfs_path(const char *url);

/* mkdir -p path. 0, or TFOS_EPROTO (the NameNode refused: err has its
 * exception and message), TFOS_ESYS / TFOS_ETIMEDOUT (not reached), with
 * the NameNode and the path named in err. */
int tfos__webhdfs_mkdirs(tfos__webhdfs *w, const char *path, char *err, size_t errlen);

/* Copy the local directory tree `local` (directories and regular files;
 * anything else is refused) under `path`, which is made. A file is
 * created in two requests: the NameNode names a DataNode (noredirect=true),
 * the file's bytes go to it. Not atomic: write under a name readers skip,
 * then tfos__webhdfs_rename. 0, or as tfos__webhdfs_mkdirs (TFOS_ESYS also
 * for a local file that cannot be read). */
int tfos__webhdfs_put_dir(tfos__webhdfs *w, const char *local, const char *path, char *err, size_t errlen);

/* Rename from to `to` (a directory moves whole, atomically; `to` must not
 * exist). 0, or as tfos__webhdfs_mkdirs (TFOS_EPROTO also when HDFS
 * answers false: `from` missing or `to` there already). */
int tfos__webhdfs_rename(tfos__webhdfs *w, const char *from, const char *to, char *err, size_t errlen);

/* rm -r path; a path that is not there is no error. 0, or as
 * tfos__webhdfs_mkdirs. */
int tfos__webhdfs_delete(tfos__webhdfs *w, const char *path, char *err, size_t errlen);

/* A delegation token for the Kerberos ticket in this process's cache
 * (MIT's: $KRB5CCNAME, $KRB5_CONFIG), from the NameNode whose WebHDFS base is
 * `base`, over SPNEGO: GETDELEGATIONTOKEN (renewer: the ticket's user), then
 * RENEWDELEGATIONTOKEN to learn when it expires unless renewed again. Its
 * URL string (what WebHDFS takes as delegation=) into token, the expiry (ms
 * since the epoch) into *expires. 0; TFOS_EPROTO (the NameNode refused: no
 * ticket, or one it does not take; err says so and names kinit);
 * TFOS_ESYS / TFOS_ETIMEDOUT (not reached, or libcurl without SPNEGO);
 * TFOS_ETOOBIG (token too small). For tfos.fs outside YARN containers. */
int tfos__webhdfs_kerberos_token(const char *base, long timeout_ms, char *token, size_t size, long long *expires,
                                 char *err, size_t errlen);

#endif
