/* status.c: the status page: the routes it registers on the program's HTTP
 * server (web/http.h) while a cluster runs:
 *   /status        JSON: attempt, restarts, history, the feed, every node
 *   /metrics       Prometheus text format
 *   /feed/history  JSON: the feed rate, one sample a second (last 300 s)
 *   /              a live page (the table, the feed chart, TensorBoard
 *                  links; refreshed every second)
 *   /logs/<job>-<index>.log   a node's log (its last 256 KiB), when the
 *                  logs are on this machine (log_dir)
 *   /logs/stream/<seq>  the nodes' forwarded output from line seq on
 *                  ("next N" first), where agents forward it (tfos yarn)
 * /metrics is the page's series, then those of each contributor that
 * registered (tfos serve's, src/serve/metrics.c): the page does not know
 * them. Bound to 127.0.0.1 unless asked otherwise. The same routes serve a
 * coordinator on Spark's driver (tfos._tfos.Coordinator.serve_status): no
 * local logs there, and a feed counted by the driver (tfos__feed_meter_set).
 * The feed figures come from the feed meter (meter.c), read without locks:
 * the routes run on the thread that updates the meter. */
#include "web/status.h"

#include "core/json.h"
#include "roles/coord.h"
#include "platform/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TFOS__STATUS_STR2(x) #x
#define TFOS__STATUS_STR(x) TFOS__STATUS_STR2(x)

/* The live page: no external resources, no libraries. render() and chart()
 * draw only from the JSON of /status and /feed/history (the chart is inline
 * SVG), so the page can be checked against canned documents. */
static const char page[] =
    "<!doctype html><html><head><meta charset=\"utf-8\"><title>tfos cluster</title>\n"
    "<style>body{font:14px sans-serif;margin:2em}table{border-collapse:collapse}\n"
    "td,th{border:1px solid #bbb;padding:4px 10px;text-align:left}td.n{text-align:right}.running{color:#070}\n"
    ".exited{color:#555}.failed{color:#b00}pre{background:#f4f4f4;padding:8px}.hint{color:#666;font-size:12px}\n"
    ".starved{color:#b60}.busy{color:#06c}#feedchart{border:1px solid #ddd;background:#fcfcfc}</style></head><body>\n"
    "<h1>tfos cluster</h1><p id=\"summary\">loading…</p><p id=\"tensorboard\"></p>\n"
    "<table><thead><tr><th>node</th><th>executor</th><th>address</th><th>state</th><th>pid</th><th>exit</th>\n"
    "<th>log</th><th>TensorBoard</th><th>rows written</th><th>rows consumed</th><th>buffered</th><th>who waits</th>\n"
    "<th>progress (ctx.report)</th></tr></thead>\n"
    "<tbody id=\"nodes\"></tbody></table>\n"
    "<p id=\"paging\"></p>\n"
    "<p class=\"hint\">rows written: into the node's feed ring; consumed: taken by its program; buffered: written, not yet\n"
    "taken (and how full the ring is). Who waits: the share of the last seconds the trainer slept on an empty ring\n"
    "(it waits on data), or the feeders slept on its full ring (the data waits on the trainer; one feeder that\n"
    "feeds several nodes in turn splits its waits among them).</p>\n"
    "<h2>feed</h2><p id=\"feed\">no feed (tfos run --input FILE feeds files to the chief and workers)</p>\n"
    "<svg id=\"feedchart\" width=\"680\" height=\"200\" viewBox=\"0 0 680 200\" role=\"img\"\n"
    " aria-label=\"feed throughput\"></svg>\n"
    "<h2>start</h2><table><thead><tr><th>phase</th><th>p50 ms</th><th>p99 ms</th><th>max ms</th><th>slowest nodes</th>\n"
    "</tr></thead><tbody id=\"start\"></tbody></table><p id=\"startsum\" class=\"hint\"></p>\n"
    "<h2>history</h2><pre id=\"history\">(no failure)</pre>\n"
    "<script>\n"
    "function esc(s){return String(s).replace(/[&<>\"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','\"':'&quot;'}[c]));}\n"
    "function size(b){return b>=1e9?(b/1e9).toFixed(2)+' GB':b>=1e6?(b/1e6).toFixed(1)+' MB':\n"
    " b>=1e3?(b/1e3).toFixed(1)+' kB':Math.round(b)+' B';}\n"
    "function count(v){v=Number(v);const a=Math.abs(v);return a>=1e9?(v/1e9).toFixed(2)+'G':a>=1e6?(v/1e6).toFixed(2)+'M':\n"
    " a>=1e4?(v/1e3).toFixed(1)+'k':String(Math.round(v));}\n"
    "function num(v){return v==null?'':String(Math.round(v));}\n"
    "function pct(v){return Math.round(100*v)+'\u00a0%';}\n"
    "function metric(v){return typeof v==='number'?(Number.isInteger(v)?String(v):Math.abs(v)>=1e4||Math.abs(v)<1e-3&&v!==0?\n"
    " v.toExponential(3):String(Number(v.toPrecision(4)))):String(v);}\n"
    "function dur(s){s=Math.round(s);return s<90?s+' s':s<5400?Math.floor(s/60)+' min '+s%60+' s':\n"
    " Math.floor(s/3600)+' h '+Math.round(s%3600/60)+' min';}\n"
    "function tbUrl(n){return n.tensorboard_port>0?'http://'+n.host+':'+n.tensorboard_port+'/':'';}\n"
    "function logCell(s,n){const f=n.job+'-'+n.index+'.log';\n"
    " if(s.log_dir!==null)return '<a href=\"/logs/'+esc(n.job)+'-'+n.index+'.log'+esc(location.search)+'\">log</a>';\n"
    " return s.node_log_dir?'<span class=\"remote\" title=\"on the node\\'s host\">'+esc(s.node_log_dir+'/'+f)+'</span>':'';}\n"
    "function tbLink(n){const u=tbUrl(n);return u?'<a class=\"tb\" href=\"'+esc(u)+'\">'+esc(u)+'</a>':'';}\n"
    "function waits(f){if(!f)return '';\n"
    " if(f.wait_data>=0.5)return '<span class=\"starved\">trainer waits on data '+pct(f.wait_data)+'</span>';\n"
    " if(f.wait_trainer>=0.25)return '<span class=\"busy\">data waits on trainer '+pct(Math.min(1,f.wait_trainer))+'</span>';\n"
    " if(f.wait_data>0||f.wait_trainer>0)return 'trainer idle '+pct(f.wait_data)+', feed blocked '+pct(Math.min(1,f.wait_trainer));\n"
    " return '';}\n"
    "function report(n){if(!n.report)return '';\n"
    " const r=Object.entries(n.report).map(([k,v])=>esc(k)+' '+esc(metric(v))).join(' · ');\n"
    " return r+(n.report_age_s!=null&&n.report_age_s>=10?' <span class=\"hint\">('+dur(n.report_age_s)+' ago)</span>':'');}\n"
    "function feedLine(f){\n"
    " if(!f)return 'no feed (tfos run --input FILE feeds files to the chief and workers)';\n"
    " const written=f.state==='done'&&f.rows!=null&&f.rows_consumed!=null;\n"
    " let t=(written?(f.rows_consumed>=f.rows?'done':'all written, the trainers are reading'):f.state)+': ';\n"
    " if(f.rows!=null)t+=count(f.rows)+(f.rows_expected!=null?' of '+count(f.rows_expected):'')+' rows written, ';\n"
    " if(f.rows_consumed!=null)t+=count(f.rows_consumed)+(f.rows?' ('+Math.floor(100*f.rows_consumed/Math.max(1,f.rows))+' %)':'')+\n"
    "  ' consumed, ';\n"
    " t+=(f.bytes!=null?size(f.bytes)+', ':'')+'partitions '+f.partitions_completed+\n"
    "  (f.partitions_expected!=null?' of '+f.partitions_expected:'')+' written'+\n"
    "  (f.partitions_aborted?', '+f.partitions_aborted+' aborted':'');\n"
    " if(f.rows_per_s!=null&&f.state==='feeding')t+=' | writing '+count(f.rows_per_s)+' rows/s';\n"
    " if(f.bytes_per_s!=null&&f.state==='feeding')t+=' ('+size(f.bytes_per_s)+'/s)';\n"
    " if(f.consumed_per_s!=null)t+=' | consuming '+count(f.consumed_per_s)+' rows/s';\n"
    " if(f.input_bytes)t+=' | '+Math.floor(100*f.input_bytes_read/f.input_bytes)+'% of the input read';\n"
    " if(f.eta_s!=null)t+=' | ETA '+dur(f.eta_s);\n"
    " return t;\n"
    "}\n"
    "let first=0;const PAGE=" TFOS__STATUS_STR(TFOS_STATUS_PAGE_NODES) ";\n"
    "function page(d){first=Math.max(0,first+d*PAGE);refresh();return false;}\n"
    "function paging(c){const p=c&&c.nodes_page,e=document.getElementById('paging');\n"
    " if(!p){e.innerHTML='';return;}\n"
    " e.innerHTML='nodes '+p.first+'\u2013'+p.last+' of '+p.total+' '+\n"
    "  (p.first>0?'<a href=\"#\" id=\"prev\" onclick=\"return page(-1)\">previous</a> ':'')+\n"
    "  (p.last+1<p.total?'<a href=\"#\" id=\"next\" onclick=\"return page(1)\">next</a>':'');}\n"
    "function startTable(c){const st=c&&c.start,b=document.getElementById('start'),t=document.getElementById('startsum');\n"
    " if(!st){b.innerHTML='';t.textContent='';return;}\n"
    " b.innerHTML=st.phases.filter(p=>p.nodes).map(p=>'<tr'+(p.phase===st.slowest_phase?' class=\"failed\"':'')+'><td>'+\n"
    "  esc(p.phase)+'</td><td class=\"n\">'+p.p50_ms+'</td><td class=\"n\">'+p.p99_ms+'</td><td class=\"n\">'+p.max_ms+\n"
    "  '</td><td>'+esc(p.slowest.join(', '))+'</td></tr>').join('');\n"
    " t.textContent=(st.spec_ms!=null?'every node had its spec '+st.spec_ms+' ms after launch; ':'')+\n"
    "  (st.slowest_phase?'slowest phase: '+st.slowest_phase:'');}\n"
    "function render(s){\n"
    " const c=s.cluster;\n"
    " paging(c);startTable(c);\n"
    " const of=' of '+(s.max_restarts+1+(s.resizes||0)),el=s.elastic;\n"
    " const size=c&&el?' | '+c.size+' of '+el.max_nodes+' nodes (elastic, min '+el.min_nodes+')':'';\n"
    " document.getElementById('summary').textContent=c?'state: '+c.state+' | attempt '+s.attempt+of+size+\n"
    "  ' | coordinator '+c.address:'attempt '+s.attempt+of+': the cluster is forming again';\n"
    " const nodes=c?c.nodes:[];\n"
    " document.getElementById('nodes').innerHTML=nodes.map(n=>{const name=n.job+':'+n.index;\n"
    "  const cls=n.state==='exited'&&n.exit_code!==0?'failed':n.state;const f=n.feed;\n"
    "  return '<tr class=\"'+esc(cls)+'\"><td>'+esc(name)+'</td><td>'+n.executor_id+'</td><td>'+esc(n.host)+':'+n.port+\n"
    "   '</td><td>'+esc(n.state)+'</td><td>'+n.pid+'</td><td>'+(n.exit_code>=0?n.exit_code:'')+'</td>'+\n"
    "   '<td>'+logCell(s,n)+'</td><td>'+tbLink(n)+'</td>'+\n"
    "   '<td class=\"n\">'+(f?count(f.rows_written):'')+'</td><td class=\"n\">'+(f?count(f.rows_consumed):'')+'</td>'+\n"
    "   '<td class=\"n\">'+(f?count(f.rows_buffered)+' rows, ring '+pct(f.ring_fill):'')+'</td>'+\n"
    "   '<td>'+waits(f)+'</td><td>'+report(n)+'</td></tr>';}).join('');\n"
    " const tbs=nodes.filter(n=>n.tensorboard_port>0);\n"
    " document.getElementById('tensorboard').innerHTML=\n"
    "  tbs.map(n=>'TensorBoard ('+esc(n.job+':'+n.index)+'): '+tbLink(n)).join(' ');\n"
    " document.getElementById('feed').textContent=feedLine(s.feed);\n"
    " document.getElementById('history').textContent=(s.history.length?s.history.join('\\n'):'(no failure)')+\n"
    "  (s.partitions_refed?'\\n'+s.partitions_refed+' partitions fed again after a failure':'');\n"
    "}\n"
    "function chart(h){\n"
    " const svg=document.getElementById('feedchart'),W=680,H=200,L=72,R=12,T=22,B=28,s=h.samples||[];\n"
    " if(!s.length){svg.innerHTML='<text x=\"340\" y=\"100\" text-anchor=\"middle\" fill=\"#888\">no feed yet</text>';return;}\n"
    " const rows=s[s.length-1].rows_per_s!=null,k=rows?'rows_per_s':'bytes_per_s',fmt=rows?v=>count(v)+' rows/s':v=>size(v)+'/s';\n"
    " const series=[[k,'#0a6ed1',rows?'written':'written (bytes)']];\n"
    " if(rows&&s[s.length-1].consumed_per_s!=null)series.push(['consumed_per_s','#2a9d3a','consumed']);\n"
    " const t1=s[s.length-1].t,t0=Math.min(s[0].t,t1-60);\n"
    " const top=Math.max(1,...s.map(p=>Math.max(...series.map(q=>p[q[0]]||0))));\n"
    " const x=t=>(L+(t-t0)/(t1-t0)*(W-L-R)).toFixed(1),y=v=>(T+(1-(v||0)/top)*(H-T-B)).toFixed(1);\n"
    " let g='<line x1=\"'+L+'\" y1=\"'+(H-B)+'\" x2=\"'+(W-R)+'\" y2=\"'+(H-B)+'\" stroke=\"#999\"/>'+\n"
    "  '<line x1=\"'+L+'\" y1=\"'+T+'\" x2=\"'+L+'\" y2=\"'+(H-B)+'\" stroke=\"#999\"/>';\n"
    " for(const v of [top,top/2,0])g+='<text x=\"'+(L-4)+'\" y=\"'+(Number(y(v))+4)+'\" text-anchor=\"end\" font-size=\"11\">'+\n"
    "  esc(v?fmt(v):'0')+'</text>';\n"
    " const span=t1-t0;for(const f of [0,0.5,1]){const t=t0+f*span;\n"
    "  g+='<text x=\"'+x(t)+'\" y=\"'+(H-8)+'\" text-anchor=\"'+(f==0?'start':f==1?'end':'middle')+'\" font-size=\"11\">'+\n"
    "   (f==1?'now':Math.round(t-t1)+' s')+'</text>';}\n"
    " series.forEach((q,i)=>{g+='<polyline id=\"feedline'+(i?'-'+q[2]:'')+'\" fill=\"none\" stroke=\"'+q[1]+'\" stroke-width=\"1.5\" points=\"'+\n"
    "  s.map(p=>x(p.t)+','+y(p[q[0]])).join(' ')+'\"/>'+\n"
    "  '<text x=\"'+(L+8+i*110)+'\" y=\"'+(T-8)+'\" font-size=\"11\" fill=\"'+q[1]+'\">— '+q[2]+'</text>';});\n"
    " svg.innerHTML=g;\n"
    "}\n"
    "async function refresh(){\n"
    " try{const q=location.search,pq=first?(q?q+'&':'?')+'nodes='+first+'-'+(first+PAGE-1):q;\n"
    "  const r=await (pq?fetch('/status'+pq):fetch('/status'));render(await r.json());\n"
    "  const h=await (q?fetch('/feed/history'+q):fetch('/feed/history'));chart(await h.json());\n"
    " }catch(e){document.getElementById('summary').textContent='not reachable: '+e;}\n"
    "}\n"
    "refresh();setInterval(refresh,1000);\n"
    "</script></body></html>\n";

/* ---- /status, /feed/history, /metrics -------------------------------------- */

static void counts_json(FILE *f, const tfos__feed_counts *c, int rows_counted, int bytes_counted, double rows_per_s,
                        double bytes_per_s)
{
    if (rows_counted)
        fprintf(f, "\"rows\": %llu, ", (unsigned long long)c->rows);
    else
        fprintf(f, "\"rows\": null, ");
    if (bytes_counted)
        fprintf(f, "\"bytes\": %llu, \"records\": %llu, ", (unsigned long long)c->bytes,
                (unsigned long long)c->records);
    else
        fprintf(f, "\"bytes\": null, \"records\": null, ");
    fprintf(f, "\"partitions_completed\": %llu, \"partitions_aborted\": %llu, ",
            (unsigned long long)c->partitions_completed, (unsigned long long)c->partitions_aborted);
    if (rows_counted)
        fprintf(f, "\"rows_per_s\": %.1f, ", rows_per_s);
    else
        fprintf(f, "\"rows_per_s\": null, ");
    if (bytes_counted)
        fprintf(f, "\"bytes_per_s\": %.1f", bytes_per_s);
    else
        fprintf(f, "\"bytes_per_s\": null");
}

static void opt_u64(FILE *f, const char *key, uint64_t v, int known)
{
    if (known)
        fprintf(f, ", \"%s\": %llu", key, (unsigned long long)v);
    else
        fprintf(f, ", \"%s\": null", key);
}

/* The "feed" object of /status (null without a feed). */
static void feed_json(FILE *f, const tfos__feed_meter *m)
{
    if (!m || !m->active) {
        fprintf(f, "null");
        return;
    }
    fprintf(f, "{\"state\": \"%s\", \"source\": \"%s\", ", m->state, m->source);
    counts_json(f, &m->total, m->rows_counted, !m->bytes_uncounted, m->rows_per_s, m->bytes_per_s);
    opt_u64(f, "input_bytes", m->input_bytes, m->input_bytes != 0);
    opt_u64(f, "input_bytes_read", m->input_bytes_read, m->input_bytes != 0);
    opt_u64(f, "rows_expected", m->rows_expected, m->rows_counted && m->rows_expected);
    opt_u64(f, "partitions_expected", m->partitions_expected, m->partitions_expected != 0);
    double eta = tfos__feed_meter_eta(m);
    if (eta >= 0)
        fprintf(f, ", \"eta_s\": %.1f", eta);
    else
        fprintf(f, ", \"eta_s\": null");
    if (m->taken_known)
        fprintf(f, ", \"rows_consumed\": %llu, \"consumed_per_s\": %.1f",
                (unsigned long long)tfos__feed_meter_consumed(m), m->taken_per_s);
    else
        fprintf(f, ", \"rows_consumed\": null, \"consumed_per_s\": null");
    int64_t end = m->feed_t1_ms ? m->feed_t1_ms : tfos__now_ms();
    fprintf(f, ", \"elapsed_s\": %.1f, \"nodes\": [", (double)(end - m->feed_t0_ms) / 1000.0);
    for (int i = 0; i < m->nnodes; i++) {
        const tfos__feed_node_meter *n = &m->nodes[i];
        fprintf(f, "%s{\"node\": ", i ? ", " : "");
        tfos__json_str(f, n->name);
        fprintf(f, ", \"executor_id\": %d, ", n->executor_id);
        counts_json(f, &n->c, m->rows_counted, !m->bytes_uncounted, n->rows_per_s, n->bytes_per_s);
        fprintf(f, "}");
    }
    fprintf(f, "]}");
}

static char *feed_history(const tfos__feed_meter *m)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    fprintf(f, "{\"interval_s\": 1, \"window_s\": %d, \"now\": %.1f, \"samples\": [", TFOS__FEED_RATE_WINDOW,
            (double)(tfos__now_ms() - (m ? m->t0_ms : 0)) / 1000.0);
    for (int i = 0; m && i < m->hist_n; i++) {
        const tfos__feed_sample *s =
            &m->hist[(m->hist_head - m->hist_n + i + TFOS__FEED_HISTORY) % TFOS__FEED_HISTORY];
        fprintf(f, "%s{\"t\": %.1f, ", i ? ", " : "", (double)s->t_ms / 1000.0);
        if (m->rows_counted)
            fprintf(f, "\"rows\": %llu, \"rows_per_s\": %.1f, ", (unsigned long long)s->rows, s->rows_per_s);
        else
            fprintf(f, "\"rows\": null, \"rows_per_s\": null, ");
        fprintf(f, "\"bytes\": %llu, \"bytes_per_s\": %.1f, ", (unsigned long long)s->bytes, s->bytes_per_s);
        if (m->taken_known)
            fprintf(f, "\"consumed\": %llu, \"consumed_per_s\": %.1f}", (unsigned long long)s->taken, s->taken_per_s);
        else
            fprintf(f, "\"consumed\": null, \"consumed_per_s\": null}");
    }
    fprintf(f, "]}");
    fclose(f);
    return buf;
}

char *tfos__status_json(const tfos__status_src *src)
{
    return tfos__status_json_page(src, 0, -1);
}

char *tfos__status_json_page(const tfos__status_src *src, int first, int last)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    char *cluster = src->coord ? tfos__coord_status_json_page(src->coord, first, last) : NULL;
    fprintf(f, "{\"attempt\": %d, \"max_restarts\": %d, \"log_dir\": ", src->attempt, src->max_restarts);
    if (src->log_dir)
        tfos__json_str(f, src->log_dir);
    else
        fprintf(f, "null");
    fprintf(f, ", \"node_log_dir\": ");
    if (src->node_log_dir)
        tfos__json_str(f, src->node_log_dir);
    else
        fprintf(f, "null");
    /* the policy's history: one line per failed attempt for people, and
     * the records themselves */
    fprintf(f, ", \"partitions_refed\": %d, \"history\": [", src->partitions_refed);
    int n = src->policy ? tfos_policy_count(src->policy) : 0;
    for (int i = 0; i < n; i++) {
        char line[1200];
        tfos_policy_line(tfos_policy_record(src->policy, i), line, sizeof line);
        fprintf(f, "%s", i ? ", " : "");
        tfos__json_str(f, line);
    }
    char *records = src->policy ? tfos_policy_json(src->policy) : NULL;
    fprintf(f, "], \"attempts\": %s", records ? records : "[]");
    free(records);
    fprintf(f, ", \"resizes\": %d, \"elastic\": ", src->policy ? tfos_policy_resizes(src->policy) : 0);
    if (src->max_nodes > 0)
        fprintf(f, "{\"min_nodes\": %d, \"max_nodes\": %d}", src->min_nodes, src->max_nodes);
    else
        fprintf(f, "null");
    fprintf(f, ", \"feed\": ");
    feed_json(f, src->feed);
    fprintf(f, ", \"cluster\": %s}", cluster ? cluster : "null");
    free(cluster);
    fclose(f);
    return buf;
}

static void feed_metric(FILE *f, const tfos__feed_meter *m, const char *name, const char *type, const char *help,
                        int which)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    if (!m->nnodes) { /* a feed counted as a whole (Spark's driver): one series */
        switch (which) {
        case 0: fprintf(f, "%s %llu\n", name, (unsigned long long)m->total.rows); break;
        case 3: fprintf(f, "%s %llu\n", name, (unsigned long long)m->total.partitions_completed); break;
        case 4: fprintf(f, "%s %llu\n", name, (unsigned long long)m->total.partitions_aborted); break;
        case 5: fprintf(f, "%s %.1f\n", name, m->rows_per_s); break;
        default: break;
        }
        return;
    }
    for (int i = 0; i < m->nnodes; i++) {
        const tfos__feed_node_meter *n = &m->nodes[i];
        fprintf(f, "%s{node=\"%s\"} ", name, n->name);
        switch (which) {
        case 0: fprintf(f, "%llu\n", (unsigned long long)n->c.rows); break;
        case 1: fprintf(f, "%llu\n", (unsigned long long)n->c.bytes); break;
        case 2: fprintf(f, "%llu\n", (unsigned long long)n->c.records); break;
        case 3: fprintf(f, "%llu\n", (unsigned long long)n->c.partitions_completed); break;
        case 4: fprintf(f, "%llu\n", (unsigned long long)n->c.partitions_aborted); break;
        case 5: fprintf(f, "%.1f\n", n->rows_per_s); break;
        default: fprintf(f, "%.1f\n", n->bytes_per_s); break;
        }
    }
}

/* Per-node series (sum() them for the run: Prometheus practice is not to
 * export a total beside its parts), then run-wide gauges. */
static void feed_metrics(FILE *f, const tfos__feed_meter *m)
{
    if (!m || !m->active)
        return;
    if (m->rows_counted)
        feed_metric(f, m, "tfos_feed_rows_total", "counter",
                    m->bytes_uncounted ? "Rows delivered to the nodes by train() (partitions delivered whole)."
                                       : "Rows fed into the node's input ring by tfos run --input (this attempt).",
                    0);
    if (!m->bytes_uncounted) {
        feed_metric(f, m, "tfos_feed_bytes_total", "counter", "Payload bytes committed to the node's input ring.", 1);
        feed_metric(f, m, "tfos_feed_records_total", "counter",
                    "Records (batches) committed to the node's input ring.", 2);
    }
    feed_metric(f, m, "tfos_feed_partitions_completed_total", "counter",
                "Partitions written whole into the node's input ring.", 3);
    feed_metric(f, m, "tfos_feed_partitions_aborted_total", "counter",
                "Partitions marked aborted in the node's input ring (their producer died).", 4);
    if (m->rows_counted)
        feed_metric(f, m, "tfos_feed_rows_per_second", "gauge", "Rows fed per second over the last 5 s.", 5);
    if (!m->bytes_uncounted)
        feed_metric(f, m, "tfos_feed_bytes_per_second", "gauge", "Bytes fed per second over the last 5 s.", 6);
    if (m->bytes_uncounted && m->partitions_expected)
        fprintf(f, "# HELP tfos_feed_partitions_expected Partitions the feed delivers (every epoch).\n"
                   "# TYPE tfos_feed_partitions_expected gauge\ntfos_feed_partitions_expected %llu\n",
                (unsigned long long)m->partitions_expected);
    static const char *const states[] = {"feeding", "done", "failed", "stopped"};
    fprintf(f, "# HELP tfos_feed_state 1 for the feed's current state.\n# TYPE tfos_feed_state gauge\n");
    for (int k = 0; k < 4; k++)
        fprintf(f, "tfos_feed_state{state=\"%s\"} %d\n", states[k], !strcmp(m->state, states[k]));
    if (m->input_bytes)
        fprintf(f, "# HELP tfos_feed_input_bytes Bytes of input the feed reads (file sizes x epochs).\n"
                   "# TYPE tfos_feed_input_bytes gauge\ntfos_feed_input_bytes %llu\n"
                   "# HELP tfos_feed_input_read_bytes Bytes of input read so far.\n"
                   "# TYPE tfos_feed_input_read_bytes gauge\ntfos_feed_input_read_bytes %llu\n",
                (unsigned long long)m->input_bytes, (unsigned long long)m->input_bytes_read);
    if (m->rows_counted && m->rows_expected)
        fprintf(f, "# HELP tfos_feed_rows_expected Rows the whole feed holds (known for .npy inputs).\n"
                   "# TYPE tfos_feed_rows_expected gauge\ntfos_feed_rows_expected %llu\n",
                (unsigned long long)m->rows_expected);
    double eta = tfos__feed_meter_eta(m);
    if (eta >= 0)
        fprintf(f, "# HELP tfos_feed_eta_seconds Estimated seconds until the feed is written.\n"
                   "# TYPE tfos_feed_eta_seconds gauge\ntfos_feed_eta_seconds %.1f\n", eta);
}

/* A per-node series of the rows its agent reported: taken by its program,
 * or (buffered) written and not taken yet. Nodes without a ring have none. */
static void node_rows_metric(FILE *f, const tfos_coord *c, const char *name, const char *type, const char *help,
                             int buffered)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    for (int i = 0, n = tfos_coord_node_count(c); i < n; i++) {
        tfos_node_info ni;
        tfos_coord_node(c, i, &ni);
        if (!ni.has_feed)
            continue;
        uint64_t v = !buffered ? ni.rows_out : ni.rows_in > ni.rows_out ? ni.rows_in - ni.rows_out : 0;
        fprintf(f, "%s{job=\"%s\",index=\"%d\"} %llu\n", name, ni.job, ni.index, (unsigned long long)v);
    }
}

static void metrics(FILE *f, const tfos__status_src *src)
{
    fprintf(f, "# HELP tfos_attempt Current attempt of the cluster (1 for the first).\n# TYPE tfos_attempt gauge\n"
               "tfos_attempt %d\n", src->attempt);
    fprintf(f, "# HELP tfos_restarts_total Restarts of the cluster so far.\n# TYPE tfos_restarts_total counter\n"
               "tfos_restarts_total %d\n", src->attempt - 1);
    fprintf(f, "# HELP tfos_max_restarts Restarts allowed.\n# TYPE tfos_max_restarts gauge\ntfos_max_restarts %d\n",
            src->max_restarts);
    if (src->partitions_refed)
        fprintf(f, "# HELP tfos_partitions_refed_total Partitions fed again after a node failure.\n"
                   "# TYPE tfos_partitions_refed_total counter\ntfos_partitions_refed_total %d\n",
                src->partitions_refed);
    if (src->coord) {
        int n = tfos_coord_node_count(src->coord);
        fprintf(f, "# HELP tfos_node_up 1 while the node's program runs.\n# TYPE tfos_node_up gauge\n");
        for (int i = 0; i < n; i++) {
            tfos_node_info ni;
            tfos_coord_node(src->coord, i, &ni);
            fprintf(f, "tfos_node_up{job=\"%s\",index=\"%d\",executor=\"%d\"} %d\n", ni.job, ni.index,
                    ni.executor_id, !strcmp(ni.state, "running"));
        }
        node_rows_metric(f, src->coord, "tfos_node_rows_consumed_total", "counter",
                         "Rows the node's program took from its input ring.", 0);
        node_rows_metric(f, src->coord, "tfos_node_rows_buffered", "gauge",
                         "Rows written into the node's input ring and not taken yet.", 1);
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
    feed_metrics(f, src->feed);
}

static char *node_log(const tfos__status_src *src, const char *name, int *status)
{
    if (!src->log_dir) {
        *status = 404;
        return NULL;
    }
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

/* ---- the routes ---------------------------------------------------------- */

/* The nodes= of a query ("nodes=A-B" or "nodes=A", among other
 * parameters): 1 with the range, 0 when absent, -1 malformed. */
static int nodes_param(const char *q, int *first, int *last)
{
    for (const char *p = q; p && *p; p = strchr(p, '&') ? strchr(p, '&') + 1 : NULL) {
        if (strncmp(p, "nodes=", 6))
            continue;
        char *end;
        long a = strtol(p + 6, &end, 10), b = a;
        if (end == p + 6 || a < 0 || a > 1 << 24)
            return -1;
        if (*end == '-') {
            const char *s = end + 1;
            b = strtol(s, &end, 10);
            if (end == s || b < a || b > 1 << 24)
                return -1;
        }
        if (*end && *end != '&')
            return -1;
        *first = (int)a;
        *last = (int)b;
        return 1;
    }
    return 0;
}

/* /status: a large cluster's nodes a page at a time (?nodes=FIRST-LAST),
 * so that neither the answer nor the page that polls it every second grows
 * with the cluster; the counts and the start statistics cover every node. */
static int route_status(const tfos__http_req *rq, tfos__http_resp *rs, void *user)
{
    const tfos__status_src *src = user;
    int first = 0, last = -1;
    int has = nodes_param(rq->query, &first, &last);
    if (has < 0 || (has && last - first + 1 > TFOS_STATUS_PAGE_MAX)) {
        char bad[160];
        snprintf(bad, sizeof bad, "nodes=FIRST-LAST: two executor ids, FIRST <= LAST, at most %d nodes a page "
                 "(e.g. /status?nodes=0-%d)\n", TFOS_STATUS_PAGE_MAX, TFOS_STATUS_PAGE_NODES - 1);
        rs->status = 400;
        rs->ctype = "text/plain";
        rs->body = strdup(bad);
        return 0;
    }
    if (!has && src->coord && tfos_coord_node_count(src->coord) > TFOS_STATUS_PAGE_NODES)
        last = TFOS_STATUS_PAGE_NODES - 1;
    rs->ctype = "application/json";
    rs->body = tfos__status_json_page(src, first, last);
    rs->status = rs->body ? 200 : 500;
    return 0;
}

/* The page's series, then each contributor's (tfos__status_add_metrics). */
static int route_metrics(const tfos__http_req *rq, tfos__http_resp *rs, void *user)
{
    (void)rq;
    const tfos__status_src *src = user;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        rs->status = 500;
        return 0;
    }
    metrics(f, src);
    for (int i = 0; i < src->nmetrics; i++)
        src->metrics[i].fn(f, src->metrics[i].user);
    fclose(f);
    rs->ctype = "text/plain; version=0.0.4";
    rs->body = buf;
    return 0;
}

static int route_history(const tfos__http_req *rq, tfos__http_resp *rs, void *user)
{
    (void)rq;
    const tfos__status_src *src = user;
    rs->ctype = "application/json";
    rs->body = feed_history(src->feed);
    rs->status = rs->body ? 200 : 500;
    return 0;
}

static int route_page(const tfos__http_req *rq, tfos__http_resp *rs, void *user)
{
    (void)rq;
    (void)user;
    rs->ctype = "text/html; charset=utf-8";
    rs->body = strdup(page);
    return 0;
}

/* /logs/<job>-<index>.log, /logs/stream/<seq> */
static int route_logs(const tfos__http_req *rq, tfos__http_resp *rs, void *user)
{
    const tfos__status_src *src = user;
    const char *path = rq->path;
    if (!strncmp(path, "/logs/stream/", 13) && src->lines) {
        char *end;
        unsigned long long from = strtoull(path + 13, &end, 10);
        if (end == path + 13 || *end) {
            rs->status = 400;
            return 0;
        }
        rs->body = tfos__logbuf_since(src->lines, from, 256 * 1024);
        return 0;
    }
    rs->status = 404;
    if (strlen(path) > 10 && !strcmp(path + strlen(path) - 4, ".log")) {
        rs->status = 200;
        rs->body = node_log(src, path + 6, &rs->status);
    }
    return 0;
}

int tfos__status_routes(tfos__http *h, tfos__status_src *src)
{
    const tfos__http_route routes[] = {
        {.path = "/status", .methods = TFOS_HTTP_GET, .fn = route_status, .user = src},
        {.path = "/metrics", .methods = TFOS_HTTP_GET, .fn = route_metrics, .user = src},
        {.path = "/feed/history", .methods = TFOS_HTTP_GET, .fn = route_history, .user = src},
        {.path = "/", .methods = TFOS_HTTP_GET, .fn = route_page, .user = src},
        {.path = "/index.html", .methods = TFOS_HTTP_GET, .fn = route_page, .user = src},
        {.path = "/logs/", .prefix = 1, .methods = TFOS_HTTP_GET, .fn = route_logs, .user = src},
    };
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        int rc = tfos__http_add(h, &routes[i]);
        if (rc)
            return rc;
    }
    return 0;
}

int tfos__status_add_metrics(tfos__status_src *src, tfos__metrics_fn fn, void *user)
{
    if (!fn || src->nmetrics == TFOS__STATUS_MAX_METRICS)
        return TFOS_EFULL;
    src->metrics[src->nmetrics].fn = fn;
    src->metrics[src->nmetrics++].user = user;
    return 0;
}
