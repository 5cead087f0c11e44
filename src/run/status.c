/* status.c: what the launcher serves over HTTP while a cluster runs:
 *   /status        JSON: attempt, restarts, history, every node
 *   /metrics       Prometheus text format
 *   /              a live page (the table, refreshed every second)
 *   /logs/<job>-<index>.log   a node's log (its last 256 KiB)
 * Bound to 127.0.0.1 unless asked otherwise. */
#include "run/status.h"

#include "core/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char page[] =
    "<!doctype html><html><head><meta charset=\"utf-8\"><title>tfos cluster</title>"
    "<style>body{font:14px sans-serif;margin:2em}table{border-collapse:collapse}"
    "td,th{border:1px solid #bbb;padding:4px 10px;text-align:left}.running{color:#070}"
    ".exited{color:#555}.failed{color:#b00}pre{background:#f4f4f4;padding:8px}</style></head><body>"
    "<h1>tfos cluster</h1><p id=\"summary\">loading…</p>"
    "<table><thead><tr><th>node</th><th>executor</th><th>address</th><th>state</th><th>pid</th><th>exit</th>"
    "<th>log</th></tr></thead><tbody id=\"nodes\"></tbody></table>"
    "<h2>history</h2><pre id=\"history\">(no failure)</pre>"
    "<script>\n"
    "function esc(s){return String(s).replace(/[&<>]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;'}[c]));}\n"
    "async function refresh(){\n"
    " try{const r=await fetch('/status');const s=await r.json();\n"
    "  document.getElementById('summary').textContent='state: '+s.cluster.state+' | attempt '+s.attempt+' of '+"
    "(s.max_restarts+1)+' | coordinator '+s.cluster.address;\n"
    "  document.getElementById('nodes').innerHTML=s.cluster.nodes.map(n=>{const name=n.job+':'+n.index;"
    "const cls=n.state==='exited'&&n.exit_code!==0?'failed':n.state;"
    "return '<tr class=\"'+cls+'\"><td>'+esc(name)+'</td><td>'+n.executor_id+'</td><td>'+esc(n.host)+':'+n.port+"
    "'</td><td>'+esc(n.state)+'</td><td>'+n.pid+'</td><td>'+(n.exit_code>=0?n.exit_code:'')+'</td>'+"
    "'<td><a href=\"/logs/'+n.job+'-'+n.index+'.log\">log</a></td></tr>';}).join('');\n"
    "  document.getElementById('history').textContent=s.history.length?s.history.join('\\n'):'(no failure)';\n"
    " }catch(e){document.getElementById('summary').textContent='not reachable: '+e;}\n"
    "}\nrefresh();setInterval(refresh,1000);\n</script></body></html>\n";


static char *status_json(const tfos__status_src *src)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    char *cluster = src->coord ? tfos_coord_status_json(src->coord) : NULL;
    fprintf(f, "{\"attempt\": %d, \"max_restarts\": %d, \"log_dir\": ", src->attempt, src->max_restarts);
    tfos__json_str(f, src->log_dir);
    fprintf(f, ", \"history\": [");
    const char *h = src->history;
    int first = 1;
    while (h && *h) {
        const char *nl = strchr(h, '\n');
        size_t l = nl ? (size_t)(nl - h) : strlen(h);
        char line[1024];
        if (l >= sizeof line)
            l = sizeof line - 1;
        memcpy(line, h, l);
        line[l] = 0;
        char *t = line;
        while (*t == ' ')
            t++;
        fprintf(f, "%s", first ? "" : ", ");
        tfos__json_str(f, t);
        first = 0;
        h = nl ? nl + 1 : h + l;
    }
    fprintf(f, "], \"cluster\": %s}", cluster ? cluster : "null");
    free(cluster);
    fclose(f);
    return buf;
}

static char *metrics(const tfos__status_src *src)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    fprintf(f, "# HELP tfos_attempt Current attempt of the cluster (1 for the first).\n# TYPE tfos_attempt gauge\n"
               "tfos_attempt %d\n", src->attempt);
    fprintf(f, "# HELP tfos_restarts_total Restarts of the cluster so far.\n# TYPE tfos_restarts_total counter\n"
               "tfos_restarts_total %d\n", src->attempt - 1);
    fprintf(f, "# HELP tfos_max_restarts Restarts allowed.\n# TYPE tfos_max_restarts gauge\ntfos_max_restarts %d\n",
            src->max_restarts);
    if (src->coord) {
        int n = tfos_coord_node_count(src->coord);
        fprintf(f, "# HELP tfos_node_up 1 while the node's program runs.\n# TYPE tfos_node_up gauge\n");
        for (int i = 0; i < n; i++) {
            tfos_node_info ni;
            tfos_coord_node(src->coord, i, &ni);
            fprintf(f, "tfos_node_up{job=\"%s\",index=\"%d\",executor=\"%d\"} %d\n", ni.job, ni.index,
                    ni.executor_id, !strcmp(ni.state, "running"));
        }
        fprintf(f, "# HELP tfos_node_exit_code Exit code of a node that ended (128+N for signal N).\n"
                   "# TYPE tfos_node_exit_code gauge\n");
        for (int i = 0; i < n; i++) {
            tfos_node_info ni;
            tfos_coord_node(src->coord, i, &ni);
            if (ni.exit_code >= 0)
                fprintf(f, "tfos_node_exit_code{job=\"%s\",index=\"%d\"} %d\n", ni.job, ni.index, ni.exit_code);
        }
        static const char *const states[] = {"reserving", "running", "stopping", "done", "failed"};
        int st = tfos_coord_state(src->coord);
        fprintf(f, "# HELP tfos_cluster_state 1 for the cluster's current state.\n# TYPE tfos_cluster_state gauge\n");
        for (int k = 0; k < 5; k++)
            fprintf(f, "tfos_cluster_state{state=\"%s\"} %d\n", states[k], st == k);
    }
    fclose(f);
    return buf;
}

static char *node_log(const tfos__status_src *src, const char *name, int *status)
{
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.') || !strncmp(p, "..", 2)) {
            *status = 404;
            return NULL;
        }
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", src->log_dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        *status = 404;
        return NULL;
    }
    long cap = 256 * 1024;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    long from = size > cap ? size - cap : 0;
    fseek(f, from, SEEK_SET);
    char *buf = malloc((size_t)(size - from) + 1);
    size_t got = buf ? fread(buf, 1, (size_t)(size - from), f) : 0;
    fclose(f);
    if (!buf)
        return NULL;
    buf[got] = 0;
    return buf;
}

char *tfos__status_handle(const char *path, const char **ctype, int *status, void *user)
{
    const tfos__status_src *src = user;
    if (!strcmp(path, "/status")) {
        *ctype = "application/json";
        return status_json(src);
    }
    if (!strcmp(path, "/metrics")) {
        *ctype = "text/plain; version=0.0.4";
        return metrics(src);
    }
    if (!strcmp(path, "/") || !strcmp(path, "/index.html")) {
        *ctype = "text/html; charset=utf-8";
        return strdup(page);
    }
    if (!strncmp(path, "/logs/", 6) && strlen(path) > 10 && !strcmp(path + strlen(path) - 4, ".log"))
        return node_log(src, path + 6, status);
    *status = 404;
    return NULL;
}
